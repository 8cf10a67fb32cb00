"""CONTRIBUTING.md stays true: a new op is one module (plus its cases, and its maths in the own
implementations when the knobs cannot already say it), and a new view is one file.

The throwaway op here is a weightless RMS norm (Llama 4's QK norm has this shape): the knobs express
it, so adding it is its module (its record, with a convention of its own) and a suite, and it runs
through the case model, the oracle, the runner, the own NumPy implementation and every report file
unchanged.
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd

from normdiff.reports import render
from normdiff.reports.view import View, csv_file
from normdiff.reports.views import VIEWS

# CONTRIBUTING's "Add an op", step 1: the op's module. A weightless RMS norm with a scaled eps (the
# knobs express it, so the own implementations need nothing), under a convention of its own
OP_MODULE = '''"""plain_rms_norm: y = x * rsqrt(mean(x^2) + eps), no weight (a test's throwaway op)."""
from normdiff.harness.data.ops import norm
from normdiff.harness.data.ops.record import NORM_KNOBS, X, Op

OP = Op("plain_rms_norm", "y = x * rsqrt(mean(x^2) + eps), no weight (a test's throwaway op)",
        (X,), ("x", "eps"), NORM_KNOBS, exact=norm.evaluate, vjp=norm.vjp, order=99,
        conventions=(("throwaway", "a test's convention", {"eps": 1e-5}),))
'''
# step 3: its cases
SUITE = """description = "a test's throwaway op"

[[group]]
ops = ["plain_rms_norm"]
conventions = ["throwaway"]
dtypes = ["float32", "bfloat16"]
shapes = ["4x128"]
regimes = ["normal", "tiny_rms:1e-3", "zero_rows"]
passes = ["forward", "backward"]
"""
PACKAGES = {"normdiff": "normdiff", "harness": "normdiff/harness", "cases": "normdiff/cases",
            "implementations": "normdiff/implementations", "reports": "normdiff/reports"}


def test_adding_an_op_is_one_module_and_its_cases(tmp_path):
    """The recipe, run: a copy of the package with one module added under harness/data/ops/ and a
    suite, and nothing else; `normdiff list ops` lists it, `normdiff run` runs it through the case
    model, the oracle, the budgets, the runner and every report file, both passes, own NumPy agreeing."""
    root, copy = Path(__file__).resolve().parents[1], tmp_path / "copy"
    for folder, target in PACKAGES.items():  # the installed namespace's layout (pyproject.toml)
        shutil.copytree(root / folder, copy / target, ignore=shutil.ignore_patterns("__pycache__"),
                        dirs_exist_ok=True)
    (copy / "normdiff/harness/data/ops/plain_rms_norm.py").write_text(OP_MODULE)
    (tmp_path / "throwaway.toml").write_text(SUITE)
    env = {**os.environ, "PYTHONPATH": str(copy)}  # the copy before the editable install

    def normdiff(*args):
        return subprocess.run([sys.executable, "-m", "normdiff.harness.commands.cli", *args], capture_output=True,
                              text=True, env=env, cwd=tmp_path, timeout=300)

    listed = normdiff("list", "ops")
    assert listed.returncode == 0 and "plain_rms_norm(x, eps)" in listed.stdout, listed.stdout + listed.stderr
    ran = normdiff("run", "--suite", str(tmp_path / "throwaway.toml"), "-i", "numpy", "--out", str(tmp_path / "r"))
    assert ran.returncode == 0, ran.stdout + ran.stderr
    rows = pd.read_csv(tmp_path / "r/results.csv")
    assert set(rows["op"]) == {"plain_rms_norm"} and set(rows["pass"]) == {"forward", "backward"}
    assert set(rows["outcome"].astype(str)) <= {"identical", "agree"}, rows[["case_id", "outcome"]]
    assert len(rows) == 12 and rows["weights"].isna().all()  # no weight: an empty column
    assert {"summary.csv", "junit.xml", "summary.md", "report.html", "meta.json"} <= set(os.listdir(tmp_path / "r"))
    assert json.loads((tmp_path / "r/meta.json").read_text())["cases"] == 12


def test_a_new_view_is_one_file(small_report, monkeypatch, tmp_path):
    """A view needs no change anywhere else: the folder, summary.md and report.html pick it up."""
    def derive(report):
        return report.results.groupby("implementation")["max_ulp"].max().reset_index()

    view = View("max_by_impl", 35, derive=derive, files=csv_file("max_by_impl.csv"),
                markdown=lambda report, frame: "## Max ULP by implementation\n\n" + frame.to_string(),
                html=lambda report, frame, page: '<h2 id="max_by_impl">Max ULP by implementation</h2>',
                nav="Max ULP", owns=("max_by_impl.csv",), describes=(("max_by_impl.csv", "a test's view"),))
    monkeypatch.setitem(VIEWS, view.name, view)
    report = dataclasses.replace(small_report)  # a fresh report: the session's has derived its views
    out = render.write(report, tmp_path / "r")
    assert set(pd.read_csv(out / "max_by_impl.csv")["implementation"]) == set(small_report.results["implementation"])
    assert "## Max ULP by implementation" in (out / "summary.md").read_text()
    page = (out / "report.html").read_text()
    assert 'id="max_by_impl"' in page and 'href="#max_by_impl"' in page and "max_by_impl.csv" in page


def test_every_file_contributing_names_exists():
    root = Path(__file__).resolve().parents[1]
    text = (root / "CONTRIBUTING.md").read_text()
    named = set(re.findall(r"`((?:harness|cases|implementations|reports|normdiff|tests)/[\w/.]+\.(?:py|toml))`", text))
    named |= {f"implementations/{n}" for n in re.findall(r"`(\w+_own\.py)`", text)}
    named = {p for p in named if "NAME" not in p}  # the placeholders of "add a framework / view"
    assert len(named) >= 20 and not [p for p in sorted(named) if not (root / p).is_file()]
