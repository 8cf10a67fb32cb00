"""Each implementation's worst rows, with the side-by-side of actual values on its worst case."""
from __future__ import annotations

import pandas as pd

from normdiff.harness.data.outcomes import PASSING
from normdiff.harness.engine import verdict
from normdiff.harness.engine.columns import C
from normdiff.harness.engine.tables import has_output, ranked, repro_command
from normdiff.reports import markup, messages, worst
from normdiff.reports.view import View

WORST_SHOWN = 3  # worst rows shown per implementation that agrees
FAILING_SHOWN = 10  # ... and per implementation that does not


def row_frame(rows: pd.DataFrame, replays: dict | None = None) -> pd.DataFrame:
    """The shown columns of result rows: the case with its replay command, the outcome, the error
    figures as every failure message words them, the detail (with any known finding) and, where a
    row has one, its diagnosis."""
    known = rows[C.known_finding].fillna("").astype(str) if C.known_finding in rows else pd.Series("", index=rows.index)
    outcome = rows[C.outcome].astype(str)
    records = messages.records(rows)
    detail = [messages.detail(r) for r in records]
    frame = pd.DataFrame({
        markup.CASE_COLUMN: [markup.case_cell(c, i, replays) for c, i in zip(rows[C.case_id], rows[C.implementation])],
        "outcome": [f"{o} (known finding)" if k else o for o, k in zip(outcome, known)],
        "error": [messages.figures(r) for r in records],
        "detail": [(k + (" " + d if d else "")) if k else d for k, d in zip(known, detail)],
    })
    if not frame["detail"].astype(bool).any():
        frame = frame.drop(columns="detail")
    said = [messages.diagnosis(r) for r in records]
    if any(said):  # a user implementation's disagreeing rows: which bug they look like, as check says it
        frame[C.diagnosis] = said
    return frame.reset_index(drop=True)


def _side_by_side(report, rows: pd.DataFrame) -> str:
    with_output = rows[has_output(rows)]
    if with_output.empty:
        return '<p class="muted">No case returned an output to show side by side.</p>'
    top = with_output.iloc[0]
    return side_by_side_html(report, str(top[C.case_id]), str(top[C.implementation]))


def side_by_side_html(report, case_id: str, name: str, uuid: str = "") -> str:
    """The side-by-side of implementation `name` on `case_id` (worst.side_by_side) as a caption and
    a table whose id is `sbs_` and the implementation's slug (`uuid` first, when given: a notebook
    shows several on one page), or why there is none."""
    frame = worst.side_by_side(report.outputs, case_id, name)
    if frame is None:
        return (f'<p class="muted">Side-by-side of <code>{markup.esc(case_id)}</code>: this run did not keep its '
                f"output; replay it with {markup.code(repro_command(case_id, name, report.meta.get('replay')))}</p>")
    worst_col = [c for c in frame.columns if c.endswith("worst")]
    # values to 8 digits (a float32 needs them), the error to 3; NaN shows as nan
    specs = [".3g" if label.startswith("ulps") else ".8g" for label in frame.index]
    shown = pd.DataFrame([[format(v, spec) for v in values] for spec, values in zip(specs, frame.to_numpy().tolist())],
                         index=frame.index, columns=frame.columns)
    styles = {c: (lambda v: "background-color: #fdf0c4") for c in worst_col}
    attrs = {k: markup.esc(v) for k, v in frame.attrs.items()}
    caption = (f"<p>Side-by-side, <code>{markup.esc(case_id)}</code>, row {attrs['row']} ({attrs['dtype']}); "
               f"worst element at column {attrs['column']}:</p>")
    return caption + markup.table(shown, f"{uuid}sbs_{markup.slug(name)}", styles=styles, index=True,
                                  extra_class="sbs")


def _html(report, ranked_rows, page) -> str:
    parts = ['<h2 id="worst">Worst cases per implementation</h2>',
             "<p>Each implementation's worst rows: unexplained failures first, then known findings, then the "
             "largest ULP error. Every row replays with its command. The side-by-side shows the worst row of the "
             "worst case that returned an output: the input, the exact result, the reference (the exact result "
             "rounded once to the case dtype) and the implementation's output, on the first elements and the "
             "worst element, with its distance from the exact result in ULPs.</p>"]
    if ranked_rows.empty:
        return "".join(parts) + "<p>No implementation ran a case.</p>"
    verdicts = report.summary.set_index("implementation")["verdict"].to_dict()
    for name, rows in ranked_rows.groupby(C.implementation, sort=True):
        said = verdicts.get(name, "")
        failing = ~rows[C.outcome].isin(PASSING)
        shown = rows.head(FAILING_SHOWN if failing.any() else WORST_SHOWN)
        kind = {"disagrees": "bad", "agrees": "good", "known finding": "known"}.get(said, "")
        badge = f'<span class="badge" style="{markup.VERDICT_STYLE.get(said, "")}">{markup.esc(said)}</span>'
        parts.append(f'<div class="impl {kind}" id="{markup.slug(name)}"><h3>{markup.esc(name)}{badge}</h3>')
        more = int(failing.sum()) - int((~shown[C.outcome].isin(PASSING)).sum())
        parts.append(markup.table(row_frame(shown, report.meta.get("replay")), f"worst_{markup.slug(name)}",
                                  styles={"outcome": markup.outcome_style}, html_columns=(markup.CASE_COLUMN,),
                                  classes=markup.ROW_CLASSES))
        if more > 0:
            parts.append(f'<p class="muted">... and {more} more failing rows of {markup.esc(name)} in results.csv.</p>')
        parts.append(_side_by_side(report, rows))
        parts.append("</div>")
    return "".join(parts)


WORST = View("worst", 60, derive=lambda report: ranked(report.results[~verdict.expected(report.results)]),
             html=_html, nav="Worst cases")
