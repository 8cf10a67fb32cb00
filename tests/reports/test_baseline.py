"""Regression baselines: the file format, atomic saving, and the rules of the comparison, on
hand-made results tables; then once end to end through the CLI on the smoke suite."""
import dataclasses
import errno
import json
import os

import pandas as pd
import pytest

from normdiff.harness.commands import cli
from normdiff.harness.data.errors import OutputError
from normdiff.implementations import registry
from normdiff.reports import baseline
from normdiff.reports.report import Report

COLUMNS = ["case_id", "implementation", "kind", "outcome", "max_ulp", "p99_ulp", "rel_l2", "tolerance_ulp",
           "output_digest", "known_finding"]
VERSIONS = {"normdiff": "0.1.0", "numpy": "2.0", "torch": "2.13.0"}
BUDGETS = {"bfloat16": {"*": 2.0}}


def full(row):
    """(case_id, implementation, kind, outcome, max_ulp[, digest[, known_finding]]), filled in."""
    case_id, impl, kind, outcome, max_ulp, digest, known = list(row) + [None] * (7 - len(row))
    return (case_id, impl, kind, outcome, max_ulp, f"{impl}-{case_id}" if digest is None else digest, known or "")


def results(rows):
    table = []
    for row in rows:
        case_id, impl, kind, outcome, max_ulp, digest, known = full(row)
        table.append((case_id, impl, kind, outcome, max_ulp, None if max_ulp is None else max_ulp / 2,
                      None if max_ulp is None else max_ulp * 1e-3, 2.0, digest, known))
    return pd.DataFrame(table, columns=COLUMNS)


def report(rows, suite="unit", versions=VERSIONS, budgets=BUDGETS):
    return Report(results(rows), pd.DataFrame(), {"suite": suite, "versions": dict(versions),
                                                  "budgets": budgets, "exit_code": 0})


BASE = [
    ("c1", "good", "own", "agree", 1.0),
    ("c2", "good", "own", "identical", 0.4),
    ("c1", "lib", "framework", "agree", 1.5),
    ("c2", "lib", "framework", "disagree", 40.0),
    ("c1", "mut", "mutant", "disagree", 900.0),
    ("c2", "mut", "mutant", "agree", 1.0),
    ("c1", "odd", "own", "unsupported", None),
    ("c2", "odd", "own", "agree", 1.0),
]


def saved(tmp_path, rows=BASE, **kw) -> baseline.Baseline:
    path = baseline.save(report(rows, **kw), tmp_path / "base.json")
    return baseline.load(path)


def compare(tmp_path, current, base_rows=BASE, **kw):
    comparison = baseline.compare(saved(tmp_path, base_rows), results(current),
                                  {"versions": dict(kw.get("versions", VERSIONS)), "budgets": BUDGETS})
    return comparison, comparison.changes.set_index(["case_id", "implementation"])


def replace(rows, key, **changes):
    fields = {"outcome": 3, "max_ulp": 4, "digest": 5, "known": 6}
    out = []
    for row in map(full, rows):
        if (row[0], row[1]) == key:
            row = list(row)
            for name, value in changes.items():
                row[fields[name]] = value
            row = tuple(row)
        out.append(row)
    return out


def test_unchanged_run_has_no_changes(tmp_path):
    comparison, changes = compare(tmp_path, BASE)
    assert changes.empty and comparison.exit_code == 0 and comparison.headline() == "no changes"
    assert not comparison.warnings


def test_worse_outcomes_are_regressions(tmp_path):
    current = replace(BASE, ("c1", "good"), outcome="disagree", max_ulp=30.0)
    current = replace(current, ("c2", "lib"), outcome="error", max_ulp=None)
    comparison, changes = compare(tmp_path, current)
    assert comparison.exit_code == 1 and comparison.count("regression") == 2
    assert changes.loc[("c1", "good"), "change"] == "regression"
    assert "agree -> disagree" in changes.loc[("c1", "good"), "reason"]
    assert changes.loc[("c2", "lib"), "reason"].startswith("disagree -> error")
    assert "REGRESSION" in comparison.terminal() and "good" in comparison.terminal()


def test_error_growth_beyond_the_tolerance_is_a_regression_and_drift_is_not(tmp_path):
    # same outcome (disagree), 40 -> 45 ulp: more than the 2 ulp tolerance
    comparison, changes = compare(tmp_path, replace(BASE, ("c2", "lib"), max_ulp=45.0))
    assert changes.loc[("c2", "lib"), "change"] == "regression"
    assert "grew by 5" in changes.loc[("c2", "lib"), "reason"]
    # 40 -> 41: within the tolerance: not a change at all (the digest is the same)
    comparison, changes = compare(tmp_path, replace(BASE, ("c2", "lib"), max_ulp=41.0))
    assert changes.empty
    # identical -> agree, and agree 1.0 -> 1.9 (still within budget): drift, exit 0
    current = replace(BASE, ("c2", "good"), outcome="agree", max_ulp=1.2)
    current = replace(current, ("c1", "good"), max_ulp=1.9)
    comparison, changes = compare(tmp_path, current)
    assert comparison.exit_code == 0 and set(changes["change"]) == {"drift"}
    assert "identical -> agree" in changes.loc[("c2", "good"), "reason"]
    # only the output bits changed
    comparison, changes = compare(tmp_path, replace(BASE, ("c1", "lib"), digest="other"))
    assert changes.loc[("c1", "lib"), "change"] == "drift" and "bits changed" in changes.loc[("c1", "lib"), "reason"]


def test_better_outcomes_are_improvements(tmp_path):
    comparison, changes = compare(tmp_path, replace(BASE, ("c2", "lib"), outcome="agree", max_ulp=1.0))
    assert comparison.exit_code == 0 and comparison.count("improvement") == 1
    assert changes.loc[("c2", "lib"), "change"] == "improvement"
    comparison, changes = compare(tmp_path, replace(BASE, ("c2", "lib"), max_ulp=10.0))
    assert changes.loc[("c2", "lib"), "change"] == "improvement"  # still disagrees, 30 ulp less


def test_new_and_vanished_cases_and_implementations(tmp_path):
    current = [r for r in BASE if r[0] != "c2" and r[1] != "lib"] + [
        ("c3", "good", "own", "agree", 1.0), ("c3", "mut", "mutant", "disagree", 50.0),
        ("c3", "odd", "own", "agree", 1.0), ("c1", "new", "own", "agree", 1.0), ("c3", "new", "own", "agree", 1.0)]
    comparison, changes = compare(tmp_path, current)
    kinds = changes.reset_index().groupby("change")["case_id"].apply(list).to_dict()
    assert kinds["new_case"] == ["c3"] and kinds["vanished_case"] == ["c2"]
    imps = changes.reset_index().groupby("change")["implementation"].apply(list).to_dict()
    assert imps["new_implementation"] == ["new"] and imps["vanished_implementation"] == ["lib"]
    assert comparison.exit_code == 0  # new and vanished things are reported, not regressions
    assert any("suite 'unit' has changed" in w and "compared on the 1 shared" in w for w in comparison.warnings)
    # a new case that fails is a new disagreement
    comparison, changes = compare(tmp_path, BASE + [("c3", "good", "own", "disagree", 99.0)])
    assert changes.loc[("c3", "good"), "change"] == "regression"
    assert "new disagreement (new case)" in changes.loc[("c3", "good"), "reason"]
    # so is a cell that was unsupported in the baseline and fails now
    comparison, changes = compare(tmp_path, replace(BASE, ("c1", "odd"), outcome="disagree", max_ulp=9.0))
    assert changes.loc[("c1", "odd"), "change"] == "regression"
    # a cell that stopped running (unavailable now) is reported, not a regression
    comparison, changes = compare(tmp_path, replace(BASE, ("c1", "good"), outcome="unavailable", max_ulp=None))
    assert changes.loc[("c1", "good"), "change"] == "not_run" and comparison.exit_code == 0


def test_mutants_regress_only_when_they_go_unseen(tmp_path):
    # a mutant cell changing outcome is the mutant's business...
    comparison, changes = compare(tmp_path, replace(BASE, ("c2", "mut"), outcome="disagree", max_ulp=70.0))
    assert changes.loc[("c2", "mut"), "change"] == "mutant" and comparison.exit_code == 0
    # ...but caught -> missed means the harness went blind
    comparison, changes = compare(tmp_path, replace(BASE, ("c1", "mut"), outcome="agree", max_ulp=1.0))
    blind = changes.loc[("", "mut")]
    assert blind["change"] == "regression" and "went blind" in blind["reason"] and comparison.exit_code == 1


def test_known_findings_are_not_regressions(tmp_path):
    current = replace(BASE, ("c1", "lib"), outcome="nan_mismatch", max_ulp=1.0, known="0/0 in fp16")
    comparison, changes = compare(tmp_path, current)
    assert changes.loc[("c1", "lib"), "change"] == "known_finding" and comparison.exit_code == 0


def test_other_normdiff_version_is_compared_with_a_warning(tmp_path):
    newer = dict(VERSIONS, normdiff="0.2.0", torch="2.14.0")
    comparison, _ = compare(tmp_path, replace(BASE, ("c1", "good"), outcome="disagree", max_ulp=9.0), versions=newer)
    assert comparison.exit_code == 1  # still compared
    assert any("saved by normdiff 0.1.0, this is normdiff 0.2.0" in w for w in comparison.warnings)
    assert "WARNING" in comparison.terminal() and "**Warning:**" in comparison.markdown()
    assert any(n.startswith("torch: 2.13.0 in the baseline, 2.14.0 now") for n in comparison.notes)


def test_other_suite_is_refused(tmp_path):
    base = saved(tmp_path, suite="smoke")
    with pytest.raises(baseline.BaselineError, match="saved for suite 'smoke'.*--suite smoke"):
        baseline.check_suite(base, "default")
    baseline.check_suite(base, "smoke")  # the same suite is fine


@pytest.mark.parametrize("text, message", [
    (None, "does not exist; create it with `normdiff run --suite SUITE --save-baseline"),
    ('{"format": "normdiff-baseline/1", "meta": {', "is not valid JSON (line 1"),
    ('[1, 2]', "not a normdiff baseline"),
    ('{"format": "something-else/3"}', "has baseline format 'something-else/3'"),
    ('{"format": "normdiff-baseline/1", "meta": {}, "cells": []}', "meta.suite is missing"),
])
def test_malformed_or_missing_file_is_unusable(tmp_path, text, message):
    path = tmp_path / "bad.json"
    if text is not None:
        path.write_text(text)
    with pytest.raises(baseline.BaselineError, match=message.replace("(", r"\(").replace("[", r"\[")):
        baseline.load(path)


def test_malformed_cells_are_named(tmp_path):
    good = json.loads(saved(tmp_path).path.read_text())
    good["cells"][0]["outcome"] = "great"
    (tmp_path / "b.json").write_text(json.dumps(good))
    with pytest.raises(baseline.BaselineError, match="cell 0 .*unknown outcome 'great'"):
        baseline.load(tmp_path / "b.json")
    del good["cells"][0]["max_ulp"]
    (tmp_path / "b.json").write_text(json.dumps(good))
    with pytest.raises(baseline.BaselineError, match=r"missing fields \['max_ulp'\]"):
        baseline.load(tmp_path / "b.json")


def test_cli_exits_2_on_an_unusable_baseline_before_running(tmp_path, capsys):
    (tmp_path / "b.json").write_text("{ truncated")
    code = cli.main(["run", "--suite", "smoke", "-i", "numpy", "--out", str(tmp_path / "r"),
                     "--baseline", str(tmp_path / "b.json")])
    err = capsys.readouterr().err
    assert code == 2 and "is not valid JSON" in err and "--save-baseline" in err
    assert not (tmp_path / "r").exists()  # refused before the run
    code = cli.main(["run", "--suite", "smoke", "-i", "numpy", "--out", str(tmp_path / "r"),
                     "--baseline", str(tmp_path / "missing.json")])
    assert code == 2 and "does not exist" in capsys.readouterr().err


def test_file_format_is_sorted_rounded_and_one_cell_per_line(tmp_path):
    rows = [("c2", "b", "own", "agree", 1.23456789), ("c1", "z", "own", "agree", float("inf")),
            ("c1", "a", "own", "error", None), ("c1", "q", "own", "unsupported", None)]
    path = baseline.save(report(rows), tmp_path / "base.json")
    text = path.read_text()
    doc = json.loads(text)
    assert [(c["case_id"], c["implementation"]) for c in doc["cells"]] == [("c1", "a"), ("c1", "z"), ("c2", "b")]
    assert doc["cells"][2]["max_ulp"] == 1.23457 and doc["cells"][1]["max_ulp"] == "inf"
    assert doc["cells"][0]["max_ulp"] is None
    assert doc["meta"]["implementations"] == {"a": "own", "b": "own", "q": "own", "z": "own"}
    cell_lines = [line for line in text.splitlines() if line.lstrip().startswith('{"case_id"')]
    assert len(cell_lines) == 3  # one per line, unsupported left out
    loaded = baseline.load(path)
    assert loaded.cells["max_ulp"].tolist()[1] == float("inf")


def test_resaving_the_same_run_is_byte_identical(tmp_path, monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    first = baseline.save(report(BASE), tmp_path / "a.json").read_bytes()
    assert json.loads(first)["meta"]["created"] == "2023-11-14"
    assert baseline.save(report(BASE), tmp_path / "b.json").read_bytes() == first
    # a day later, the same measurements: the file keeps its date and its bytes
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700100000")
    assert baseline.save(report(BASE), tmp_path / "a.json").read_bytes() == first
    changed = replace(BASE, ("c1", "good"), max_ulp=1.1)
    assert json.loads(baseline.save(report(changed), tmp_path / "a.json").read_bytes())["meta"]["created"] == "2023-11-16"


def test_an_interrupted_save_leaves_the_old_baseline(tmp_path, monkeypatch):
    path = baseline.save(report(BASE), tmp_path / "base.json")
    before = path.read_bytes()
    real = baseline._lines

    def dies_halfway(doc):
        for i, piece in enumerate(real(doc)):
            if i == 5:
                raise KeyboardInterrupt("killed mid-write")
            yield piece

    monkeypatch.setattr(baseline, "_lines", dies_halfway)
    with pytest.raises(KeyboardInterrupt):
        baseline.save(report(replace(BASE, ("c1", "good"), max_ulp=1.7)), path)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["base.json"]  # no temporary file left behind
    monkeypatch.setattr(baseline, "_lines", real)
    monkeypatch.setattr(os, "fsync", lambda fd: (_ for _ in ()).throw(OSError(errno.ENOSPC, "No space left on device")))
    with pytest.raises(OutputError, match=r"--save-baseline .*base.json: cannot write it \(No space left on device, "
                                          r"ENOSPC\); free some space or give another --save-baseline; .*base.json is "
                                          r"as it was"):
        baseline.save(report(replace(BASE, ("c1", "good"), max_ulp=1.7)), path)
    assert path.read_bytes() == before and os.listdir(tmp_path) == ["base.json"]


@pytest.mark.slow
def test_end_to_end_a_wrong_formula_fails_against_the_baseline(tmp_path, capsys, monkeypatch, fixtures_dir):
    out, base = tmp_path / "r", tmp_path / "baseline.json"
    args = ["run", "--suite", "smoke", "-i", "numpy", "-i", "eps-outside-sqrt", "--out", str(out)]
    assert cli.main(args + ["--save-baseline", str(base)]) == 0
    first = capsys.readouterr().out
    assert f"baseline saved to {base}" in first
    assert cli.main(args + ["--baseline", str(base)]) == 0  # same code: no changes
    assert "changes since baseline" in capsys.readouterr().out and "No changes" in (out / "summary.md").read_text()
    # now numpy computes eps outside the square root, and the mutant is "fixed" (the harness is blind)
    numpy_impl, mutant = registry.get("numpy"), registry.get("eps-outside-sqrt")
    monkeypatch.setitem(registry._builtins(), "numpy", dataclasses.replace(
        numpy_impl, entry=f"{fixtures_dir / 'misbehaving.py'}:eps_outside", batch_rows=False))
    monkeypatch.setitem(registry._builtins(), "eps-outside-sqrt", dataclasses.replace(
        mutant, entry="normdiff.implementations.torch_own:run"))
    code = cli.main(args + ["--baseline", str(base)])
    printed = capsys.readouterr().out
    assert code == 1
    case = "rms_norm@qwen3/bf16/4x128/tiny_rms:1e-3/w=trained"
    assert any(line.strip().startswith("REGRESSION") and "numpy" in line and case in line
               for line in printed.splitlines()), printed
    assert "eps-outside-sqrt" in printed and "went blind" in printed
    changes = pd.read_csv(out / "changes.csv", keep_default_na=False)
    regressions = changes[changes["change"] == "regression"]
    assert case in set(regressions[regressions["implementation"] == "numpy"]["case_id"])
    assert "eps-outside-sqrt" in set(regressions["implementation"])
    summary = (out / "summary.md").read_text()
    assert "## Changes since baseline" in summary and "### Regressions" in summary and case in summary
    meta = json.loads((out / "meta.json").read_text())
    assert meta["exit_code"] == 1 and meta["baseline"]["counts"]["regression"] == len(regressions)
    results = pd.read_csv(out / "results.csv", keep_default_na=False)
    row = results[(results["implementation"] == "numpy") & (results["case_id"] == case)].iloc[0]
    assert row["repro"] == f"normdiff repro {case} --implementation numpy"
