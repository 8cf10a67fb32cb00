"""A run says which bug a failing user implementation's rows look like, in check's words: its
disagreeing rows carry the diagnosis (results.csv `diagnosis`), and summary.md, junit.xml and the
terminal show it. Nobody else's rows get one."""
import json
import subprocess
import sys

import pandas as pd
import pytest

from normdiff import wording

FIX = "tests/fixtures/user/numpy_norms.py"


def normdiff(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "normdiff.harness.commands.cli", *args], capture_output=True,
                          text=True, timeout=300)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("run") / "report"
    proc = normdiff("run", "--suite", "smoke", "-i", "numpy", "--out", str(out),
                    "--target", f"{FIX}:rms_norm_eps_outside", "--op", "rms_norm", "--convention", "qwen3",
                    "--target", f"{FIX}:rms_norm", "--op", "rms_norm", "--convention", "qwen3")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    return out, proc.stdout


def test_a_failing_user_implementations_rows_carry_checks_diagnosis(run):
    out, _ = run
    rows = pd.read_csv(out / "results.csv", keep_default_na=False)
    mine = rows[rows["implementation"] == "rms_norm_eps_outside"]
    bad = mine["outcome"] == "disagree"
    assert bad.any() and (~bad).any()
    proc = normdiff("check", f"{FIX}:rms_norm_eps_outside", "--op", "rms_norm", "--convention", "qwen3",
                    "--suite", "smoke", "--json")
    best = json.loads(proc.stdout)["diagnosis"][0]
    said = wording.the_bug(best["bug"], best["fix"])
    assert best["bug"] == "eps-outside-sqrt" and set(mine.loc[bad, "diagnosis"]) == {said}
    assert set(mine.loc[~bad, "diagnosis"]) == {""}  # its agreeing rows
    others = rows[rows["implementation"] != "rms_norm_eps_outside"]  # ours, and a user's that agrees
    assert set(others["implementation"]) == {"numpy", "rms_norm"} and set(others["diagnosis"]) == {""}


def test_the_reports_and_the_terminal_show_it(run):
    out, terminal = run
    said = "bug: eps-outside-sqrt -- fix: yours: eps outside the square root"
    assert f"rms_norm_eps_outside: {said}" in terminal
    failing = (out / "summary.md").read_text().split("## Failing rows")[1].split("\n## ")[0]
    head, rule, *rows = [line for line in failing.splitlines() if line.startswith("|")]
    assert "| diagnosis |" in head and rows and all(said in row for row in rows)
    assert f"diagnosis: {said}" in (out / "junit.xml").read_text()
    assert said in (out / "report.html").read_text()


def test_a_run_keeps_what_the_diagnosis_reads():
    from normdiff.harness.engine import tables

    results = pd.DataFrame({
        "case_id": ["a", "b", "c", "d", "e"], "implementation": ["mine", "mine", "mine", "ours", "mutant"],
        "kind": ["user", "user", "user", "own", "mutant"], "outcome": ["disagree", "agree", "error", "disagree", "disagree"],
        "output_digest": ["1", "2", "", "4", "5"], "known_finding": [""] * 5, "max_ulp": [9.0, 1.0, None, 9.0, 9.0]})
    assert tables.diagnosed_keys(results) == {("a", "mine")}  # failing, with an output, a user's
