"""Write a report folder, and render the short terminal summary.

The folder holds every view's files (reports/views/: results.csv, pairs.csv, summary.csv, ...),
summary.md, report.html, junit.xml and meta.json, each written atomically.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd

from normdiff.files import atomic_write
from normdiff.reports import html, junit
from normdiff.reports.markdown import summary_markdown
from normdiff.reports.views import VIEWS
from normdiff.reports.views.agreement import EXACT_SHARE, braces
from normdiff.reports.views.summary import COLUMNS as SUMMARY_COLUMNS


def write(report, out_dir: str | os.PathLike) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for view in VIEWS.values():
        written = view.files(report, report.view(view.name)) if view.files else {}
        for name, text in written.items():
            atomic_write(out / name, text)
        for name in set(view.owns) - set(written):  # an earlier run's (changes.csv of a compared run)
            (out / name).unlink(missing_ok=True)
    atomic_write(out / "summary.md", summary_markdown(report))
    atomic_write(out / "meta.json", json.dumps(report.meta, indent=2, default=str) + "\n")
    atomic_write(out / "junit.xml", junit.junit_xml(report))
    atomic_write(out / "report.html", html.render_html(report, out))  # draws its plots into out/plots/
    return out


def terminal(report) -> str:
    summary = report.summary[SUMMARY_COLUMNS + ["worst_max_ulp"]]
    summary = summary[summary["kind"] != "mutant"]
    summary = summary.loc[:, (summary != 0).any(axis=0)]  # drop all-zero outcome columns
    with pd.option_context("display.width", 160, "display.max_columns", 30):
        text = summary.to_string(index=False, float_format=lambda v: f"{v:.3g}")
    groups = "; ".join(braces(g) for g in report.groups("agree"))
    exact = "\n".join(f"  {dtype:<9} " + "; ".join(braces(g) for g in fams)
                      for dtype, fams in report.exact_families().items())
    return (f"{text}\n\n{_mutant_line(report)}agreement groups: {groups}\n"
            f"bit-exact families (identical on >= {EXACT_SHARE:.0%} of elements):\n{exact}\n")


def _mutant_line(report) -> str:
    kills = report.kill_summary
    if kills.empty:
        return ""
    missed = kills[~kills["caught"]]["mutant"].tolist()
    line = f"mutants caught: {int(kills['caught'].sum())}/{len(kills)}"
    return line + (f"; MISSED (the harness went blind): {', '.join(missed)}" if missed else "") + "\n"
