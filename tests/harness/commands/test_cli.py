"""The command line end to end, in a fresh process as a user runs it."""
import json
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
    assert set(ran["outcome"]) <= {"identical", "agree"}
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
