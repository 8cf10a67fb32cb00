"""summary.md: the report for a CI job summary, every view's markdown section in report order.

Every name and text from the run (suite, implementations, exception text) goes in through
markup.md_text or markup.md_code: it is shown, never taken as markdown or HTML.
"""
from __future__ import annotations

from normdiff.reports.markup import md_code, md_text
from normdiff.reports.views import VIEWS
from normdiff.text import seconds


def _verdict(meta: dict) -> str:
    if meta["exit_code"] == 0:
        return "every non-mutant implementation agrees with the reference."
    if meta.get("failing"):
        return "disagreeing: " + ", ".join(md_text(n) for n in meta["failing"]) + " (see Failing rows)."
    return "regressions since the baseline (see Changes since baseline)."


def summary_markdown(report) -> str:
    meta = report.meta
    head = (f"# normdiff report: suite {md_code(meta['suite'])}\n\n"
            f"{md_text(meta['cases'])} cases x {md_text(meta['implementations'])} implementations in "
            f"{seconds(meta['seconds'])}. "
            f"Exit status {meta['exit_code']}: {_verdict(meta)}")
    if meta.get("incomplete"):
        head += (f"\n\n**INCOMPLETE:** {md_text(meta['incomplete'])}; the cases that did not finish have no "
                 "rows.")
    sections = [view.markdown(report, report.view(view.name)) for view in VIEWS.values() if view.markdown]
    return "\n\n".join([head] + [s for s in sections if s]) + "\n"
