"""The reliability matrix, continued: what normdiff writes, when the machine refuses to write it,
what it must not replace, and the environment it is started in (README: "Under faults").

Each attempt runs the real `normdiff` program as tests/test_reliability.py does (its own working
folder and TMPDIR, every process tagged) and asserts the same promises: the exit status, the one
line that names the file, the reason and the fix, no traceback, no process left, an empty TMPDIR,
no staging folder or temporary file left, and the state of the report folder (an earlier report
intact). The faults are real, made without root's help:
  * a file-size limit (RLIMIT_FSIZE, with SIGXFSZ ignored, so a write past it fails with EFBIG),
    set in a small wrapper that then execs normdiff;
  * a full disk (ENOSPC), a mount point as --out (renaming it gives EBUSY) and a file system made
    read-only during the run (EROFS): a small tmpfs mounted in a private mount namespace
    (`unshare -m`; skipped where the namespace cannot be made). Run as root (as on this project's
    machine), a read-only folder (chmod) would not stop a write: the tmpfs remounted read-only does;
  * device files and named pipes, which a new file would replace; empty paths;
  * a HOME that cannot be written; ASCII-only streams (a C locale).
A refused write inside the report folder's own steps (EBUSY of a bind mount, EXDEV, EACCES) is
tested in process in tests/reports/test_folder.py.
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest

_spec = importlib.util.spec_from_file_location("reliability_matrix", Path(__file__).parent / "test_reliability.py")
matrix = sys.modules.setdefault(_spec.name, importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(matrix)  # the matrix's machinery: how a folder is prepared, a process found
CASE, TAG, TINY, check, suite = matrix.CASE, matrix.TAG, matrix.TINY, matrix.check, matrix.suite

WIDE = {**TINY, "wide.toml": suite(shape="2x256")}
RUN = ["run", "--suite", "tiny.toml", "-i", "numpy", "--out", "out"]
EARLIER = ["run", "--suite", "tiny.toml", "-i", "numpy", "--out", "out", "-q"]  # an earlier report, 4x128
WIDE_RUN = ["run", "--suite", "wide.toml", "-i", "numpy", "--out", "out"]  # the new one, 2x256

# Sizes of what a tiny run writes (1 case, numpy): the CSVs, meta.json and junit.xml are under
# 4 KB, the plots 15 and 27 KB, report.html 70 KB, a repro script 23 KB, explain's plot 24 KB.
ABOVE_PLOTS = 40_000  # every file but report.html fits
AMONG_PLOTS = 20_000  # a plot is the first file that does not fit
SMALL = 10_000  # fits a report's CSVs, not a script or a plot

# Lowers the file-size limit, ignores SIGXFSZ (a write past the limit then fails with EFBIG instead
# of killing the process), and becomes the command: the limit and the ignored signal are inherited
# by normdiff and everything it starts.
LIMITED = ("import os, resource, signal, sys\n"
           "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
           "limit = int(sys.argv[1])\n"
           "resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))\n"
           "os.execv(sys.argv[2], sys.argv[2:])\n")

# Inside a private mount namespace: a tmpfs at MNT, the earlier command (its output dropped), the
# tmpfs shrunk to what it holds plus `free` bytes, the command itself; then what MNT holds is copied
# out (it vanishes with the namespace) and the command's exit status is passed on.
IN_TMPFS = """import json, os, subprocess, sys
spec = json.loads(sys.argv[1])
subprocess.run(["mount", "-t", "tmpfs", "-o", "size=" + spec["size"], "tmpfs", spec["mnt"]], check=True)
if spec["before"]:
    subprocess.run(spec["before"], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
if spec["free"]:
    held = os.statvfs(spec["mnt"])
    size = (held.f_blocks - held.f_bfree) * held.f_frsize + spec["free"]
    subprocess.run(["mount", "-o", f"remount,size={size}", spec["mnt"]], check=True)
code = subprocess.run(spec["main"]).returncode
subprocess.run(["cp", "-a", spec["mnt"] + "/.", spec["snapshot"]], check=True)
sys.exit(code)
"""

# A user function that makes the tmpfs read-only when it is called (mid-run, after --out was
# checked), and computes a correct RMSNorm.
REMOUNTS = """import os, subprocess
import numpy as np

def rms_norm(x, weight, eps):
    subprocess.run(["mount", "-o", "remount,ro", os.environ["NORMDIFF_TEST_MNT"]], check=True)
    xf = x.astype(np.float32)
    return weight * (xf / np.sqrt((xf * xf).mean(-1, keepdims=True) + eps)).astype(x.dtype)
"""

NON_ASCII = """def bad(x, weight, eps):
    raise ValueError("naïve — ✓")
"""


@dataclass
class Fault:
    id: str
    argv: list[str]  # after `normdiff`, filled in as in test_reliability ({H}, {w}, ...)
    code: int
    says: str  # a regular expression the output (stdout and stderr) must match
    folder: str = ""  # "absent", "complete", "incomplete": the state of {w}/out afterwards
    files: dict[str, str] = field(default_factory=dict)
    then: Callable | None = None  # (work folder, stdout, stderr) -> None
    fsize: int = 0  # the file-size limit, bytes (0: none)
    tmpfs: str = ""  # the size of a tmpfs mounted at {w}/mnt for the command ("": none)
    free: int = 0  # bytes left free on the tmpfs once `before` has run (0: as it is)
    before: list[str] | None = None  # a command run first without the fault (an earlier report)
    env: dict = field(default_factory=dict)  # changes to the environment ({w} filled; None: removed)
    setup: Callable | None = None  # (work folder) -> None, after the files are written


def summary_printed(work, stdout, stderr):
    assert "agreement groups: {numpy}" in stdout, stdout
    assert re.search(r"^1 cases in [\d.]+ s(; baseline saved to b.json)?$", stdout, re.M), stdout
    assert "report written" not in stdout


def nothing_else_in(*names):
    def then(work, stdout, stderr):
        assert sorted(p.name for p in work.iterdir()) == sorted([*names, "link"]), list(work.iterdir())
    return then


def earlier_report_kept(folder="out"):
    def then(work, stdout, stderr):
        out = work / folder
        meta = json.loads((out / "meta.json").read_text())
        manifest = json.loads((out / ".normdiff-manifest.json").read_text())
        assert meta["suite"] == "tiny" and manifest["complete"]
        assert "4x128" in (out / "results.csv").read_text() and "4x128" in (out / "report.html").read_text()
        assert sorted(manifest["files"]) == sorted(str(p.relative_to(out)) for p in out.rglob("*")
                                                   if p.is_file() and p.name != ".normdiff-manifest.json")
    return then


def new_report_in(folder):
    def then(work, stdout, stderr):
        out = work / folder
        meta = json.loads((out / "meta.json").read_text())
        assert meta["suite"] == "wide" and json.loads((out / ".normdiff-manifest.json").read_text())["complete"]
        assert "2x256" in (out / "results.csv").read_text() and "4x128" not in (out / "results.csv").read_text()
        assert (out / "plots" / "agreement.png").stat().st_size > 0
    return then


def json_says_lost(work, stdout, stderr):
    doc = json.loads(stdout)  # still exactly one JSON object
    assert doc["exit_code"] == 2 and doc["run_exit_code"] == 0 and doc["report"] is None, doc
    assert "report.html" in doc["error"] and doc["summary"][0]["implementation"] == "numpy"
    assert stderr == ""


def both(*thens):
    def then(work, stdout, stderr):
        for t in thens:
            t(work, stdout, stderr)
    return then


def baseline_saved(work, stdout, stderr):
    assert json.loads((work / "b.json").read_text())["format"].startswith("normdiff-baseline")


def file_is(name, text):
    def then(work, stdout, stderr):
        assert (work / name).read_text() == text
    return then


def fifo(name):
    def setup(work):
        os.mkfifo(work / name)
    return setup


def still_a_fifo(name):
    def then(work, stdout, stderr):
        assert stat.S_ISFIFO((work / name).lstat().st_mode), f"{name} was replaced"
    return then


NO_HOME = {"HOME": "{w}/afile", "XDG_CONFIG_HOME": None, "XDG_CACHE_HOME": None, "MPLCONFIGDIR": None}
ASCII_STREAMS = {"LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}


FAULTS = [
    # a file-size limit (EFBIG): the report is computed, then refused; nothing half-written is left
    Fault("fsize-report-html", RUN, 2,
          r"^normdiff: error: --out out: cannot write report.html \(File too large, EFBIG\); raise the file-size "
          r"limit \(ulimit -f\); nothing was written; the run's own exit status: 0$", "absent", TINY,
          fsize=ABOVE_PLOTS, then=both(summary_printed, nothing_else_in("tiny.toml"))),
    Fault("fsize-among-plots", [*RUN, "-q"], 2,
          r"^normdiff: error: --out out: cannot write plots/\w+\.png \(File too large, EFBIG\)[^\n]*\n\Z", "absent",
          TINY, fsize=AMONG_PLOTS),
    Fault("fsize-earlier-report-kept", WIDE_RUN, 2, r"cannot write report.html \(File too large, EFBIG\); raise the "
          r"file-size limit \(ulimit -f\); out is as it was", "complete", WIDE, fsize=ABOVE_PLOTS, before=EARLIER,
          then=earlier_report_kept()),
    Fault("fsize-json", [*RUN, "--json"], 2, r"File too large", "absent", TINY, fsize=ABOVE_PLOTS,
          then=json_says_lost),
    Fault("fsize-baseline-still-saved", [*RUN, "--save-baseline", "b.json"], 2, r"cannot write report.html", "absent",
          TINY, fsize=ABOVE_PLOTS, then=both(baseline_saved, summary_printed)),
    Fault("fsize-script", ["repro", CASE, "-i", "numpy", "--script", "replay.py"], 2,
          r"max_ulp [\d.]+\n.*^normdiff: error: --script replay.py: cannot write it \(File too large, EFBIG\); raise "
          r"the file-size limit \(ulimit -f\); nothing was written$", fsize=SMALL, then=nothing_else_in()),
    Fault("fsize-script-earlier-kept", ["repro", CASE, "-i", "numpy", "--script", "replay.py", "--json"], 2,
          r'"script": null, "error": "--script replay.py: cannot write it \(File too large, EFBIG\).*replay.py is as '
          r'it was"', files={"replay.py": "# an earlier script\n"}, fsize=SMALL,
          then=file_is("replay.py", "# an earlier script\n")),
    # check: the verdict is the answer, the folder an extra: its status stands, but never 0
    Fault("fsize-check-out-disagrees", check("{H}:all_inf", "--out", "out"), 1,
          r"DISAGREES.*^normdiff: error: --out out: cannot write report.html \(File too large", "absent",
          fsize=ABOVE_PLOTS),
    Fault("fsize-check-out-agrees", check("{H}:correct", "--out", "out"), 2,
          r"AGREES.*^normdiff: error: --out out: cannot write report.html \(File too large", "absent",
          fsize=ABOVE_PLOTS),
    Fault("fsize-explain-plot", ["explain", "gamma-plus-one", "--suite", "tiny.toml", "--plot", "bug.png"], 2,
          r"^gamma-plus-one: .*^Seen in: [^\n]*\nnormdiff: error: --plot bug.png: cannot write it \(File too large, "
          r"EFBIG\)", files=TINY, fsize=SMALL, then=nothing_else_in("tiny.toml")),
    # a full disk (ENOSPC), a mount point, a file system made read-only mid-run: a real tmpfs
    Fault("enospc-new-folder", ["run", "--suite", "tiny.toml", "-i", "numpy", "--out", "mnt/out"], 2,
          r"^normdiff: error: --out mnt/out: cannot write [\w./]+ \(No space left on device, ENOSPC\); free some "
          r"space or give another --out; nothing was written", files=TINY, tmpfs="64k",
          then=both(summary_printed, lambda work, *_: not list((work / "snapshot").iterdir()) or pytest.fail(
              f"left on the disk: {list((work / 'snapshot').iterdir())}"))),
    Fault("mount-point-out", ["run", "--suite", "wide.toml", "-i", "numpy", "--out", "mnt", "-q"], 0, r"^\Z",
          files=WIDE, tmpfs="1m", before=["run", "--suite", "tiny.toml", "-i", "numpy", "--out", "mnt", "-q"],
          then=new_report_in("snapshot")),
    Fault("mount-point-enospc-earlier-kept", ["run", "--suite", "wide.toml", "-i", "numpy", "--out", "mnt", "-q"], 2,
          r"^normdiff: error: --out mnt: cannot write [\w./]+ \(No space left on device, ENOSPC\); free some space or "
          r"give another --out; mnt is as it was", files=WIDE, tmpfs="1m", free=40_000,
          before=["run", "--suite", "tiny.toml", "-i", "numpy", "--out", "mnt", "-q"],
          then=earlier_report_kept("snapshot")),
    Fault("erofs-mid-run", ["run", "--suite", "tiny.toml", "-i", "numpy", "--out", "mnt/out", "-q", "--target",
                            "remounts.py:rms_norm", "--op", "rms_norm", "--convention", "qwen3"], 2,
          r"^normdiff: error: --out mnt/out: cannot write in mnt \(Read-only file system, EROFS\); give another "
          r"--out; nothing was written", files={**TINY, "remounts.py": REMOUNTS}, tmpfs="1m",
          env={"NORMDIFF_TEST_MNT": "{w}/mnt"}),
    # files normdiff would have to replace to write: refused before any work
    Fault("script-dev-full", ["repro", CASE, "-i", "numpy", "--script", "/dev/full"], 2,
          r"--script /dev/full: is a character device, not a file; give a file name"),
    Fault("baseline-fifo", [*RUN, "--save-baseline", "pipe"], 2,
          r"--save-baseline pipe: is a named pipe \(FIFO\), not a file", "absent", TINY, setup=fifo("pipe"),
          then=still_a_fifo("pipe")),
    # the environment
    Fault("home-unwritable", [*RUN, "-q"], 0, r"^\Z", "complete", {**TINY, "afile": "x\n"}, env=NO_HOME),
    Fault("ascii-streams-user-error", check("{w}/u.py:bad"), 2, r"ValueError: na\\xefve \\u2014 \\u2713",
          files={"u.py": NON_ASCII}, env=ASCII_STREAMS),
    Fault("ascii-encoding-out-name", ["run", "--suite", "tiny.toml", "-i", "numpy", "--out", "naïve"], 0,
          r"report written to na\\xefve/", files=TINY, env={"PYTHONIOENCODING": "ascii"}),
    # empty paths: a usage error naming the option, nothing written
    *[Fault(f"empty{option}", argv, 2, rf"argument {option}: an empty path: give ", "absent", TINY,
            then=nothing_else_in("tiny.toml"))
      for option, argv in [("--out", ["run", "--suite", "tiny.toml", "-i", "numpy", "--out", ""]),
                           ("--save-baseline", [*RUN, "--save-baseline", ""]),
                           ("--baseline", [*RUN, "--baseline", ""]),
                           ("--script", ["repro", CASE, "-i", "numpy", "--script", ""]),
                           ("--plot", ["explain", "gamma-plus-one", "--plot", ""])]],
    Fault("check-empty--out", check("{H}:correct", "--out", ""), 2, r"argument --out: an empty path",
          then=nothing_else_in()),
]


def _namespaces() -> str:
    """Why a tmpfs cannot be mounted in a private mount namespace here ("" when it can)."""
    if not shutil.which("unshare") or not shutil.which("mount"):
        return "no unshare or mount program"
    probe = subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=4k tmpfs /mnt"],
                           capture_output=True, text=True)
    return "" if probe.returncode == 0 else f"no private mount namespace here: {probe.stderr.strip()}"


def _command(fault: Fault, work: Path) -> list[str]:
    program = [sys.executable, "-m", "normdiff.harness.commands.cli"]
    main = program + [matrix._fill(a, work) for a in fault.argv]
    if fault.fsize:
        main = [sys.executable, "-c", LIMITED, str(fault.fsize), *main]
    if not fault.tmpfs:
        return main
    (work / "mnt").mkdir()
    (work / "snapshot").mkdir()
    spec = {"mnt": str(work / "mnt"), "size": fault.tmpfs, "free": fault.free, "main": main,
            "before": program + fault.before if fault.before else None, "snapshot": str(work / "snapshot")}
    return ["unshare", "-m", sys.executable, "-c", IN_TMPFS, json.dumps(spec)]


@pytest.mark.parametrize("fault", [pytest.param(f, id=f.id) for f in FAULTS])
def test_fault(fault: Fault, tmp_path: Path):
    if fault.tmpfs and (why := _namespaces()):
        pytest.skip(why)
    work, tmp = tmp_path / "work", tmp_path / "tmp"
    work.mkdir()
    tmp.mkdir()
    matrix._prepare(work, fault.files)
    if fault.setup:
        fault.setup(work)
    tag = uuid.uuid4().hex
    env = dict(os.environ, TMPDIR=str(tmp), **{TAG: tag})
    for name, value in fault.env.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = matrix._fill(value, work)
    if fault.before and not fault.tmpfs:
        done = subprocess.run([sys.executable, "-m", "normdiff.harness.commands.cli", *fault.before], cwd=work,
                              env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
    done = subprocess.run(_command(fault, work), cwd=work, env=env, capture_output=True, timeout=300)
    # as the bytes came: under an ASCII locale normdiff writes escapes, never raw non-ASCII text
    stdout, stderr = (done.stdout.decode("utf-8", "surrogateescape"), done.stderr.decode("utf-8", "surrogateescape"))
    out = stdout + stderr
    assert "Traceback" not in out, out
    assert done.returncode == fault.code, out
    assert re.search(fault.says, out, re.S | re.M), out
    if fault.env.get("PYTHONIOENCODING") == "ascii" or fault.env.get("LC_ALL") == "C":
        assert out.isascii(), out
    deadline = time.monotonic() + 5
    while matrix._tagged(tag) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not matrix._tagged(tag), f"processes left behind: {matrix._tagged(tag)}"
    assert not list(tmp.iterdir()), f"left in TMPDIR: {list(tmp.iterdir())}"
    leftovers = [p for p in [*work.glob("**/.*normdiff-staging*"), *work.glob("**/.*.tmp"),
                             *work.glob("**/.*normdiff-old*")] if not p.is_symlink()]
    assert not leftovers, f"temporary files left: {leftovers}"
    if fault.folder:
        assert matrix._folder_state(work / "out") == fault.folder
    if fault.then:
        fault.then(work, stdout, stderr)
