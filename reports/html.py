"""`report.html`: one self-contained page (inline CSS, plots as base64 data URIs, no scripts, no
external fonts) with every view of the results table, built with pandas' Styler.

Tables need jinja2 (pandas' Styler); without it they fall back to plain `DataFrame.to_html`. Plots
need matplotlib; without it the page is still written, with a note where the plots would be.
"""
from __future__ import annotations

import base64
import datetime
import html as _html
import importlib.util
import re

import pandas as pd

from normdiff.harness.compare import NOT_RUN, PASSING
from normdiff.harness.findings import explained
from normdiff.reports import tables, worst

WORST_SHOWN = 3  # worst rows shown per implementation that agrees
FAILING_SHOWN = 10  # ... and per implementation that does not
FAILING_TABLE = 100  # rows in the table of failing rows

VERDICT_STYLE = {
    "agrees": "background-color: #d7f0dc; color: #14532d",
    "caught": "background-color: #d7f0dc; color: #14532d",
    "disagrees": "background-color: #f9d6d5; color: #7f1d1d; font-weight: 600",
    "missed": "background-color: #f9d6d5; color: #7f1d1d; font-weight: 600",
    "known finding": "background-color: #fdf0c4; color: #713f12",
    "unavailable": "background-color: #e5e7eb; color: #374151",
    "nothing to run": "background-color: #e5e7eb; color: #374151",
}
OUTCOME_STYLE = {"identical": VERDICT_STYLE["agrees"], "agree": VERDICT_STYLE["agrees"],
                 "unsupported": VERDICT_STYLE["unavailable"], "unavailable": VERDICT_STYLE["unavailable"]}
BAD_STYLE = VERDICT_STYLE["disagrees"]

CSS = """
:root { color-scheme: light; }
body { font: 14px/1.45 -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif;
       color: #1f2937; background: #fff; margin: 0; }
main { max-width: 1360px; margin: 0 auto; padding: 16px 28px 48px; }
h1 { font-size: 24px; margin: 8px 0 4px; }
h2 { font-size: 19px; margin: 34px 0 10px; padding-bottom: 4px; border-bottom: 2px solid #e5e7eb; }
h3 { font-size: 15px; margin: 22px 0 6px; }
p { margin: 6px 0; }
code, .mono { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, "DejaVu Sans Mono", monospace;
              font-size: 12px; }
code { background: #f3f4f6; padding: 1px 4px; border-radius: 3px; }
.banner { padding: 10px 14px; border-radius: 6px; margin: 10px 0 4px; font-weight: 600; }
.banner.ok { background: #d7f0dc; color: #14532d; }
.banner.fail { background: #f9d6d5; color: #7f1d1d; }
nav { margin: 8px 0 0; font-size: 13px; }
nav a { margin-right: 12px; color: #1d4ed8; text-decoration: none; }
.scroll { overflow-x: auto; max-width: 100%; }
table.data { border-collapse: collapse; font-size: 12.5px; margin: 6px 0 10px; }
table.data th, table.data td { border: 1px solid #d1d5db; padding: 3px 7px; text-align: left;
                               vertical-align: top; }
table.data th { background: #f3f4f6; font-weight: 600; }
table.data td.num, table.data td.data { font-variant-numeric: tabular-nums; }
table.data td.wrap { white-space: normal; min-width: 180px; max-width: 420px; }
table.data td.nowrap { white-space: nowrap; }
table.data td.regimes { white-space: normal; min-width: 120px; max-width: 220px; }
table.kv th { width: 200px; }
table.sbs td { text-align: right; font-family: ui-monospace, Menlo, Consolas, "DejaVu Sans Mono", monospace;
               font-size: 12px; }
.cmd { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, "DejaVu Sans Mono", monospace;
       font-size: 11.5px; color: #374151; }
table.data td.casecol { min-width: 260px; }
table.data td.casecol .case { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, "DejaVu Sans Mono",
                              monospace; font-size: 12px; }
table.data td.casecol .cmd { font-size: 11px; color: #6b7280; }
.muted { color: #6b7280; }
.note { background: #f9fafb; border-left: 3px solid #9ca3af; padding: 6px 10px; margin: 8px 0; }
ul.groups li { margin: 3px 0; }
figure { margin: 10px 0 18px; }
figure img { max-width: 100%; height: auto; border: 1px solid #e5e7eb; }
figcaption { font-size: 12.5px; color: #4b5563; margin-top: 4px; max-width: 1000px; }
details summary { cursor: pointer; color: #1d4ed8; margin: 6px 0; }
.impl { border-left: 4px solid #d1d5db; padding: 2px 0 2px 12px; margin: 14px 0; }
.impl.bad { border-left-color: #dc2626; }
.impl.good { border-left-color: #16a34a; }
.impl.known { border-left-color: #ca8a04; }
.badge { font-size: 12px; padding: 1px 7px; border-radius: 10px; font-weight: 500; margin-left: 6px; }
"""


# ---- provenance ------------------------------------------------------------------------------

def run_metadata(report) -> list[tuple[str, str]]:
    """(label, value) pairs for the top of the page: the run, then the versions."""
    from normdiff.reports.render import git_revision  # provenance lives with versions()

    meta = report.meta
    versions = dict(meta.get("versions") or {})
    value = lambda v: "not installed" if v is None else str(v)
    rows = [("suite", f"{meta.get('suite', '?')}" + (f" ({meta['suite_path']})" if meta.get("suite_path") else "")),
            ("cases", str(meta.get("cases", "?"))),
            ("implementations", str(meta.get("implementations", "?"))),
            ("run time", f"{meta['seconds']:.1f} s" if isinstance(meta.get("seconds"), (int, float)) else "?"),
            ("exit status", str(meta.get("exit_code", "?"))),
            ("normdiff", f"{value(versions.pop('normdiff', None))}, "
                         f"git revision {meta.get('git_revision') or git_revision()}"),
            ("python", value(versions.pop("python", None))),
            ("platform", value(versions.pop("platform", None)))]
    for name in ("numpy", "torch", "jax", "jaxlib", "transformers", "flax", "ml_dtypes", "pandas"):
        if name in versions:
            rows.append((name, value(versions.pop(name))))
    rows += [(k, value(v)) for k, v in versions.items()]
    rows.append(("report written", datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")))
    return rows


# ---- tables ----------------------------------------------------------------------------------

def _has_styler() -> bool:
    return importlib.util.find_spec("jinja2") is not None


def _num(value) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return ""
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


def _table(frame: pd.DataFrame, uuid: str, styles: dict[str, object] | None = None,
           html_columns: tuple[str, ...] = (), classes: dict[str, str] | None = None,
           formats: dict[str, object] | None = None, index: bool = False, extra_class: str = "",
           na_rep: str = "") -> str:
    """A table through pandas' Styler: values HTML-escaped except `html_columns` (already HTML),
    `styles` maps a column to a function value -> CSS, `classes` a column to a td class,
    `formats` a column to a formatter. Without jinja2: plain DataFrame.to_html, no colours."""
    table_class = f"data {extra_class}".strip()
    if not _has_styler():
        shown = frame.copy()
        for column, fn in (formats or {}).items():
            shown[column] = shown[column].map(fn)
        for column in shown.columns:
            if column not in html_columns:
                shown[column] = shown[column].map(lambda v: _html.escape(_num(v)))
        return ('<div class="scroll">' + shown.to_html(index=index, escape=False, classes=table_class, border=0,
                                                        na_rep=na_rep) + "</div>")
    styler = (frame.style.set_uuid(uuid).set_table_attributes(f'class="{table_class}"')
              .format_index(escape="html", axis=0).format_index(escape="html", axis=1))
    if not index:
        styler = styler.hide(axis="index")
    plain = [c for c in frame.columns if c not in html_columns]
    if plain:
        styler = styler.format(lambda v: _num(v), subset=plain, escape="html", na_rep=na_rep)
    for column, fn in (formats or {}).items():
        styler = styler.format(fn, subset=[column], escape=None if column in html_columns else "html",
                               na_rep=na_rep)
    for column, fn in (styles or {}).items():
        if column in frame.columns:
            styler = styler.map(lambda v, fn=fn: fn(v) or "", subset=[column])
    if classes:
        td = pd.DataFrame("", index=frame.index, columns=frame.columns)
        for column, cls in classes.items():
            if column in td.columns:
                td[column] = cls
        styler = styler.set_td_classes(td)
    return f'<div class="scroll">{styler.to_html()}</div>'


def _shade(share) -> str:
    """Background for a share in [0, 1]: red (0) - amber - green (1), readable with dark text."""
    if share is None or share != share:
        return "background-color: #f3f4f6; color: #9ca3af"
    share = min(max(float(share), 0.0), 1.0)
    stops = [(0.0, (0xf4, 0xa6, 0xa3)), (0.5, (0xfb, 0xe3, 0x8e)), (0.95, (0xd9, 0xef, 0xb0)),
             (1.0, (0x86, 0xd1, 0x9a))]
    for (a, ca), (b, cb) in zip(stops, stops[1:]):
        if share <= b:
            t = 0.0 if b == a else (share - a) / (b - a)
            rgb = tuple(round(x + (y - x) * t) for x, y in zip(ca, cb))
            return "background-color: #%02x%02x%02x" % rgb
    return "background-color: #86d19a"


def _esc(text) -> str:
    return _html.escape(str(text))


def _code(text) -> str:
    return f'<span class="cmd">{_esc(text)}</span>'


def _breakable(text) -> str:
    """Escaped text that may wrap after each '/' (case ids are long and have no spaces)."""
    return _esc(text).replace("/", "/<wbr>")


def _case_cell(case_id, implementation) -> str:
    """A case id with the command that replays it underneath."""
    return (f'<span class="case">{_breakable(case_id)}</span><br>'
            f'<span class="cmd">{_breakable(worst.repro_command(case_id, implementation))}</span>')


def _slug(name: str) -> str:
    return "impl-" + re.sub(r"[^A-Za-z0-9_-]+", "-", str(name))


# ---- sections --------------------------------------------------------------------------------

def _section_run(report) -> str:
    rows = "".join(f"<tr><th>{_esc(k)}</th><td>{_esc(v)}</td></tr>" for k, v in run_metadata(report))
    return f'<h2 id="run">Run</h2><div class="scroll"><table class="data kv">{rows}</table></div>'


def _section_implementations(report, summary: pd.DataFrame) -> str:
    from normdiff.reports.render import SUMMARY_COLUMNS

    summary = summary[summary["kind"] != "mutant"]
    if summary.empty:
        return '<h2 id="implementations">Implementations</h2><p>No implementation ran.</p>'
    columns = [c for c in SUMMARY_COLUMNS + ["worst_max_ulp", "worst_case"] if c in summary.columns]
    frame = summary[columns].copy()
    always = {"implementation", "kind", "framework", "identical", "agree", "disagree", "verdict",
              "worst_max_ulp", "worst_case"}
    frame = frame[[c for c in frame.columns if c in always or (frame[c] != 0).any()]]
    reasons = _unavailable_reasons(report.results)
    frame["note"] = [reasons.get(n, "") for n in frame["implementation"]]
    if not frame["note"].astype(bool).any():
        frame = frame.drop(columns="note")
    ran = set(report.results.loc[~report.results["outcome"].isin(NOT_RUN), "implementation"])
    frame["implementation"] = frame["implementation"].map(
        lambda n: f'<a href="#{_slug(n)}">{_esc(n)}</a>' if n in ran else _esc(n))
    table = _table(frame, "summary", styles={"verdict": VERDICT_STYLE.get}, html_columns=("implementation",),
                   classes={"implementation": "nowrap", "worst_case": "mono nowrap", "note": "wrap"})
    return ('<h2 id="implementations">Implementations</h2>'
            "<p>Outcome counts per implementation over the cases it supports. <b>identical</b>: every element "
            "equals the exact result rounded once; <b>agree</b>: within the ULP budget; anything else fails "
            "unless a known finding explains it. Mutants are in their own section.</p>" + table)


def _unavailable_reasons(results: pd.DataFrame) -> dict[str, str]:
    rows = results[results["outcome"] == "unavailable"]
    return rows.groupby("implementation")["detail"].first().to_dict() if not rows.empty else {}


def _section_baseline(report) -> str:
    """Changes since a baseline (`normdiff run --baseline FILE`), when the run was compared."""
    comparison = getattr(report, "baseline", None)
    changes = getattr(comparison, "changes", None)
    if comparison is None or not isinstance(changes, pd.DataFrame):
        return ""
    try:
        headline = comparison.headline()
    except Exception:
        headline = f"{len(changes)} change(s)"
    parts = ['<h2 id="baseline">Changes since the baseline</h2>', f"<p>{_esc(headline)}.</p>"]
    if changes.empty:
        return "".join(parts)
    shown = changes.head(FAILING_TABLE).copy()
    if {"case_id", "implementation"} <= set(shown.columns):
        shown.insert(0, CASE_COLUMN, [_case_cell(c, i) for c, i in zip(shown["case_id"], shown["implementation"])])
        shown = shown.drop(columns="case_id")
    styles = {"change": lambda v: {"regression": BAD_STYLE, "improvement": VERDICT_STYLE["agrees"]}.get(str(v), "")}
    more = (f" (the first {FAILING_TABLE} of {len(changes)}; changes.csv has all)"
            if len(changes) > FAILING_TABLE else "")
    parts.append(f"<p>{len(changes)} changed cell(s){more}.</p>")
    parts.append(_table(shown, "baseline", styles=styles, html_columns=(CASE_COLUMN,),
                        classes={**ROW_CLASSES, "reason": "wrap"}))
    return "".join(parts)


def _figure(plots: dict[str, bytes], name: str, alt: str, caption: str) -> str:
    data = plots.get(name)
    if data is None:
        return ""
    uri = "data:image/png;base64," + base64.b64encode(data).decode("ascii")
    return (f'<figure><img src="{uri}" alt="{_esc(alt)}">'
            f"<figcaption>{caption} (also <code>plots/{_esc(name)}.png</code>)</figcaption></figure>")


def _section_errors(report, plots: dict[str, bytes], plot_note: str) -> str:
    body = _figure(plots, "regime_errors", "worst error per input regime and implementation",
                   "The worst error of each implementation (mutants left out) in each input regime, as a "
                   "multiple of the ULP budget of its case (max ULP / budget, log scale). Points above the "
                   "red line are outside the budget.")
    return '<h2 id="errors">Error by input regime</h2>' + (body or f'<p class="note">{_esc(plot_note)}</p>')


def _section_agreement(report, plots: dict[str, bytes], plot_note: str) -> str:
    from normdiff.reports.render import EXACT_SHARE

    parts = ['<h2 id="agreement">Agreement</h2>']
    parts.append(_figure(plots, "agreement", "pairwise agreement heat maps",
                         "Share of the cases two implementations share on which they agree within the ULP budget "
                         "(left) and on which their outputs are bit-identical (right). Grey: the two share no case.")
                 or f'<p class="note">{_esc(plot_note)}</p>')
    groups = report.groups("agree")
    parts.append("<h3>Groups that agree on every shared case (within the ULP budget)</h3>"
                 '<p class="muted">Connected groups: two implementations are linked when they agree on every case '
                 "they share; a group can hold two members that never met, or met on a case where they are further "
                 "apart than the budget (each is within the budget of the reference).</p>")
    parts.append('<ul class="groups">' + "".join(f"<li>{_esc(', '.join(g))}</li>" for g in groups) + "</ul>"
                 if groups else "<p>None.</p>")
    parts.append(f"<h3>Bit-exact families (bit-identical on at least {EXACT_SHARE:.0%} of the elements of "
                 "shared cases)</h3>")
    families = report.exact_families()
    rows = "".join(f'<tr><th>{_esc(d)}</th><td>{"<br>".join(_esc("{" + ", ".join(g) + "}") for g in fams)}</td></tr>'
                   for d, fams in families.items())
    parts.append(f'<div class="scroll"><table class="data kv">{rows}</table></div>' if rows else "<p>None.</p>")
    for value, title in (("agree", "agree within the budget"), ("identical", "bit-identical")):
        matrix = report.agreement(value)
        if matrix.empty:
            continue
        shown = matrix.copy()
        styles = {c: _shade for c in shown.columns}
        formats = {c: (lambda v: "" if v != v else f"{v:.0%}") for c in shown.columns}
        parts.append(f"<details><summary>Matrix as numbers: share of shared cases on which two implementations "
                     f"{title}</summary>" + _table(shown, f"matrix_{value}", styles=styles, formats=formats,
                                                   index=True) + "</details>")
    return "".join(parts)


def _row_frame(rows: pd.DataFrame) -> pd.DataFrame:
    """The shown columns of result rows, with the replay command."""
    frame = pd.DataFrame({
        CASE_COLUMN: [_case_cell(c, i) for c, i in zip(rows["case_id"], rows["implementation"])],
        "outcome": rows["outcome"].astype(str),
        "max_ulp": rows["max_ulp"],
        "budget": rows["tolerance_ulp"],
        "rel_l2": rows["rel_l2"],
        "detail": rows["detail"].fillna("").astype(str),
    })
    known = rows["known_finding"].fillna("").astype(str) if "known_finding" in rows else pd.Series("", index=rows.index)
    frame["outcome"] = [f"{o} (known finding)" if k else o for o, k in zip(frame["outcome"], known)]
    frame["detail"] = [(k + (" " + d if d else "")) if k else d for k, d in zip(known, frame["detail"])]
    if not frame["detail"].astype(bool).any():
        frame = frame.drop(columns="detail")
    return frame.reset_index(drop=True)


CASE_COLUMN = "case id and replay command"
ROW_CLASSES = {CASE_COLUMN: "casecol", "implementation": "nowrap", "max_ulp": "nowrap", "budget": "nowrap",
               "rel_l2": "nowrap", "detail": "wrap"}


def _outcome_style(value) -> str:
    if "known finding" in str(value):
        return VERDICT_STYLE["known finding"]
    return OUTCOME_STYLE.get(str(value), BAD_STYLE)


def _section_worst(report, summary: pd.DataFrame) -> str:
    results = report.results
    ranked = worst.ranked(results[results["kind"] != "mutant"])
    parts = ['<h2 id="worst">Worst cases per implementation</h2>',
             "<p>Each implementation's worst rows: unexplained failures first, then known findings, then the "
             "largest ULP error. Every row replays with its command. The side-by-side shows the worst row of the "
             "worst case that returned an output: the input, the exact result, the reference (the exact result "
             "rounded once to the case dtype) and the implementation's output, on the first elements and the "
             "worst element, with its distance from the exact result in ULPs.</p>"]
    if ranked.empty:
        return "".join(parts) + "<p>No implementation ran a case.</p>"
    verdicts = summary.set_index("implementation")["verdict"].to_dict()
    for name, rows in ranked.groupby("implementation", sort=True):
        verdict = verdicts.get(name, "")
        failing = ~rows["outcome"].isin(PASSING)
        shown = rows.head(FAILING_SHOWN if failing.any() else WORST_SHOWN)
        kind = {"disagrees": "bad", "agrees": "good", "known finding": "known"}.get(verdict, "")
        badge = f'<span class="badge" style="{VERDICT_STYLE.get(verdict, "")}">{_esc(verdict)}</span>'
        parts.append(f'<div class="impl {kind}" id="{_slug(name)}"><h3>{_esc(name)}{badge}</h3>')
        more = int(failing.sum()) - int((~shown["outcome"].isin(PASSING)).sum())
        frame = _row_frame(shown)
        parts.append(_table(frame, f"worst_{_slug(name)}", styles={"outcome": _outcome_style},
                            html_columns=(CASE_COLUMN,), classes=ROW_CLASSES))
        if more > 0:
            parts.append(f'<p class="muted">... and {more} more failing rows of {_esc(name)} in results.csv.</p>')
        parts.append(_side_by_side_html(report, rows))
        parts.append("</div>")
    return "".join(parts)


def _side_by_side_html(report, rows: pd.DataFrame) -> str:
    with_output = rows[rows["output_digest"].fillna("").astype(str) != ""] if "output_digest" in rows else rows
    if with_output.empty:
        return '<p class="muted">No case returned an output to show side by side.</p>'
    top = with_output.iloc[0]
    case_id, name = str(top["case_id"]), str(top["implementation"])
    frame = worst.side_by_side(report.outputs, case_id, name)
    if frame is None:
        return (f'<p class="muted">Side-by-side of <code>{_esc(case_id)}</code>: this run did not keep its output; '
                f"replay it with {_code(worst.repro_command(case_id, name))}</p>")
    worst_col = [c for c in frame.columns if c.endswith("worst")]
    shown = frame.astype(object)
    for label in shown.index:  # values to 8 digits (a float32 needs them), the error to 3
        spec = ".3g" if label.startswith("ulps") else ".8g"
        shown.loc[label] = [format(v, spec) for v in frame.loc[label]]  # NaN shows as nan
    styles = {c: (lambda v: "background-color: #fdf0c4") for c in worst_col}
    caption = (f"<p>Side-by-side, <code>{_esc(case_id)}</code>, row {frame.attrs['row']} "
               f"({_esc(frame.attrs['dtype'])}); worst element at column {frame.attrs['column']}:</p>")
    return caption + _table(shown, f"sbs_{_slug(name)}", styles=styles, index=True, extra_class="sbs")


def _section_failing(report) -> str:
    bad = tables.failing_rows(report.results)
    if bad.empty:
        return ('<h2 id="failing">Failing rows</h2><p>None: every non-mutant implementation agrees with the '
                "reference on every case it ran (known findings aside).</p>")
    rows = worst.ranked(bad).assign(_u=lambda f: f["max_ulp"].fillna(float("inf")))
    rows = rows.sort_values("_u", ascending=False, kind="stable").drop(columns="_u").head(FAILING_TABLE)
    frame = _row_frame(rows)
    frame.insert(1, "implementation", rows["implementation"].astype(str).tolist())
    note = f" (the worst {FAILING_TABLE} of {len(bad)}; all are in results.csv)" if len(bad) > FAILING_TABLE else ""
    return (f'<h2 id="failing">Failing rows</h2><p>{len(bad)} unexplained rows outside the budget{note}.</p>'
            + _table(frame, "failing", styles={"outcome": _outcome_style}, html_columns=(CASE_COLUMN,),
                     classes=ROW_CLASSES))


def _section_known(report) -> str:
    results = report.results
    if "known_finding" not in results:
        return ""
    known = results[explained(results)]
    stale = report.meta.get("stale_findings") or []
    if known.empty and not stale:
        return ""
    parts = ['<h2 id="known">Known findings</h2><p>Real libraries that disagree with their contract; their rows '
             "keep their outcome but do not fail the run.</p><ul>"]
    for (impl, text), rows in known.groupby(["implementation", "known_finding"]):
        cases = "".join(f"<li><code>{_esc(c)}</code> {_code(worst.repro_command(c, impl))}</li>"
                        for c in sorted(rows["case_id"]))
        parts.append(f"<li><b>{_esc(impl)}</b>, {len(rows)} case(s): {_esc(text)}<ul>{cases}</ul></li>")
    parts.append("</ul>")
    parts += [f'<p class="note">Known finding no longer reproduces: {_esc(n)}</p>' for n in stale]
    return "".join(parts)


EXPOSED = "case that exposes it worst, and its replay command"


def _caught_style(value) -> str:
    return VERDICT_STYLE["missed" if str(value).startswith("0 of") else "caught"]


def _section_mutants(report) -> str:
    kills = report.kill_summary
    if kills.empty:
        return ""
    frame = pd.DataFrame({
        "mutant": kills["mutant"],
        "op@convention": kills["op"] + "@" + kills["convention"],
        "caught by": [f"{k} of {n} cases" for k, n in zip(kills["caught_by"], kills["cases"])],
        "exposing regimes": kills["exposing_regimes"], "invisible regimes": kills["invisible_regimes"],
        "typical rel_l2": kills["typical_rel_l2"], "exposed rel_l2": kills["exposed_rel_l2"],
        "typical cosine": kills["typical_cosine"],
        "assert_close passes (typical)": kills["typical_assert_close_passes"],
        EXPOSED: [_case_cell(c, m) if c else "" for c, m in zip(kills["exposed_case"], kills["mutant"])]})
    missed = kills[~kills["caught"]]["mutant"].tolist()
    head = (f'<p class="banner fail">Missed (the harness went blind): {_esc(", ".join(missed))}</p>' if missed else
            f'<p class="banner ok">Every mutant caught: {len(kills)}/{len(kills)}.</p>')
    return ('<h2 id="mutants">Mutants (the harness\'s self-test)</h2>'
            "<p>Catalogued bugs planted in a correct implementation. Each must be caught (<code>disagree</code> or "
            "<code>nan_mismatch</code>) by some case. The <b>typical</b> columns: how plausible it looks on "
            "N(0, 1) inputs "
            "(relative L2 error, cosine to the reference, whether <code>torch.testing.assert_close</code>'s "
            "defaults pass it); <b>exposed rel_l2</b>: its error on the case that exposes it worst.</p>"
            + head + _table(frame, "mutants", styles={"caught by": _caught_style}, html_columns=(EXPOSED,),
                            classes={"mutant": "nowrap", "op@convention": "nowrap", "caught by": "nowrap",
                                     "exposing regimes": "regimes", "invisible regimes": "regimes",
                                     "typical rel_l2": "nowrap", "exposed rel_l2": "nowrap",
                                     EXPOSED: "casecol"}))


def _section_budgets(report) -> str:
    budgets = report.meta.get("budgets") or {}
    rows = "".join(f"<tr><th>{_esc(d)}</th><td>"
                   + ", ".join(f"{_esc(op if op != '*' else 'every op')} {v:g}" for op, v in per_op.items())
                   + "</td></tr>" for d, per_op in budgets.items())
    return ('<h2 id="budgets">Budgets (ULPs of the output dtype)</h2>'
            + (f'<div class="scroll"><table class="data kv">{rows}</table></div>' if rows else "<p>None recorded.</p>"))


def _section_files(report) -> str:
    compared = getattr(report, "baseline", None) is not None
    baseline = [("changes.csv", "every cell that changed since the baseline")] if compared else []
    files = baseline + [("results.csv", "one row per case x implementation (every view here derives from it)"),
             ("pairs.csv", "one row per case x pair of implementations"),
             ("agreement.csv, identical.csv", "the pairwise matrices"),
             ("summary.csv, summary.md", "per-implementation summary; markdown for a CI job summary"),
             ("kill_matrix.csv, kill_summary.csv", "mutants x cases"),
             ("junit.xml", "one test case per implementation x op@convention, for CI test reports"),
             ("plots/*.png", "the plots on this page"), ("meta.json", "the run's metadata")]
    rows = "".join(f"<tr><th><code>{_esc(f)}</code></th><td>{_esc(d)}</td></tr>" for f, d in files)
    return f'<h2 id="files">Files in this folder</h2><div class="scroll"><table class="data kv">{rows}</table></div>'


# ---- the page --------------------------------------------------------------------------------

def render_html(report, out_dir=None, plots: dict[str, bytes] | None = None) -> str:
    """The page as text. Plots are drawn here (and written to OUT_DIR/plots/) unless given."""
    plot_note = ""
    if plots is None:
        from normdiff.reports import plots as plotting

        if plotting.available():
            try:
                plots = plotting.report_plots(report, out_dir)
            except Exception as exc:  # a plot must never cost the report
                plots, plot_note = {}, f"Plots could not be drawn: {type(exc).__name__}: {exc}"
        else:
            plots, plot_note = {}, ("Plots are left out: matplotlib is not installed "
                                    "(pip install 'normdiff[plot]').")
    meta = report.meta
    summary = report.summary
    ok = meta.get("exit_code") == 0
    failing = meta.get("failing") or []
    banner = ("Every non-mutant implementation agrees with the reference." if ok else
              "Some implementation disagrees with the reference: " + ", ".join(failing))
    sections = "".join([
        _section_run(report), _section_implementations(report, summary), _section_baseline(report),
        _section_errors(report, plots, plot_note),
        _section_agreement(report, plots, plot_note), _section_worst(report, summary), _section_failing(report),
        _section_known(report), _section_mutants(report), _section_budgets(report), _section_files(report),
    ])
    nav = "".join(f'<a href="#{a}">{t}</a>' for a, t in (
        ("run", "Run"), ("implementations", "Implementations"), ("baseline", "Changes"),
        ("errors", "Error by regime"), ("agreement", "Agreement"), ("worst", "Worst cases"),
        ("failing", "Failing rows"), ("known", "Known findings"), ("mutants", "Mutants"), ("budgets", "Budgets"),
        ("files", "Files")) if f'id="{a}"' in sections)  # only the sections this page has
    body = (f"<h1>normdiff report: suite <code>{_esc(meta.get('suite', '?'))}</code></h1>"
            f'<p class="muted">{_esc(meta.get("cases", "?"))} cases x {_esc(meta.get("implementations", "?"))} '
            f"implementations; exit status {_esc(meta.get('exit_code', '?'))}</p>"
            f'<div class="banner {"ok" if ok else "fail"}">{_esc(banner)}</div><nav>{nav}</nav>{sections}')
    title = f"normdiff report: {meta.get('suite', '')}"
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>{_esc(title)}</title>"
            f"<style>{CSS}</style></head><body><main>{body}</main></body></html>\n")
