"""summary.md: the report for a CI job summary, every view's markdown section in report order."""
from __future__ import annotations

from normdiff.reports.views import VIEWS


def _verdict(meta: dict) -> str:
    if meta["exit_code"] == 0:
        return "every non-mutant implementation agrees with the reference."
    if meta.get("failing"):
        return "disagreeing: " + ", ".join(meta["failing"]) + " (see Failing rows)."
    return "regressions since the baseline (see Changes since baseline)."


def summary_markdown(report) -> str:
    meta = report.meta
    head = (f"# normdiff report: suite `{meta['suite']}`\n\n"
            f"{meta['cases']} cases x {meta['implementations']} implementations in {meta['seconds']:.1f} s. "
            f"Exit status {meta['exit_code']}: {_verdict(meta)}")
    sections = [view.markdown(report, report.view(view.name)) for view in VIEWS.values() if view.markdown]
    return "\n\n".join([head] + [s for s in sections if s]) + "\n"
