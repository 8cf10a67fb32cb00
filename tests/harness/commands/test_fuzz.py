"""`normdiff fuzz`: a correct built-in fuzzed for a few seconds finds nothing; a forward mutant is
found and shrunk to a case of at most 2 rows whose printed repro command replays it; the next run
tries it first from Hypothesis' example database; user code that reads its input as contiguous
whatever its strides is found through the layout axis; a crash is a failure like any other; --json
says the same in one object; usage errors exit 2 before any work; nothing is written into the
current directory."""
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from normdiff.harness.commands import cli

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
RAW_POINTER = f"{FIXTURES / 'user_raw_pointer.py'}:rms_norm_torch"
MINIMAL_KEYS = {"case_id", "rows", "width", "layout", "repro"}


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    """Hypothesis' database and files in this test's own folder; the test runs in an empty cwd."""
    folder = tmp_path / "cache"
    monkeypatch.setenv("NORMDIFF_HYPOTHESIS_CACHE", str(folder))
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    yield folder
    assert os.listdir(work) == []  # no .hypothesis/, nothing else


def fuzz(capsys, *args):
    code = cli.main(["fuzz", *args, "--json"])
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1, out  # exactly one JSON object
    return code, json.loads(out[0])


def replay(command: str):
    """A printed `normdiff repro ...` command, run as a user runs it."""
    words = shlex.split(command)
    assert words[:2] == ["normdiff", "repro"]
    return subprocess.run([sys.executable, "-m", "normdiff.harness.commands.cli", *words[1:]], capture_output=True,
                          text=True, timeout=300)


def test_a_correct_builtin_fuzzed_for_a_few_seconds_finds_nothing(capsys, cache):
    code, got = fuzz(capsys, "-i", "numpy", "--max-time", "4", "--seed", "0")
    assert code == 0 and got["found"] is False and got["minimal"] is None and got["stopped"] == "max-time"
    assert got["examples"] >= 10 and got["evaluations"] >= got["examples"] and got["seed"] == 0
    assert set(got) >= {"found", "examples", "minimal", "evaluations_per_second", "time_to_find", "from_database"}
    assert set(got["passes"]) == {"forward", "backward"} and len(got["pairs"]) > 20


def test_the_text_says_what_was_fuzzed_and_that_nothing_was_found(capsys):
    code = cli.main(["fuzz", "-i", "numpy", "--op", "layer_norm", "--convention", "cohere", "--max-examples", "15",
                     "--seed", "1", "--pass", "forward"])
    out = capsys.readouterr().out
    assert code == 0
    assert "normdiff fuzz numpy (layer_norm@cohere, forward; seed 1)" in out
    assert "nothing found in 15 examples" in out and "stopped at the example limit" in out


@pytest.mark.slow
def test_a_forward_mutant_is_found_shrunk_replayed_and_tried_first_next_time(capsys, cache):
    code, got = fuzz(capsys, "-i", "gamma-plus-one", "--max-time", "60", "--seed", "0")
    minimal = got["minimal"]
    assert code == 1 and got["found"] is True and got["from_database"] is False
    assert set(minimal) >= MINIMAL_KEYS and minimal["rows"] <= 2 and minimal["outcome"] == "disagree"
    assert minimal["repro"] == f"normdiff repro {shlex.quote(minimal['case_id'])} --implementation gamma-plus-one"
    proc = replay(minimal["repro"])
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"case            {minimal['case_id']}" in proc.stdout and "outcome         disagree" in proc.stdout
    # kept in the database: an unseeded run replays it first, at once
    code, again = fuzz(capsys, "-i", "gamma-plus-one", "--max-time", "60")
    assert code == 1 and again["from_database"] is True and again["examples"] == 1
    assert again["minimal"]["case_id"] == minimal["case_id"] and again["minimal"]["from_database"] is True
    assert list(cache.glob("examples/*"))  # under the cache, one folder for this target
    # --no-database neither replays nor saves
    code, fresh = fuzz(capsys, "-i", "gamma-plus-one", "--max-time", "60", "--seed", "0", "--no-database")
    assert code == 1 and fresh["from_database"] is False and fresh["database"] is None
    assert fresh["minimal"]["case_id"] == minimal["case_id"]  # the same seed: the same run


@pytest.mark.slow
def test_code_that_reads_its_input_as_contiguous_is_found_through_the_layout_axis(capsys):
    code, got = fuzz(capsys, "--with", RAW_POINTER, "--op", "rms_norm", "--convention", "qwen3", "--pass",
                     "forward", "--max-time", "60", "--seed", "0")
    minimal = got["minimal"]
    assert code == 1 and minimal["layout"] != "contiguous" and minimal["rows"] <= 2, minimal
    assert minimal["repro"].endswith(f"--target {RAW_POINTER}")
    proc = replay(minimal["repro"])
    assert proc.returncode == 1 and f"outcome         {minimal['outcome']}" in proc.stdout, proc.stdout + proc.stderr


def test_a_crash_is_a_failure_shrunk_like_any_other(capsys):
    code, got = fuzz(capsys, "--with", f"{FIXTURES / 'hostile.py'}:exits_quietly", "--op", "rms_norm",
                     "--convention", "qwen3", "--max-examples", "20", "--seed", "0", "--timeout", "5")
    minimal = got["minimal"]
    assert code == 1 and minimal["outcome"] == "crashed" and "exited with status 0" in minimal["detail"]
    assert (minimal["rows"], minimal["width"], minimal["layout"]) == (1, 1, "contiguous")


@pytest.mark.parametrize("args, says", [
    ([], "nothing to fuzz: give -i NAME"),
    (["--with", str(FIXTURES / "hostile.py") + ":correct"], "give --op and --convention"),
    (["-i", "no-such-impl"], "unknown implementation"),
    (["-i", "numpy", "--op", "layer_norm", "--convention", "qwen3"], "nothing to fuzz: numpy implement(s) no "
                                                                       "layer_norm@qwen3"),
    (["-i", "gamma-plus-one", "--pass", "backward"], "gamma-plus-one has no backward pass"),
    (["-i", "numpy", "--call", "f(x, weight, eps)"], "--call apply to --target TARGET"),
    (["-i", "numpy", "--dtype", "float64"], "no ULP budget"),
    (["-i", "numpy", "--regime", "no_such_regime"], "unknown input regime"),
    (["--with", "nosuch.py:f", "--op", "rms_norm", "--convention", "qwen3"], "file not found"),
    (["--with", "a.py:f", "--with-command", "cat", "--op", "rms_norm", "--convention", "qwen3"], "not both"),
])
def test_usage_errors_exit_2_before_any_work(capsys, cache, args, says):
    assert cli.main(["fuzz", *args]) == 2
    err = capsys.readouterr().err
    assert says in err, err
    assert not cache.exists()  # no worker, no database


@pytest.mark.parametrize("args", [["--max-examples", "0"], ["--max-time", "-1"], ["--seed", "x"]])
def test_malformed_numbers_are_refused_by_the_parser(capsys, args):
    assert cli.main(["fuzz", "-i", "numpy", *args]) == 2  # a parse error is a usage error like any other
    assert "normdiff: error: argument" in capsys.readouterr().err


def _marked(marker: str) -> list[int]:
    """The processes whose environment carries `marker` (a fuzz run and the workers it started)."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/environ", "rb") as fh:
                if marker.encode() in fh.read():
                    found.append(int(entry))
        except (OSError, ValueError):
            continue
    return found


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc")
@pytest.mark.parametrize("signum, code", [(2, 130), (15, 143)])
def test_a_stopped_fuzz_leaves_no_process(cache, signum, code):
    import signal
    import time

    marker = f"NORMDIFF_FUZZ_TEST_{os.getpid()}_{signum}"
    env = {**os.environ, marker: "1"}
    proc = subprocess.Popen([sys.executable, "-m", "normdiff.harness.commands.cli", "fuzz", "-i", "numpy",
                             "--max-time", "120"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while len(_marked(marker)) < 2 and time.monotonic() < deadline:  # the fuzz and its worker
        time.sleep(0.1)
    time.sleep(1.0)
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == code and f"stopped by {signal.Signals(signum).name}" in err, err
    time.sleep(0.5)
    assert _marked(marker) == []


def test_a_bug_of_ours_is_shrunk_and_raised_with_the_case_it_came_from(monkeypatch):
    from normdiff.cases.model import Case
    from normdiff.harness import api
    from normdiff.harness.commands import fuzz as fuzzing
    from normdiff.harness.engine import runner

    real = runner.prepare

    def broken(case, outputs=None):
        if case.rows >= 3:
            raise ZeroDivisionError("a bug of ours")
        return real(case, outputs)

    monkeypatch.setattr(runner, "prepare", broken)
    with pytest.raises(ZeroDivisionError, match="a bug of ours") as raised:
        fuzzing.fuzz(api.select(["numpy"]), max_examples=300, seed=0, passes="forward", database=False)
    (note,) = raised.value.__notes__
    assert note.startswith("normdiff fuzz: while evaluating ") and Case.from_id(note.split()[-1]).rows == 3



def test_a_quantizing_mutant_is_found_forward_and_a_width_below_its_block_is_said(capsys):
    """The quantizing ops are fuzzed forward, a whole number of their blocks wide (32 for MX); the
    minimal case replays."""
    code, got = fuzz(capsys, "-i", "quant-e8m0-nearest", "--max-examples", "50", "--seed", "3", "--no-database")
    minimal = got["minimal"]
    assert code == 1 and minimal["case_id"].startswith("rms_norm_quant@mxfp8/") and minimal["width"] % 32 == 0
    proc = replay(minimal["repro"])
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert cli.main(["fuzz", "-i", "quant-e8m0-nearest", "--max-width", "16", "--max-examples", "5"]) == 2
    assert "blocks of at least 32 columns" in capsys.readouterr().err
