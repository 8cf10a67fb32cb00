"""Memory layouts and batch invariance, per implementation: what the same values gave when they lay
otherwise in memory (cases/layouts.py), and whether a row's output changed with the rows beside it
(harness/engine/runner.py). Both are properties a value-by-value comparison with the oracle sees
only case by case; here each implementation gets one line."""
from __future__ import annotations

import pandas as pd

from normdiff.harness.data.outcomes import NOT_RUN, PASSING
from normdiff.harness.engine import verdict
from normdiff.harness.engine.columns import C
from normdiff.reports import markup
from normdiff.reports.view import View, csv_file

COLUMNS = ["implementation", "layout_cases", "layout_failures", "layouts_failing", "batch_checked",
           "batch_invariant", "batch_varies"]


def derive(report) -> pd.DataFrame | None:
    results = report.results
    if results.empty or C.layout not in results:
        return None
    # only the columns read below: every filter would copy the table's forty
    results = results[[c for c in (C.implementation, C.outcome, C.kind, C.case_id, C.layout, C.batch_invariant)
                       if c in results]]
    ran = results[~results[C.outcome].isin(NOT_RUN) & ~verdict.expected(results)]
    laid = ran[ran[C.layout].astype(str) != "contiguous"]
    checked = ran[ran[C.batch_invariant].fillna("").astype(str) != ""] if C.batch_invariant in ran else ran.iloc[:0]
    if laid.empty and checked.empty:
        return None
    rows = []
    for name in sorted(set(laid[C.implementation]) | set(checked[C.implementation])):
        mine, batch = laid[laid[C.implementation] == name], checked[checked[C.implementation] == name]
        failing = mine[~mine[C.outcome].isin(PASSING)]
        calls = batch.drop_duplicates(C.case_id)
        rows.append({"implementation": name, "layout_cases": len(mine), "layout_failures": len(failing),
                     "layouts_failing": ", ".join(sorted(set(failing[C.layout].astype(str)))),
                     "batch_checked": len(calls), "batch_invariant": int((calls[C.batch_invariant] == "yes").sum()),
                     "batch_varies": ", ".join(sorted(calls.loc[calls[C.batch_invariant] == "no", C.case_id]))})
    return pd.DataFrame(rows, columns=COLUMNS)


INTRO = ("Layout cases hold the same values as their contiguous twins, transposed, in padded or strided rows, "
         "misaligned, or with a stride-0 weight; only frameworks with strides run them. Batch invariance: the "
         "first, middle and last rows of a checked call also ran alone, compared bit for bit.")


def _markdown(report, frame) -> str:
    if frame is None:
        return ""
    lines = ["## Memory layouts and batch invariance", "", INTRO, "",
             "| implementation | layout cases | failing | in layouts | batch-checked | invariant | varies on |",
             "|---|---|---|---|---|---|---|"]
    for r in frame.itertuples():
        lines.append(f"| {markup.md_text(r.implementation)} | {r.layout_cases} | {r.layout_failures} | "
                     f"{markup.md_text(r.layouts_failing)} | {r.batch_checked} | {r.batch_invariant} | "
                     f"{markup.md_text(r.batch_varies)} |")
    return "\n".join(lines)


def _html(report, frame, page) -> str:
    if frame is None:
        return ""
    return (f'<h2 id="invariance">Memory layouts and batch invariance</h2><p>{markup.esc(INTRO)}</p>'
            + markup.table(frame, "invariance"))


INVARIANCE = View("invariance", 55, derive=derive, files=csv_file("invariance.csv"), markdown=_markdown,
                  html=_html, nav="Layouts", owns=("invariance.csv",),
                  describes=(("invariance.csv", "per implementation: layout cases and failures, batch invariance"),))
