"""The rows that fail the run: non-mutant rows outside the budget that no known finding explains."""
from __future__ import annotations

from normdiff.harness.engine.tables import ranked, repro_command
from normdiff.harness.engine.columns import C
from normdiff.wording import outside_the_budget
from normdiff.harness.engine.verdict import failing_rows
from normdiff.reports import markup, messages
from normdiff.reports.view import View
from normdiff.reports.views.worst import row_frame

MARKDOWN_ROWS = 20  # rows in summary.md
HTML_ROWS = 100  # rows in the page's table


def derive(report):
    """The failing rows, the worst (largest max_ulp; errors without one first) first."""
    bad = failing_rows(report.results)
    return (ranked(bad).assign(_u=lambda f: f[C.max_ulp].fillna(float("inf")))
            .sort_values("_u", ascending=False, kind="stable").drop(columns="_u"))


def _markdown(report, bad) -> str:
    if bad.empty:
        return ""
    shown = bad.head(MARKDOWN_ROWS)
    records = messages.records(shown)
    frame = shown.assign(error=[messages.figures(r) for r in records], detail=[messages.detail(r) for r in records],
                         diagnosis=[messages.diagnosis(r) for r in records],
                         replay=[markup.md_code(repro_command(c, i, report.meta.get('replay')), table=True)
                                 for c, i in zip(shown[C.case_id], shown[C.implementation])])
    said = [C.diagnosis] if frame[C.diagnosis].astype(bool).any() else []  # a user implementation's: which bug
    return (f"## Failing rows (worst {MARKDOWN_ROWS})\n\n"
            + markup.markdown_table(frame[[C.case_id, C.implementation, C.outcome, "error", C.detail, *said, "replay"]]))


def _html(report, bad) -> str:
    if bad.empty:
        return ('<h2 id="failing">Failing rows</h2><p>None: every non-mutant implementation agrees with the '
                "reference on every case it ran (known findings aside).</p>")
    rows = bad.head(HTML_ROWS)
    frame = row_frame(rows, report.meta.get("replay"))
    frame.insert(1, "implementation", rows[C.implementation].astype(str).tolist())
    note = f" (the worst {HTML_ROWS} of {len(bad)}; all are in results.csv)" if len(bad) > HTML_ROWS else ""
    return (f'<h2 id="failing">Failing rows</h2><p>{outside_the_budget(f"{len(bad)} unexplained rows")}{note}.</p>'
            + markup.table(frame, "failing", styles={"outcome": markup.outcome_style},
                           html_columns=(markup.CASE_COLUMN,), classes=markup.ROW_CLASSES))


FAILING = View("failing", 70, derive=derive, markdown=_markdown, html=lambda report, bad, page: _html(report, bad),
               nav="Failing rows")
