"""The reliability matrix: normdiff tried as a careless and as a hostile user would.

Each attempt runs the real `normdiff` program in a fresh process (its own working folder and TMPDIR,
every process it starts tagged through an environment variable) and asserts the five promises of
docs/faults.md ("Under faults"):
  * the exit status (0 agrees, 1 disagrees, 2 usage error or nothing could run, 3 partial,
    128 + N stopped by signal N);
  * the message: a line that names the problem and the fix;
  * no traceback;
  * no process left: no process carrying the attempt's tag in /proc once normdiff has exited, and
    nothing left in its TMPDIR;
  * the report folder's state: absent (refused before any work), complete or incomplete (its
    manifest says which), and the files around it untouched.
The Python API's misuse is in tests/harness/engine/test_runner_faults.py (in-process).
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
HOSTILE = FIXTURES / "hostile.py"
MODULES = FIXTURES / "hostile_modules"
PROGRAM = FIXTURES / "command_program.py"
TAG = "NORMDIFF_TEST_TAG"
CASE = "rms_norm@qwen3/bf16/4x128/normal/w=trained"
FAST = ["--dtype", "bfloat16", "--regime", "normal"]  # the 12 bf16 cases of check's default suite
GROUP = """[[group]]
ops = ["rms_norm"]
conventions = ["qwen3"]
dtypes = ["bfloat16"]
shapes = ["SHAPE"]
regimes = ["REGIME"]
"""


def suite(shape="4x128", regime="normal", extra="", head=""):
    """The text of a one-group suite file, with one thing changed."""
    return head + GROUP.replace("SHAPE", shape).replace("REGIME", regime) + extra


@dataclass
class Attempt:
    id: str
    argv: list[str]  # after `normdiff`; {H} {M} {P} {py} {w} (the working folder) are filled in
    code: int
    says: str  # a regular expression the output (stdout and stderr) must match
    folder: str = ""  # "absent", "complete", "incomplete": the state of {w}/out afterwards
    files: dict[str, str] = field(default_factory=dict)  # written into the working folder first
    then: Callable | None = None  # (work folder, output) -> None: more assertions
    stop: int = 0  # a signal sent to normdiff once its worker runs
    group: bool = False  # send it to normdiff's whole process group (a Ctrl-C at a terminal)
    slow: bool = False
    console: bool = False  # run the installed `normdiff` script (as a user does: no current folder
    # on the parent's import path) rather than python -m (which puts it first)
    home: bool = False  # run with HOME an empty folder of its own (beside the working folder)


def check(target, *extra):
    return ["check", target, "--op", "rms_norm", "--convention", "qwen3", *FAST, *extra]


def command(mode, *extra):
    return ["check", "--command", f"{{py}} {{P}} {mode}", "--op", "rms_norm", "--convention", "qwen3", *FAST, *extra]


def run_with(target, *extra, suite_file="tiny.toml"):
    return ["run", "--suite", suite_file, "-i", "numpy", "--out", "out", "--with", target, "--op", "rms_norm",
            "--convention", "qwen3", *extra]


TINY = {"tiny.toml": suite()}
# modules in the working folder that shadow real ones: imported, they say so and fail
SHADOWS = {name: f"print('SHADOW {name} imported')\nraise ImportError('the {name} in the working folder')\n"
           for name in ("normdiff.py", "numpy.py", "torch.py")}
MYNORM = """import numpy as np


def rms_norm(x, weight, eps):
    xf = x.astype(np.float32)
    return weight * (xf / np.sqrt((xf * xf).mean(-1, keepdims=True) + eps)).astype(x.dtype)
"""


# ---- assertions some attempts add ----------------------------------------------------------------

def untouched(name, text):
    def then(work, out):
        assert (work / name).read_text() == text, f"{name} was changed"
    return then


def user_file_kept(work, out):
    assert (work / "out" / "notes.txt").read_text() == "mine\n"
    assert (work / "out" / "changes.csv").read_text() == "my own changes\n"
    assert (work / "out" / "results.csv").exists()


def cwd_report_kept_files(work, out):
    assert (work / "changes.csv").read_text() == "my own changes\n"
    assert (work / "results.csv").exists() and (work / ".normdiff-manifest.json").exists()


def outside_untouched(work, out):
    assert (work / "outside.txt").read_text() == "outside\n"
    assert not (work / "out" / "results.csv").is_symlink()


def rows_agree(*names):
    def then(work, out):
        import pandas as pd

        rows = pd.read_csv(work / "out" / "results.csv")
        for name in names:
            ours = rows[rows["implementation"] == name]
            assert len(ours) and ours["outcome"].isin(["identical", "agree"]).all(), ours["outcome"].value_counts()
    return then


numpy_rows_agree = rows_agree("numpy")


def no_shadow_imported(work, out):
    assert "SHADOW" not in out
    rows_agree("numpy", "torch")(work, out)


def markup_is_data(work, out):
    md = (work / "out" / "summary.md").read_text()
    page = (work / "out" / "report.html").read_text()
    assert "<script" not in md and "</table><script>" not in page and "alert(1)</script>" not in page
    assert "&lt;/table&gt;&lt;script&gt;" in page
    ET.fromstring((work / "out" / "junit.xml").read_bytes())  # still well-formed XML
    assert "\x1b" not in out and "\x07" not in out


def no_control_characters(work, out):
    assert "\x1b" not in out and "\x07" not in out
    assert r"\x1b" in out  # shown, escaped


def no_raw_tags(work, out):
    page = next((work / "out").glob("report.html")).read_text()
    assert "<b>x</b>" not in page
    md = (work / "out" / "summary.md").read_text()
    assert not re.search(r"<b>", re.sub(r"`[^`]*`", "", md))


def nothing_planted(work, out):
    assert not (work / "pwned").exists(), "a forged reply ran code in normdiff"


def home_untouched(work, out):
    left = sorted(str(p.relative_to(work.parent / "home")) for p in (work.parent / "home").rglob("*"))
    assert not left, f"written into HOME: {left}"


def last_run_wins(work, out):
    meta = json.loads((work / "out" / "meta.json").read_text())
    manifest = json.loads((work / "out" / ".normdiff-manifest.json").read_text())
    assert meta["suite"] in ("tiny", "tiny2") and manifest["complete"]
    results = (work / "out" / "results.csv").read_text()
    assert ("4x128" in results) == (meta["suite"] == "tiny")  # every file from the same run


# ---- the attempts ----------------------------------------------------------------------------------

ATTEMPTS = [
    # options, checked before any work
    Attempt("timeout-nan", ["run", "--suite", "tiny.toml", "--timeout", "nan"], 2, r"finite number of seconds",
            "absent", TINY),
    Attempt("timeout-inf", ["run", "--suite", "tiny.toml", "--timeout", "inf"], 2, r"finite number of seconds",
            "absent", TINY),
    Attempt("timeout-zero", ["check", "{H}:correct", "--op", "rms_norm", "--convention", "qwen3", "--timeout", "0"], 2,
            r"above 0"),
    Attempt("timeout-negative", ["repro", CASE, "-i", "numpy", "--timeout", "-5"], 2, r"above 0"),
    Attempt("timeout-word", ["run", "--timeout", "soon"], 2, r"not a number of seconds"),
    Attempt("out-is-a-file", ["run", "--suite", "tiny.toml", "--out", "afile"], 2, r"is an existing file, not a folder",
            files={**TINY, "afile": "precious\n"}, then=untouched("afile", "precious\n")),
    Attempt("out-dev-null", ["run", "--suite", "tiny.toml", "--out", "/dev/null"], 2, r"existing file", files=TINY),
    Attempt("out-under-a-file", ["run", "--suite", "tiny.toml", "--out", "afile/report"], 2,
            r"is a file, so no folder can be made under it", files={**TINY, "afile": "x\n"}),
    Attempt("out-read-only", ["run", "--suite", "tiny.toml", "--out", "/sys/normdiff-report"], 2,
            r"cannot write in /sys", files=TINY),
    Attempt("out-name-too-long", ["run", "--suite", "tiny.toml", "--out", "a/" + "x" * 300 + "/b"], 2,
            r"cannot create it \(File name too long\)", files=TINY,
            then=lambda work, out: not (work / "a").exists() or pytest.fail("the probe left a folder")),
    Attempt("out-symlink", ["run", "--suite", "tiny.toml", "--out", "link"], 2, r"is a symbolic link", files=TINY),
    Attempt("check-out-file", check("{H}:correct", "--out", "afile"), 2, r"existing file", files={"afile": "x\n"},
            then=untouched("afile", "x\n")),
    Attempt("script-missing-folder", ["repro", CASE, "-i", "numpy", "--script", "nowhere/replay.py"], 2,
            r"--script nowhere/replay.py: its folder nowhere does not exist"),
    Attempt("script-read-only", ["repro", CASE, "-i", "numpy", "--script", "/sys/replay.py"], 2, r"cannot write"),
    Attempt("plot-is-a-folder", ["explain", "eps-outside-sqrt", "--plot", "adir"], 2, r"--plot adir: is a folder",
            files={"adir/keep": "x"}),
    Attempt("baseline-read-only", ["run", "--suite", "tiny.toml", "-i", "numpy", "--save-baseline", "/sys/b.json"], 2,
            r"--save-baseline /sys/b.json: cannot write", "absent", TINY),
    Attempt("baseline-corrupt", ["run", "--suite", "tiny.toml", "-i", "numpy", "--baseline", "b.json", "--out", "out"],
            2, r"b.json", "absent", {**TINY, "b.json": "{not json"}),
    Attempt("unknown-suite", ["run", "--suite", "nosuch"], 2, r"unknown suite 'nosuch'; known: default, kernel, large, smoke"),
    Attempt("unknown-implementation", ["run", "-i", "nosuch"], 2, r"nosuch.*known"),
    Attempt("op-without-with", ["run", "--op", "rms_norm"], 2, r"applies to the --target before it"),
    Attempt("check-nothing", ["check", "--op", "rms_norm", "--convention", "qwen3"], 2, r"nothing to check"),
    Attempt("check-missing-file", check("nosuch.py:f"), 2, r"file not found: nosuch.py"),
    # suite files: a schema, the file and group named
    Attempt("suite-groups-typo", ["run", "--suite", "s.toml", "--out", "out"], 2,
            r"unknown top-level key 'groups' \(did you mean 'group'\?\)", "absent",
            {"s.toml": suite().replace("[[group]]", "[[groups]]")}),
    Attempt("suite-description-typo", ["run", "--suite", "s.toml", "--out", "out"], 2,
            r"did you mean 'description'", "absent", {"s.toml": suite(head='descripton = "x"\n')}),
    Attempt("suite-unknown-key", ["run", "--suite", "s.toml"], 2, r"s.toml group 1: unknown key 'colour'",
            "absent", {"s.toml": suite(extra="colour = 1\n")}),
    Attempt("suite-samples-string", ["run", "--suite", "s.toml"], 2, r"group 1: 'samples' must be a whole number.*'3'",
            "absent", {"s.toml": suite(extra='samples = "3"\n')}),
    Attempt("suite-samples-zero", ["run", "--suite", "s.toml"], 2, r"'samples' must be a whole number",
            "absent", {"s.toml": suite(extra="samples = 0\n")}),
    Attempt("suite-samples-negative", ["run", "--suite", "s.toml"], 2, r"'samples' must be a whole number",
            "absent", {"s.toml": suite(extra="samples = -2\n")}),
    Attempt("suite-rows-bomb", ["run", "--suite", "s.toml"], 2, r"at most 268435456 elements", "absent",
            {"s.toml": suite(shape="100000000x4096")}),
    Attempt("suite-width-bomb", ["run", "--suite", "s.toml"], 2, r"at most 1048576 wide", "absent",
            {"s.toml": suite(shape="4x16777216")}),
    Attempt("suite-memory", ["run", "--suite", "s.toml"], 2, r"needs about 50.5 GiB of memory.*NORMDIFF_MAX_SUITE_BYTES",
            "absent", {"s.toml": suite(shape="65536x4096")}),
    Attempt("suite-tiny-rms-negative", ["run", "--suite", "s.toml"], 2, r"s.toml group 1: 'regimes'.*positive finite",
            "absent", {"s.toml": suite(regime="tiny_rms:-1")}),
    Attempt("suite-tiny-rms-zero", ["run", "--suite", "s.toml"], 2, r"positive finite", "absent",
            {"s.toml": suite(regime="tiny_rms:0")}),
    Attempt("suite-mean-shift-nan", ["run", "--suite", "s.toml"], 2, r"mean_shift' takes a finite number", "absent",
            {"s.toml": suite(regime="mean_shift:nan")}),
    Attempt("suite-weights-string", ["run", "--suite", "s.toml"], 2, r"'weights' must be a list of strings", "absent",
            {"s.toml": suite(extra='weights = "trained"\n')}),
    Attempt("suite-float64", ["run", "--suite", "s.toml"], 2, r"'float64' has no ULP budget", "absent",
            {"s.toml": suite().replace("bfloat16", "float64")}),
    Attempt("suite-not-toml", ["run", "--suite", "s.toml"], 2, r"s.toml: not valid TOML", "absent",
            {"s.toml": "this is not toml\n"}),
    Attempt("suite-binary", ["run", "--suite", "s.toml"], 2, r"s.toml: not a text file", "absent",
            {"s.toml": "\udcff\udcfe"}),
    Attempt("suite-is-a-folder", ["run", "--suite", "d.toml"], 2, r"d.toml: cannot read it \(Is a directory\)",
            "absent", {"d.toml/x": ""}),
    Attempt("check-suite-typo", check("{H}:correct", "--suite", "s.toml"), 2, r"did you mean 'group'",
            files={"s.toml": suite().replace("[[group]]", "[[groups]]")}),
    # what user code returns, and what it does to its inputs
    Attempt("returns-tuple", check("{H}:returns_tuple"), 2, r"returned a tuple of 2: return the output only"),
    Attempt("returns-list", check("{H}:returns_list"), 2, r"returned a list of \d+, not an array"),
    Attempt("returns-none", check("{H}:returns_none"), 2, r"returned None: return the output array"),
    Attempt("returns-generator", check("{H}:returns_generator"), 2, r"returned a generator"),
    Attempt("returns-dict", check("{H}:returns_dict"), 2, r"returned a dict \(keys 'y'\)"),
    Attempt("returns-float64", check("{H}:returns_float64"), 0, r"returns float64 for bfloat16 input"),
    Attempt("returns-huge", check("{H}:returns_huge"), 2, r"wrong-shaped output \(\d+, \d+\); expected"),
    Attempt("all-inf", check("{H}:all_inf", "--json"), 1, r"all \d+ outputs are \+Inf"),
    Attempt("mutates-input", check("{H}:mutates_input"), 1, r"modified its input 'x' in place"),
    Attempt("calls-sys-exit", check("{H}:calls_exit"), 2, r"called sys.exit\(0\)"),
    Attempt("os-exit-zero", check("{H}:exits_quietly"), 2, r"exited with status 0 without replying"),
    Attempt("exception-with-markup", check("{H}:raises_with_markup"), 2, r"ValueError: </table>",
            then=no_control_characters),
    Attempt("syntax-error", check("{M}/syntax_error.py:rms_norm"), 2, r"cannot be read as Python: invalid syntax"),
    Attempt("int-output", check("{M}/int_output.py:rms_norm"), 2, r"output dtype int32 is not a floating dtype"),
    Attempt("torch-meta-tensor", check("{M}/torch_meta.py:rms_norm"), 2,
            r"returned a Tensor normdiff cannot read as an array"),
    Attempt("exits-at-import", check("{M}/exits_at_import.py:rms_norm"), 2, r"loading rms_norm failed: it called sys.exit"),
    Attempt("seterr-at-import-isolated", run_with("{M}/seterr_at_import.py:rms_norm"), 0, r"report written to",
            "complete", TINY, then=numpy_rows_agree),
    # processes the code leaves behind (the tag scan after each attempt is the assertion)
    Attempt("leaves-a-child", check("{H}:leaves_a_child"), 0, r"AGREES"),
    Attempt("forks", check("{H}:forks"), 0, r"AGREES"),
    Attempt("daemonizes", check("{H}:daemonizes"), 0, r"AGREES"),
    Attempt("command-leaves-a-child", command("leaves_child"), 0, r"AGREES"),
    Attempt("command-segfaults", command("segfaults"), 2, r"killed by SIGSEGV"),
    Attempt("command-huge-output", command("huge"), 2, r"the file has 1 GiB; this case's output needs at most"),
    Attempt("command-empty", ["check", "--command", "", "--op", "rms_norm", "--convention", "qwen3"], 2,
            r"nothing to check"),
    Attempt("command-not-found", ["check", "--command", "./nosuch-prog", "--op", "rms_norm", "--convention", "qwen3"], 2,
            r"not found"),
    # no shell: `;` and `touch` are two more arguments of the program, which ignores them
    Attempt("command-shell-metacharacters", ["check", "--command", "{py} {P} correct; touch pwned", "--op", "rms_norm",
                                             "--convention", "qwen3", *FAST], 0, r"AGREES",
            then=lambda work, out: not (work / "pwned").exists() or pytest.fail("a shell ran the command")),
    # hangs: one hang costs one time limit, not one per case
    Attempt("hangs", check("{H}:hangs", "--timeout", "2"), 2,
            r"no reply within 2 s.*the other \d+ calls were not made \(--keep-calling makes them\)", slow=True),
    Attempt("hangs-keep-calling", check("{H}:hangs", "--timeout", "1", "--suite", "two.toml", "--keep-calling"), 2,
            r"no reply within 1 s", files={"two.toml": suite(extra="samples = 2\n")}, slow=True),
    Attempt("hangs-at-import", check("{M}/hangs_at_import.py:rms_norm", "--timeout", "2"), 2,
            r"importing .*hangs_at_import.py:rms_norm did not finish within 15 s", slow=True),
    # normdiff's pipes to its worker, gone for from inside it (harness/engine/wire.py): an error or a
    # timeout for that code's calls, never a hang, never code run in normdiff
    Attempt("writes-junk-into-pipes", check("{H}:writes_junk", "--timeout", "5"), 2,
            r"reply was malformed: it does not start with normdiff's mark.*may have written into normdiff's pipe"),
    Attempt("forges-old-reply", check("{H}:forges_old_reply", "--timeout", "5"), 2,
            r"reply was malformed: it does not start with normdiff's mark", then=nothing_planted),
    Attempt("partial-reply-then-sleeps", check("{H}:writes_a_partial_reply", "--timeout", "2"), 2,
            r"no reply within 2 s \(only 50 bytes of a reply had come", slow=True),
    Attempt("reads-every-fd", check("{H}:reads_every_fd"), 0, r"AGREES"),
    Attempt("hijacks-requests", check("{H}:hijacks_requests", "--timeout", "2", "--suite", "big.toml"), 3,
            r"no reply within 2 s", files={"big.toml": suite(shape='16x4096", "32x2048')}, slow=True),
    Attempt("closes-every-fd", check("{H}:closes_every_fd"), 2,
            r"exited with status 75; its last output: normdiff worker: could not write its reply \(OSError"),
    Attempt("forks-then-exits", check("{H}:forks_then_exits"), 2, r"exited with status 0 without replying"),
    # the working folder: a numpy.py, normdiff.py or torch.py there is never imported in place of the
    # real one (workers start with python -P), and a user's code beside them is still found
    Attempt("shadowing-modules-in-cwd", ["run", "--suite", "tiny.toml", "-i", "numpy", "-i", "torch", "--out", "out"],
            0, r"report written to out", "complete", {**TINY, **SHADOWS}, then=no_shadow_imported, console=True),
    Attempt("user-code-beside-shadows", ["check", "mynorm.py:rms_norm", "--op", "rms_norm", "--convention", "qwen3",
                                         *FAST], 0, r"AGREES", files={**SHADOWS, "mynorm.py": MYNORM}, console=True),
    # a guard for -P, not a fix (it passes on the old code too): a module target in the working
    # folder, found by a parent that has the folder on its path, is still found in its worker
    Attempt("user-module-in-cwd", check("mynorm:rms_norm"), 0, r"AGREES", files={"mynorm.py": MYNORM}),
    # HOME: the code under test's files and caches go to the run's temporary folder, removed with it
    Attempt("writes-into-home", check("{H}:writes_into_home"), 0, r"AGREES", then=home_untouched, home=True),
    # report folders: whole, never mixed, nothing of the user's lost
    Attempt("out-holds-user-files", run_with("{H}:correct"), 0, r"report written to out", "complete",
            {**TINY, "out/notes.txt": "mine\n", "out/changes.csv": "my own changes\n"}, then=user_file_kept),
    Attempt("out-dot", ["run", "--suite", "tiny.toml", "-i", "numpy", "--out", ".", "-q"], 0, r"^$",
            files={**TINY, "changes.csv": "my own changes\n"}, then=cwd_report_kept_files),
    Attempt("planted-symlink", run_with("{H}:correct"), 0, r"report written", "complete",
            {**TINY, "outside.txt": "outside\n", "out/mine.txt": "x", "out/results.csv": "@outside.txt",
             "out/.results.csv.tmp": "@outside.txt"}, then=outside_untouched),
    Attempt("markup-in-exception", run_with("{H}:raises_with_markup"), 1, r"report written to out", "complete", TINY,
            then=markup_is_data),
    Attempt("markup-in-suite-name", ["run", "--suite", "we`ird<b>x</b>.toml", "-i", "numpy", "--out", "out", "-q"], 0,
            r"^$", "complete", {"we`ird<b>x</b>.toml": suite()}, then=no_raw_tags),
    # signals: one line, the shell's status, what finished written and marked incomplete
    Attempt("sigint", run_with("{H}:hangs", "--keep-calling"), 130,
            r"^normdiff: stopped by SIGINT; partial results \(stopped by SIGINT after \d+ of \d+ outcomes\) written "
            r"to out/, marked incomplete\n$", "incomplete", TINY, stop=signal.SIGINT, slow=True),
    Attempt("ctrl-c-process-group", run_with("{H}:hangs", "--keep-calling"), 130, r"^normdiff: stopped by SIGINT;[^\n]*\n$",
            "incomplete", TINY, stop=signal.SIGINT, group=True, slow=True),
    Attempt("sigterm", check("{H}:hangs_on_wide", "--keep-calling", "--out", "out"), 143,
            r"^normdiff: stopped by SIGTERM; partial results \(stopped by SIGTERM after \d+ of \d+ outcomes\) written "
            r"to out/, marked incomplete\n$", "incomplete", stop=signal.SIGTERM, slow=True),
    Attempt("sighup-nothing-finished", check("{H}:hangs", "--keep-calling", "--out", "out"), 129,
            r"^normdiff: stopped by SIGHUP; nothing was computed yet, nothing was written\n$", "absent",
            stop=signal.SIGHUP, slow=True),
]


def test_the_matrix_has_at_least_sixty_attempts():
    assert len(ATTEMPTS) >= 60 and len({a.id for a in ATTEMPTS}) == len(ATTEMPTS)


# ---- running one ---------------------------------------------------------------------------------

def _tagged(tag: str) -> list[int]:
    """Live processes (not zombies) whose environment carries the tag."""
    found = []
    needle = f"{TAG}={tag}".encode()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as fh:
                if needle not in fh.read():
                    continue
            with open(f"/proc/{name}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        if stat[stat.rfind(b")") + 2:].split()[0] != b"Z":
            found.append(int(name))
    return found


def _prepare(work: Path, files: dict) -> None:
    for name, text in files.items():
        path = work / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if text.startswith("@"):  # a symlink planted by someone else
            path.symlink_to(work / text[1:])
        else:
            path.write_text(text, errors="surrogateescape")  # "\udcff": the raw byte 0xff
    (work / "link").symlink_to(work / "elsewhere", target_is_directory=True)


def _fill(arg: str, work: Path) -> str:
    return (arg.replace("{H}", str(HOSTILE)).replace("{M}", str(MODULES)).replace("{P}", str(PROGRAM))
            .replace("{py}", sys.executable).replace("{w}", str(work)))


def _run(attempt: Attempt, work: Path, env: dict, tag: str) -> tuple[int, str]:
    program = [str(Path(sys.executable).with_name("normdiff"))] if attempt.console else \
        [sys.executable, "-m", "normdiff.harness.commands.cli"]
    argv = program + [_fill(a, work) for a in attempt.argv]
    if not attempt.stop:
        done = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=300)
        return done.returncode, done.stdout + done.stderr
    proc = subprocess.Popen(argv, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    deadline = time.monotonic() + 120
    while len(_tagged(tag)) < 2 and time.monotonic() < deadline:  # normdiff and its worker(s) run
        time.sleep(0.2)
    time.sleep(3)  # the fast implementations finish, the hanging one is inside its call
    if attempt.group:
        os.killpg(proc.pid, attempt.stop)
    else:
        proc.send_signal(attempt.stop)
    stdout, stderr = proc.communicate(timeout=120)
    return proc.returncode, stdout + stderr


def _folder_state(out: Path) -> str:
    if not out.exists():
        return "absent"
    manifest = json.loads((out / ".normdiff-manifest.json").read_text())
    return "complete" if manifest["complete"] else "incomplete"


@pytest.mark.parametrize("attempt", [pytest.param(a, id=a.id, marks=[pytest.mark.slow] if a.slow else [])
                                     for a in ATTEMPTS])
def test_attempt(attempt: Attempt, tmp_path: Path):
    work, tmp = tmp_path / "work", tmp_path / "tmp"
    work.mkdir()
    tmp.mkdir()
    _prepare(work, attempt.files)
    tag = uuid.uuid4().hex
    env = dict(os.environ, TMPDIR=str(tmp), **{TAG: tag})
    if attempt.home:
        (tmp_path / "home").mkdir()
        env["HOME"] = str(tmp_path / "home")
        for name in [n for n in env if n.startswith("XDG_")]:
            del env[name]  # their defaults are under HOME
    start = time.monotonic()
    code, out = _run(attempt, work, env, tag)
    seconds = time.monotonic() - start
    assert "Traceback" not in out, out
    assert code == attempt.code, out
    assert re.search(attempt.says, out, re.S | re.M), out
    deadline = time.monotonic() + 5
    while _tagged(tag) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _tagged(tag), f"processes left behind: {_tagged(tag)}"
    assert not list(tmp.iterdir()), f"left in TMPDIR: {list(tmp.iterdir())}"
    leftovers = [p for p in [*work.glob("**/.*normdiff-staging*"), *work.glob("**/.*.tmp")] if not p.is_symlink()]
    assert not leftovers, f"temporary files left: {leftovers}"
    if attempt.folder:
        assert _folder_state(work / "out") == attempt.folder
    if attempt.then:
        attempt.then(work, out + f"\nseconds={seconds}")


def _normdiff(argv, work, env, **kw):
    return subprocess.Popen([sys.executable, "-m", "normdiff.harness.commands.cli", *argv], cwd=work, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def _consistent(out: Path) -> str:
    """The suite a report folder is from, asserting every file in it is from that one run."""
    meta = json.loads((out / "meta.json").read_text())
    manifest = json.loads((out / ".normdiff-manifest.json").read_text())
    assert manifest["complete"] and set(manifest["files"]) >= {"results.csv", "summary.md", "report.html"}
    shape = {"tiny": "4x128", "wide": "2x256"}[meta["suite"]]
    assert shape in (out / "results.csv").read_text() and shape in (out / "report.html").read_text()
    assert f"`{meta['suite']}`" in (out / "summary.md").read_text()
    return meta["suite"]


@pytest.mark.slow
def test_two_runs_into_one_out_each_land_whole(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    _prepare(work, {"tiny.toml": suite(), "wide.toml": suite(shape="2x256")})
    env = dict(os.environ, TMPDIR=str(work))
    runs = [_normdiff(["run", "--suite", s, "-i", "numpy", "--out", "out", "-q"], work, env)
            for s in ("tiny.toml", "wide.toml")]
    for proc in runs:
        stdout, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 0 and "Traceback" not in stderr, stderr
    assert _consistent(work / "out") in ("tiny", "wide")
    assert not [p for p in work.iterdir() if p.name.startswith(".")], "staging folders left"


@pytest.mark.slow
def test_a_run_killed_at_any_moment_leaves_the_old_report_or_the_new_one(tmp_path):
    """SIGKILL, which no handler sees: the earlier report stays whole (the new one is staged
    beside it), and the workers die with normdiff (PR_SET_PDEATHSIG)."""
    work = tmp_path / "work"
    work.mkdir()
    _prepare(work, {"tiny.toml": suite(), "wide.toml": suite(shape="2x256")})
    tag = uuid.uuid4().hex
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = dict(os.environ, TMPDIR=str(tmp), **{TAG: tag})
    first = _normdiff(["run", "--suite", "tiny.toml", "-i", "numpy", "--out", "out", "-q"], work, env)
    first.communicate(timeout=120)
    for delay in (0.5, 1.5, 2.5, 3.5):
        proc = _normdiff(["run", "--suite", "wide.toml", "-i", "numpy", "-i", "torch", "--out", "out", "-q"], work,
                         env)
        time.sleep(delay)
        proc.kill()
        proc.communicate(timeout=60)
        assert _consistent(work / "out") in ("tiny", "wide")
        deadline = time.monotonic() + 5
        while _tagged(tag) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _tagged(tag), "a worker outlived a SIGKILLed normdiff"
    # what a SIGKILLed run could not remove, the next run does
    last = _normdiff(["run", "--suite", "tiny.toml", "-i", "numpy", "--out", "out", "-q"], work, env)
    assert last.communicate(timeout=120) and last.returncode == 0
    assert not list(tmp.iterdir()), f"left in TMPDIR: {list(tmp.iterdir())}"
    assert not [p for p in work.iterdir() if p.name.startswith(".")], "a killed run's staging folder is left"
