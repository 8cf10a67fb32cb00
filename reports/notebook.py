"""A Report shown in a notebook: `Report._repr_html_` (and the pieces `CheckResult._repr_html_`,
harness/commands/check.py, is built from).

Short and answer first, where report.html is the whole story: the verdict, the counts, what failed
(each failing implementation's worst case, each mutant's bug with its sentence, and the command that
replays it), then one compact table. Every name, case id and message is data, escaped by
reports/markup.py on its way out. The HTML carries no script and its style is scoped to its own
block (`.normdiff-repr`), so a notebook page or a docs page that embeds it keeps its own look.
"""
from __future__ import annotations

import secrets

import pandas as pd

from normdiff import wording
from normdiff.harness.data.backward_bugs import BACKWARD_BUGS
from normdiff.harness.data.bugs import BUGS
from normdiff.harness.data.outcomes import NOT_RUN
from normdiff.harness.engine import verdict as verdicts
from normdiff.harness.engine.columns import C
from normdiff.harness.engine.tables import repro_command
from normdiff.reports import html, markup, messages
from normdiff.reports.views.worst import row_frame
from normdiff.text import seconds as duration

LISTED = 6  # failing implementations and mutants named one by one; the rest are counted
TABLE_ROWS = 25  # rows of the compact table
OK_STYLE = "background-color: #d7f0dc; color: #14532d"
FAIL_STYLE = "background-color: #f9d6d5; color: #7f1d1d"
# scoped to the block: a notebook or docs page keeps its own style everywhere else
STYLE = """<style>
.normdiff-repr table.data { border-collapse: collapse; font-size: 12px; margin: 4px 0 8px; }
.normdiff-repr table.data th, .normdiff-repr table.data td { border: 1px solid #d1d5db; padding: 2px 6px;
  text-align: left; vertical-align: top; }
.normdiff-repr table.data th { background: #f3f4f6; }
.normdiff-repr table.sbs td { text-align: right; font-family: ui-monospace, Menlo, Consolas, monospace; }
.normdiff-repr .cmd, .normdiff-repr .case { font-family: ui-monospace, Menlo, Consolas, monospace; font-size: 11.5px; }
.normdiff-repr .muted { color: #6b7280; }
.normdiff-repr ul { margin: 4px 0; }
</style>"""


def block(body: str) -> str:
    """`body` in the block its style is scoped to."""
    return f'<div class="normdiff-repr">{STYLE}{body}</div>'


def banner(ok: bool, text: str) -> str:
    """The verdict's line, green or red (inline style: it needs no stylesheet)."""
    return (f'<p style="{OK_STYLE if ok else FAIL_STYLE}; padding: 6px 10px; border-radius: 5px; font-weight: 600">'
            f"{markup.esc(text)}</p>")


def uuid() -> str:
    """A prefix for a shown block's table ids: two blocks on one page keep theirs apart."""
    return "nd" + secrets.token_hex(4) + "_"


def rows_table(report, rows: pd.DataFrame, prefix: str, name: str) -> str:
    """Result rows as report.html's worst-case tables show them: the case and its replay command,
    the outcome, the error against its budget, the detail."""
    return markup.table(row_frame(rows, report.meta.get("replay")), f"{prefix}{name}",
                        styles={"outcome": markup.outcome_style}, html_columns=(markup.CASE_COLUMN,),
                        classes=markup.ROW_CLASSES)


def replay(command: str) -> str:
    return f'repro: <span class="cmd">{markup.esc(command)}</span>'


# ---- a Report -------------------------------------------------------------------------------------


def report_html(report) -> str:
    """The Report as a notebook shows it (Report._repr_html_)."""
    meta = report.meta
    ok, said = html.verdict(meta)
    seconds = meta.get("seconds")
    took = f", {duration(seconds)}" if isinstance(seconds, (int, float)) else ""
    head = (f"<p><b>normdiff run</b>: suite <code>{markup.esc(meta.get('suite', '?'))}</code>, "
            f"{markup.esc(meta.get('cases', '?'))} cases x {markup.esc(meta.get('implementations', '?'))} "
            f"implementations{markup.esc(took)}</p>")
    parts = [head, banner(ok, said), _failing(report), _mutants(report), _known(report)]
    if ok and not report.view("failing").shape[0]:
        parts.append(_margin(report))
    parts.append(_summary_table(report))
    parts.append('<p class="muted">All of it: <code>report.summary</code>, <code>report.results</code> (one row per '
                 "case x implementation), <code>report.kill_summary</code>; <code>normdiff run --out DIR</code> "
                 "writes report.html with every view.</p>")
    return block("".join(p for p in parts if p))


def _failing(report) -> str:
    """Each failing implementation: how many of its cases are outside the budget, its worst case and
    the command that replays it."""
    bad = report.view("failing")
    if bad.empty:
        return ""
    ran = report.results[~report.results[C.outcome].isin(NOT_RUN)]
    totals = ran.groupby(C.implementation).size()
    replays = report.meta.get("replay")
    items = []
    names = list(dict.fromkeys(bad[C.implementation]))
    for name in names[:LISTED]:
        rows = bad[bad[C.implementation] == name]
        top = rows.iloc[0]
        what = wording.outside_the_budget(f"{len(rows)} of {int(totals.get(name, len(rows)))} cases")
        items.append(f"<li><b>{markup.esc(name)}</b>: {markup.esc(what)}; worst case: "
                     f"{markup.esc(messages.headline(top))}<br>"
                     f"{replay(repro_command(top[C.case_id], name, replays))}</li>")
    more = f'<p class="muted">... and {len(names) - LISTED} more failing implementations.</p>' \
        if len(names) > LISTED else ""
    return ("<p>Failing, each with its worst case (<code>normdiff check</code> says which bug it looks like):</p><ul>"
            + "".join(items) + "</ul>" + more)


def _mutants(report) -> str:
    """The mutants: how many are caught; each one's bug with its sentence and the case that exposes
    it worst (a missed one first: the harness went blind to it)."""
    kills = report.kill_summary
    if kills.empty:
        return ""
    caught = int(kills["caught"].sum())
    kills = kills.sort_values(["caught", "mutant"], kind="stable")
    items = []
    for k in kills.head(LISTED).itertuples(index=False):
        bug = BUGS.get(k.mutant) or BACKWARD_BUGS.get(k.mutant)
        sentence = f" -- {bug.symptom}" if bug is not None else ""
        status = f"caught by {k.caught_by} of {k.cases} cases" if k.caught else f"MISSED: none of its {k.cases} cases catches it"
        item = f"<li><b>{markup.esc(k.mutant)}</b> {markup.esc(status)}{markup.esc(sentence)}"
        if k.exposed_case:
            rows = report.results[(report.results[C.case_id] == k.exposed_case)
                                  & (report.results[C.implementation] == k.mutant)]
            if len(rows):
                item += f"<br>exposed worst by {markup.esc(messages.headline(rows.iloc[0]))}"
            item += f"<br>{replay(repro_command(k.exposed_case, k.mutant, report.meta.get('replay')))}"
        items.append(item + "</li>")
    more = f'<p class="muted">... and {len(kills) - LISTED} more in report.kill_summary.</p>' \
        if len(kills) > LISTED else ""
    return (f"<p>Mutants (catalogued bugs planted on purpose) caught: {caught} of {len(kills)}</p><ul>"
            + "".join(items) + "</ul>" + more)


def _known(report) -> str:
    explained = verdicts.explained(report.results) & ~verdicts.expected(report.results)
    if not explained.any():
        return ""
    names = sorted(report.results.loc[explained, C.implementation].astype(str).unique())
    rows = wording.outside_the_budget(f"{int(explained.sum())} row(s)")
    return f"<p>{markup.esc(rows)} are explained by a known finding ({markup.esc(', '.join(names))}): they pass.</p>"


def _margin(report) -> str:
    """The row closest to its budget, when every implementation agrees: by how much it passed."""
    rows = report.results[~verdicts.expected(report.results)]
    judged = rows[rows[C.max_ulp].notna() & (rows[C.tolerance_ulp] > 0)]
    if judged.empty:
        return ""
    top = judged.loc[(judged[C.max_ulp] / judged[C.tolerance_ulp]).idxmax()]
    closest = wording.against_a_budget(top[C.max_ulp], top[C.tolerance_ulp])
    return (f"<p>Margin: worst {markup.esc(closest)}, <b>{markup.esc(top[C.implementation])}</b> on "
            f'<span class="case">{markup.esc(top[C.case_id])}</span></p>')


SEVERITY = {"disagrees": 0, "missed": 0, "error": 1, "partial": 1, "known finding": 2}


def _summary_table(report) -> str:
    """One row per implementation, failing ones first: its verdict and outcome counts (the columns
    that are not all zero) and its worst error."""
    summary = report.summary
    if summary.empty:
        return "<p>No implementation ran.</p>"
    order = summary["verdict"].map(lambda v: SEVERITY.get(v, 3))
    summary = summary.assign(_order=order).sort_values(["_order", "implementation"], kind="stable")
    counts = [c for c in ("identical", "agree", "disagree", "nan_mismatch", "error", "crashed", "timeout",
                          "unsupported", "unavailable") if c in summary]
    always = {"identical", "agree", "disagree"}
    shown = ["implementation", "kind", "verdict"] + [c for c in counts if c in always or (summary[c] != 0).any()]
    frame = summary[shown + ["worst_max_ulp"]].head(TABLE_ROWS).reset_index(drop=True)
    more = (f'<p class="muted">... and {len(summary) - TABLE_ROWS} more implementations in report.summary.</p>'
            if len(summary) > TABLE_ROWS else "")
    return markup.table(frame, uuid() + "summary", styles={"verdict": markup.VERDICT_STYLE.get},
                        classes={"implementation": "nowrap"}) + more
