"""Changes since a baseline (`normdiff run --baseline FILE`; reports/baseline.py has the rules)."""
from __future__ import annotations

import pandas as pd

from normdiff.reports import markup
from normdiff.reports.view import View

HTML_ROWS = 100


def _files(report, comparison) -> dict[str, str]:
    return {} if comparison is None else {"changes.csv": comparison.changes.to_csv(index=False)}


def _markdown(report, comparison) -> str:
    return "" if comparison is None else comparison.markdown()


def _html(report, comparison, page) -> str:
    changes = getattr(comparison, "changes", None)
    if comparison is None or not isinstance(changes, pd.DataFrame):
        return ""
    parts = ['<h2 id="changes">Changes since the baseline</h2>', f"<p>{markup.esc(comparison.headline())}.</p>"]
    if changes.empty:
        return "".join(parts)
    shown = changes.head(HTML_ROWS).copy()
    if {"case_id", "implementation"} <= set(shown.columns):
        shown.insert(0, markup.CASE_COLUMN,
                     [markup.case_cell(c, i, report.meta.get("replay"))
                      for c, i in zip(shown["case_id"], shown["implementation"])])
        shown = shown.drop(columns="case_id")
    styles = {"change": lambda v: {"regression": markup.BAD_STYLE,
                                   "improvement": markup.VERDICT_STYLE["agrees"]}.get(str(v), "")}
    more = f" (the first {HTML_ROWS} of {len(changes)}; changes.csv has all)" if len(changes) > HTML_ROWS else ""
    parts.append(f"<p>{len(changes)} changed cell(s){more}.</p>")
    parts.append(markup.table(shown, "baseline", styles=styles, html_columns=(markup.CASE_COLUMN,),
                              classes={**markup.ROW_CLASSES, "reason": "wrap"}))
    return "".join(parts)


CHANGES = View("changes", 30, derive=lambda report: report.baseline, files=_files, markdown=_markdown, html=_html,
               nav="Changes", owns=("changes.csv",),
              describes=(("changes.csv", "every cell that changed since the baseline (when compared)"),))
