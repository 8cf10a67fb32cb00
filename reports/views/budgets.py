"""The ULP budgets the run judged with (as recorded in its meta): each rounding chain, and what the
order of the float32 sum of squares may add at each span (harness/data/budgets.py derives both)."""
from __future__ import annotations

from normdiff.reports import markup
from normdiff.reports.view import View
from normdiff.text import general, number


def derive(report) -> list[tuple[str, str]]:
    budgets = report.meta.get("budgets") or {}
    chains, reduction = budgets.get("chains", {}), budgets.get("reduction", {})
    rows = []
    for dtype, per_op in chains.items():
        text = ", ".join(f"{op if op != '*' else 'every op'} {general(v)}" for op, v in per_op.items())
        extra = reduction.get(dtype, {})
        if extra:
            text += "; plus the reduction at span n: " + ", ".join(f"{number(v, missing='nan')} at {n}"
                                                                   for n, v in extra.items())
        rows.append((dtype, text))
    if budgets.get("rule"):
        rows.append(("rule", budgets["rule"]))
    return rows


def _markdown(report, rows) -> str:
    lines = [f"- {markup.md_text(dtype)}: {markup.md_text(text)}" for dtype, text in rows]
    return "## Budgets (ULPs of the output dtype)\n\n" + "\n".join(lines)


def _html(report, rows, page) -> str:
    return ('<h2 id="budgets">Budgets (ULPs of the output dtype)</h2>'
            + (markup.kv_table(rows) if rows else "<p>None recorded.</p>"))


BUDGETS = View("budgets", 110, derive=derive, markdown=_markdown, html=_html, nav="Budgets")
