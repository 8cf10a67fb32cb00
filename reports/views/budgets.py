"""The ULP budgets the run judged with (as recorded in its meta)."""
from __future__ import annotations

from normdiff.reports import markup
from normdiff.reports.view import View


def derive(report) -> list[tuple[str, str]]:
    return [(dtype, ", ".join(f"{op if op != '*' else 'every op'} {v:g}" for op, v in per_op.items()))
            for dtype, per_op in (report.meta.get("budgets") or {}).items()]


def _markdown(report, rows) -> str:
    return "## Budgets (ULPs of the output dtype)\n\n" + "\n".join(f"- {dtype}: {text}" for dtype, text in rows)


def _html(report, rows, page) -> str:
    return ('<h2 id="budgets">Budgets (ULPs of the output dtype)</h2>'
            + (markup.kv_table(rows) if rows else "<p>None recorded.</p>"))


BUDGETS = View("budgets", 110, derive=derive, markdown=_markdown, html=_html, nav="Budgets")
