"""Per implementation: outcome counts over the cases it supports, its verdict and its worst case."""
from __future__ import annotations

import pandas as pd

from normdiff.harness.data.outcomes import NOT_RUN, OUTCOMES
from normdiff.harness.engine import verdict as verdicts
from normdiff.harness.engine.columns import C
from normdiff.reports import markup
from normdiff.reports.view import View, csv_file
from normdiff.text import clipped

COLUMNS = ["implementation", "kind", "framework", "identical", "agree", "disagree", "nan_mismatch", "error",
           "crashed", "timeout", "unavailable", "verdict"]


def summary(results: pd.DataFrame) -> pd.DataFrame:
    """One row per implementation: outcome counts and the worst case it produced."""
    counts = pd.crosstab(results[C.implementation], results[C.outcome]).reindex(columns=list(OUTCOMES), fill_value=0)
    meta = results.groupby(C.implementation)[[C.kind, C.framework]].first()
    worst = (results.dropna(subset=[C.max_ulp]).sort_values(C.max_ulp, ascending=False)
             .groupby(C.implementation).head(1).set_index(C.implementation))
    table = meta.join(counts)
    table["worst_max_ulp"] = worst[C.max_ulp]
    table["worst_case"] = worst[C.case_id]
    # one groupby over the columns verdict reads, not a filter of the whole table per implementation
    narrow = results[[c for c in (C.implementation, C.outcome, C.kind, C.known_finding, C.output_digest) if c in results]]
    by_name = {name: verdicts.implementation(rows) for name, rows in narrow.groupby(C.implementation, sort=False)}
    table["verdict"] = [by_name[name] for name in table.index]
    return table.reset_index()


def _markdown(report, frame) -> str:
    return "## Implementations\n\n" + markup.markdown_table(frame[COLUMNS + ["worst_max_ulp", "worst_case"]])


def _unavailable_reasons(results: pd.DataFrame) -> dict[str, str]:
    rows = results[results[C.outcome] == "unavailable"]
    return {impl: clipped(reason) for impl, reason in rows.groupby(C.implementation)[C.detail].first().items()} \
        if not rows.empty else {}


def _html(report, summary_frame, page) -> str:
    summary_frame = summary_frame[~verdicts.expected(summary_frame)]
    if summary_frame.empty:
        return '<h2 id="summary">Implementations</h2><p>No implementation ran.</p>'
    columns = [c for c in COLUMNS + ["worst_max_ulp", "worst_case"] if c in summary_frame.columns]
    frame = summary_frame[columns].copy()
    always = {"implementation", "kind", "framework", "identical", "agree", "disagree", "verdict",
              "worst_max_ulp", "worst_case"}
    frame = frame[[c for c in frame.columns if c in always or (frame[c] != 0).any()]]
    reasons = _unavailable_reasons(report.results)
    frame["note"] = [reasons.get(n, "") for n in frame["implementation"]]
    if not frame["note"].astype(bool).any():
        frame = frame.drop(columns="note")
    ran = set(report.results.loc[~report.results[C.outcome].isin(NOT_RUN), C.implementation])
    frame["implementation"] = frame["implementation"].map(
        lambda n: f'<a href="#{markup.slug(n)}">{markup.esc(n)}</a>' if n in ran else markup.esc(n))
    # a case id is long and has no spaces: it may wrap after each '/', or the column runs off the page
    frame["worst_case"] = frame["worst_case"].map(lambda c: "" if pd.isna(c) else
                                                  f'<span class="case">{markup.breakable(c)}</span>')
    table = markup.table(frame, "summary", styles={"verdict": markup.VERDICT_STYLE.get},
                         html_columns=("implementation", "worst_case"),
                         classes={"implementation": "nowrap", "worst_case": "casecol", "note": "wrap"})
    return ('<h2 id="summary">Implementations</h2>'
            "<p>Outcome counts per implementation over the cases it supports. <b>identical</b>: every element "
            "equals the exact result rounded once; <b>agree</b>: within the ULP budget; anything else fails "
            "unless a known finding explains it. Mutants are in their own section.</p>" + table)


SUMMARY = View("summary", 20, derive=lambda report: summary(report.results), files=csv_file("summary.csv"),
               markdown=_markdown, html=_html, nav="Implementations",
               owns=("summary.csv",),
              describes=(("summary.csv, summary.md", "per-implementation summary; markdown for a CI job summary"),))
