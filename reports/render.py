"""Write a report folder, and render the short terminal summary.

The folder holds every view's files (reports/views/: results.csv, pairs.csv, summary.csv, ...),
summary.md, report.html, junit.xml and meta.json, each written atomically.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd

from normdiff import processes
from normdiff.files import atomic_write
from normdiff.harness.engine import verdict
from normdiff.harness.engine.columns import C
from normdiff.reports import folder, html, junit, markup
from normdiff.reports.markdown import summary_markdown
from normdiff.reports.views import VIEWS
from normdiff.reports.views.agreement import EXACT_SHARE, braces
from normdiff.reports.views.summary import COLUMNS as SUMMARY_COLUMNS
from normdiff.text import number, share


def write(report, out_dir: str | os.PathLike) -> Path:
    """Write the report folder: staged in a fresh folder, then put in place whole (reports/folder.py),
    so a reader never sees a mix of two runs; an earlier run's files this one does not write
    (changes.csv of a compared run) go with the old folder, and files normdiff did not write stay."""
    out = Path(out_dir)
    with folder.staged(out, incomplete=report.meta.get("incomplete")) as stage:
        # the page and its plots take as long as every other file together: a forked child draws
        # them meanwhile (processes.forked says where it cannot, and then they are drawn here)
        with processes.forked(html.page_and_plots, report) as page:
            for view in VIEWS.values():
                for name, text in (view.files(report, report.view(view.name)) if view.files else {}).items():
                    atomic_write(stage / name, text)
            atomic_write(stage / "summary.md", summary_markdown(report))
            atomic_write(stage / "meta.json", json.dumps(report.meta, indent=2, default=str) + "\n")
            atomic_write(stage / "junit.xml", junit.junit_xml(report))
            text, drawn = page()
        markup.write_plots(stage, drawn)
        atomic_write(stage / "report.html", text)
    return out


def terminal(report) -> str:
    """The short summary for a terminal. Names come from the user (any function, command or file
    name): each is printed with its control characters as escapes and on its line (printable)."""
    from normdiff.text import printable

    def one(value) -> str:
        return printable(value, newlines=False)

    summary = report.summary[SUMMARY_COLUMNS + ["worst_max_ulp"]]
    summary = summary[~verdict.expected(summary)]
    summary = summary.loc[:, (summary != 0).any(axis=0)]  # drop all-zero outcome columns
    summary = summary.assign(**{c: summary[c].map(one) for c in summary.columns
                                if not pd.api.types.is_numeric_dtype(summary[c])})
    with pd.option_context("display.width", 160, "display.max_columns", 30):
        text = summary.to_string(index=False, float_format=lambda v: number(v, missing="nan"))
    groups = "; ".join(braces(map(one, g)) for g in report.groups("agree"))
    exact = "\n".join(f"  {one(dtype):<9} " + "; ".join(braces(map(one, g)) for g in fams)
                      for dtype, fams in report.exact_families().items())
    return (f"{text}\n\n{_diagnosis_lines(report, one)}{_mutant_line(report)}agreement groups: {groups}\n"
            f"bit-exact families (identical on >= {share(EXACT_SHARE)} of elements):\n{exact}\n")


def _diagnosis_lines(report, one) -> str:
    """A line per user implementation whose disagreeing rows are diagnosed: the bug they look like,
    as check says it (results `diagnosis`)."""
    if C.diagnosis not in report.results:
        return ""
    said = report.results[report.results[C.diagnosis].fillna("").astype(str) != ""]
    lines = [f"{one(name)}: {one(text)}" for name, text in
             said.groupby(C.implementation, sort=True)[C.diagnosis].first().items()]
    return "".join(line + "\n" for line in lines)


def _mutant_line(report) -> str:
    kills = report.kill_summary
    if kills.empty:
        return ""
    missed = kills[~kills["caught"]]["mutant"].tolist()
    line = f"mutants caught: {int(kills['caught'].sum())}/{len(kills)}"
    if missed:
        from normdiff.text import printable

        line += "; MISSED (the harness went blind): " + ", ".join(printable(m, newlines=False) for m in missed)
    return line + "\n"
