"""The command line end to end, in a fresh process as a user runs it."""
import json
import os
import subprocess
import sys

import pandas as pd
import pytest

REQUIRED = ["case_id", "op", "convention", "dtype", "shape", "regime", "implementation", "kind", "outcome",
            "max_ulp", "max_abs", "rel_l2", "tolerance_ulp"]


def normdiff(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "normdiff.harness.commands.cli", *args], capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.slow
def test_run_smoke_writes_the_report(tmp_path):
    proc = normdiff("run", "--suite", "smoke", "--out", str(tmp_path / "r"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = pd.read_csv(tmp_path / "r" / "results.csv")
    assert set(REQUIRED) <= set(results.columns)
    kinds = set(results["kind"])  # the own implementations, plus transformers / built-ins where installed
    assert "own" in kinds and kinds <= {"own", "model", "framework", "mutant"}
    assert set(results["implementation"]) >= {"numpy", "torch", "jax"}
    ran = results[(results["outcome"] != "unsupported") & (results["kind"] != "mutant")]  # HF covers few pairs
    known = ran["known_finding"].fillna("").astype(str) != ""  # e.g. onnxruntime's missing bf16 kernel
    assert set(ran[~known]["outcome"]) <= {"identical", "agree"}
    assert not set(ran[known]["implementation"]) & {"numpy", "torch", "jax"}
    assert set(results[results["kind"] == "own"]["outcome"]) <= {"identical", "agree"}
    agreement = pd.read_csv(tmp_path / "r" / "agreement.csv", index_col=0)
    assert (agreement.loc[["numpy", "torch", "jax"], ["numpy", "torch", "jax"]] == 1.0).all().all()
    summary = (tmp_path / "r" / "summary.md").read_text()
    assert "# normdiff report: suite `smoke`" in summary and "| numpy |" in summary
    assert "agrees" in proc.stdout and "report written to" in proc.stdout


def test_usage_errors_exit_2_with_a_message(tmp_path):
    proc = normdiff("run", "--suite", "nope", "--out", str(tmp_path))
    assert proc.returncode == 2 and "unknown suite 'nope'" in proc.stderr
    proc = normdiff("run", "-i", "no-such-impl", "--out", str(tmp_path))
    assert proc.returncode == 2 and "unknown implementation 'no-such-impl'" in proc.stderr
    assert normdiff("frobnicate").returncode == 2


@pytest.mark.parametrize("what", ["implementations", "conventions", "suites", "ops"])
def test_list_json(what):
    proc = normdiff("list", what, "--json")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    names = {r["name"] for r in rows}
    expected = {"implementations": {"numpy", "torch", "jax"}, "conventions": {"qwen3", "qwen3.5", "olmo2"},
                "suites": {"default", "smoke"}, "ops": {"rms_norm", "gated_rms_norm", "l2_norm", "qk_norm"}}[what]
    assert expected <= names


def test_list_does_not_import_frameworks():
    code = ("import sys; from normdiff.harness.commands import cli; cli.main(['list', 'implementations']); "
            "assert not {'torch', 'jax', 'transformers'} & set(sys.modules), sorted(sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_only_usage_errors_exit_2_and_a_bug_of_ours_says_so(monkeypatch, capsys):
    from normdiff.harness.commands import cli as cli_module
    from normdiff.harness.data.errors import UsageError

    def usage(args):
        raise UsageError("unknown suite 'nightly'; known: default, smoke")

    def bug(args):
        raise KeyError("implementation")  # e.g. a bug in normdiff's own code

    monkeypatch.setattr(cli_module, "_list", usage)
    assert cli_module.main(["list", "ops"]) == 2
    assert capsys.readouterr().err.strip() == "normdiff: error: unknown suite 'nightly'; known: default, smoke"
    monkeypatch.setattr(cli_module, "_list", bug)
    assert cli_module.main(["list", "ops"]) == cli_module.INTERNAL_ERROR == 70
    err = capsys.readouterr().err
    assert "Traceback" in err and "KeyError: 'implementation'" in err and "internal error (a bug in normdiff" in err


def test_run_with_puts_user_code_beside_every_implementation(tmp_path, fixtures_dir):
    out = tmp_path / "r"
    program = f"{sys.executable} {fixtures_dir / 'command_program.py'} correct"
    proc = normdiff("run", "--suite", "smoke", "-i", "numpy", "-i", "torch", "--out", str(out),
                    "--with", "tests/fixtures/user/numpy_norms.py:rms_norm", "--op", "rms_norm", "--convention", "qwen3",
                    "--with", "tests/fixtures/user/numpy_norms.py:rms_norm_gamma_plus_one", "--op", "rms_norm",
                    "--convention", "qwen3", "--call", "f(x, weight, eps)",
                    "--with-command", program, "--op", "l2_norm", "--convention", "qwen3.5")
    assert proc.returncode == 1, proc.stdout + proc.stderr  # a user implementation disagrees: the run fails
    results = pd.read_csv(out / "results.csv")
    users = results[results["kind"] == "user"]
    names = set(users["implementation"])
    (command,) = names - {"rms_norm", "rms_norm_gamma_plus_one"}
    assert len(names) == 3 and command.startswith(os.path.basename(sys.executable))
    outcomes = set(users[users["implementation"] == command]["outcome"].astype(str)) - {"unsupported"}
    assert outcomes and outcomes <= {"identical", "agree"}
    ran = users[users["outcome"] != "unsupported"]
    assert set(ran[ran["implementation"] == "rms_norm"]["outcome"]) <= {"identical", "agree"}
    bad = ran[ran["implementation"] == "rms_norm_gamma_plus_one"]
    assert (bad["outcome"] == "disagree").all() and len(bad) > 0
    assert bad["repro"].str.contains("--target tests/fixtures/user/numpy_norms.py:rms_norm_gamma_plus_one --call").all()
    agreement = pd.read_csv(out / "agreement.csv", index_col=0)
    assert agreement.loc["rms_norm", "numpy"] == 1.0 and agreement.loc["rms_norm_gamma_plus_one", "numpy"] == 0.0
    assert "rms_norm_gamma_plus_one" in (out / "summary.md").read_text()
    assert "rms_norm_gamma_plus_one" in (out / "junit.xml").read_text()


def test_run_with_options_must_follow_a_with(tmp_path):
    proc = normdiff("run", "--op", "rms_norm", "--out", str(tmp_path))
    assert proc.returncode == 2 and "--op applies to the --target before it" in proc.stderr
    proc = normdiff("run", "--with", "tests/fixtures/user/numpy_norms.py:rms_norm", "--op", "rms_norm",
                    "--out", str(tmp_path))
    assert proc.returncode == 2 and "give --convention after it" in proc.stderr


def test_a_second_with_of_a_taken_name_is_named_by_its_target_and_built_once(tmp_path, monkeypatch):
    from normdiff.harness.commands import cli as cli_module, usercode

    other = tmp_path / "numpy_norms.py"
    other.write_text(open("tests/fixtures/user/numpy_norms.py").read())
    specs = [{"target": target, "op": "rms_norm", "convention": "qwen3"}
             for target in ("tests/fixtures/user/numpy_norms.py:rms_norm", f"{other}:rms_norm")]
    expected = usercode.user_code_implementation(specs[1], "rms_norm", "qwen3", 60.0, name=specs[1]["target"])
    built = []
    real = usercode.user_implementation
    monkeypatch.setattr(usercode, "user_implementation", lambda target, *a, **k: (built.append(target),
                                                                                   real(target, *a, **k))[1])
    first, second = cli_module._with_implementations(specs, 60.0)
    assert built == [spec["target"] for spec in specs]  # each target located (and parsed) once
    assert first.name == "rms_norm" and second == expected  # its name, worker, target and params as if built so
    assert second.name == f"{other}:rms_norm" and second.worker == f"user {other}:rms_norm"


def test_a_stopped_run_whose_partial_report_is_refused_keeps_the_stops_status(tmp_path, monkeypatch, capsys,
                                                                              small_report):
    """SIGTERM, then a full disk while the partial results are written: the exit status is the
    stop's, and its one line says the partial results were not written, and why."""
    import errno
    import re
    import signal

    from normdiff import interrupts
    from normdiff.harness import api
    from normdiff.harness.commands import cli as cli_module

    def stopped(*args, **kwargs):
        raise interrupts.Interrupted(signal.SIGTERM, partial=small_report)

    monkeypatch.setattr(api, "run_suite", stopped)
    monkeypatch.setattr(os, "fsync", lambda fd: (_ for _ in ()).throw(OSError(errno.ENOSPC, "No space left on device")))
    out = tmp_path / "out"
    assert cli_module.main(["run", "--suite", "smoke", "-i", "numpy", "--out", str(out), "-q"]) == 143
    err = capsys.readouterr().err
    assert re.fullmatch(r"normdiff: stopped by SIGTERM; the partial results could not be written: --out \S+: cannot "
                        r"write [\w.]+ \(No space left on device, ENOSPC\); free some space or give another --out; "
                        r"nothing was written\n", err), err
    assert list(tmp_path.iterdir()) == []
