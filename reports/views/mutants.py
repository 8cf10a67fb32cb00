"""The kill matrix: which cases catch which mutant, and how plausible each mutant looks.

A mutant is *caught* (killed) by a case when that row's verdict is `caught` (engine/verdict.py: a
`disagree` or `nan_mismatch`). Derived from the results table alone.
"""
from __future__ import annotations

import pandas as pd

from normdiff.harness.data.outcomes import DISAGREEING
from normdiff.harness.engine import verdict
from normdiff.harness.engine.columns import C
from normdiff.reports import markup
from normdiff.reports.view import View

KILLS = DISAGREEING
TYPICAL = "normal"


def mutant_rows(results: pd.DataFrame, columns: tuple[str, ...] | None = None) -> pd.DataFrame:
    """The mutants' rows that ran, with `killed`; only `columns` (those a caller reads: the table
    has some forty, and every filter copies them all) when given."""
    if columns is not None:
        results = results[[c for c in (C.kind, C.outcome) + columns if c in results]]
    said = verdict.row_verdicts(results)
    ran = [v in (verdict.CAUGHT, verdict.MISSED) for v in said]
    rows = results[ran]
    return rows.assign(killed=[v == verdict.CAUGHT for v, r in zip(said, ran) if r])


def kill_matrix(results: pd.DataFrame) -> pd.DataFrame:
    """Cases x mutants: the outcome of each mutant on each case it ran (empty where it did not)."""
    rows = mutant_rows(results, (C.case_id, C.implementation))
    if rows.empty:
        return pd.DataFrame()
    return rows.pivot(index=C.case_id, columns=C.implementation, values=C.outcome).astype("object").fillna("")


def kill_summary(results: pd.DataFrame) -> pd.DataFrame:
    """One row per mutant: how many cases catch it, in which regimes it hides, its error on typical
    inputs against its error where it is exposed, and how plausible it looks on typical inputs."""
    rows = mutant_rows(results, (C.implementation, C.pass_, C.op, C.convention, C.regime, C.case_id, C.rel_l2,
                                 C.cosine, C.rms_ratio, C.nan_count, C.assert_close))
    out = []
    for name, group in rows.groupby(C.implementation, sort=True):
        by_regime = group.groupby(C.regime)["killed"].any()
        typical = group[group[C.regime] == TYPICAL]
        kills = group[group["killed"]]
        worst = kills.sort_values(C.rel_l2, ascending=False).head(1)
        out.append({
            "mutant": name, "pass": group[C.pass_].iloc[0] if C.pass_ in group else "forward",
            "op": group[C.op].iloc[0], "convention": group[C.convention].iloc[0],
            "cases": len(group), "caught_by": int(group["killed"].sum()), "caught": bool(group["killed"].any()),
            "exposing_regimes": ", ".join(sorted(by_regime[by_regime].index)),
            "invisible_regimes": ", ".join(sorted(by_regime[~by_regime].index)),
            "typical_rel_l2": float(typical[C.rel_l2].median()) if len(typical) else float("nan"),
            "exposed_rel_l2": float(worst[C.rel_l2].iloc[0]) if len(worst) else float("nan"),
            "exposed_case": worst[C.case_id].iloc[0] if len(worst) else "",
            "typical_cosine": float(typical[C.cosine].min()) if len(typical) else float("nan"),
            "typical_rms_ratio": float(typical[C.rms_ratio].median()) if len(typical) else float("nan"),
            "typical_nan": int(typical[C.nan_count].sum()) if len(typical) else 0,
            "typical_assert_close_passes": (f"{int(typical[C.assert_close].astype(bool).sum())}/{len(typical)}"
                                            if len(typical) else ""),
        })
    return pd.DataFrame(out)


def derive(report) -> dict:
    return {"matrix": kill_matrix(report.results), "summary": kill_summary(report.results)}


def _files(report, data) -> dict[str, str]:
    return {"kill_matrix.csv": data["matrix"].to_csv(), "kill_summary.csv": data["summary"].to_csv(index=False)}


def _markdown(report, data) -> str:
    kills = data["summary"]
    if kills.empty:
        return ""
    return "\n".join(["## Mutants (catalogued bugs; the harness's self-test)", "",
                      "Each must be caught (`disagree` or `nan_mismatch`) by some case; the typical columns show "
                      "how plausible it looks on N(0, 1) inputs.", "",
                      markup.markdown_table(kills[["mutant", "op", "convention", "caught_by", "cases",
                                                   "exposing_regimes", "invisible_regimes", "typical_rel_l2",
                                                   "exposed_rel_l2", "typical_cosine",
                                                   "typical_assert_close_passes"]])])


EXPOSED = "case that exposes it worst, and its replay command"


def _caught_style(value) -> str:
    return markup.VERDICT_STYLE["missed" if str(value).startswith("0 of") else "caught"]


def _html(report, data, page) -> str:
    kills = data["summary"]
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
        EXPOSED: [markup.case_cell(c, m) if c else "" for c, m in zip(kills["exposed_case"], kills["mutant"])]})
    missed = kills[~kills["caught"]]["mutant"].tolist()
    head = (f'<p class="banner fail">Missed (the harness went blind): {markup.esc(", ".join(missed))}</p>'
            if missed else f'<p class="banner ok">Every mutant caught: {len(kills)}/{len(kills)}.</p>')
    return ('<h2 id="mutants">Mutants (the harness\'s self-test)</h2>'
            "<p>Catalogued bugs planted in a correct implementation. Each must be caught (<code>disagree</code> or "
            "<code>nan_mismatch</code>) by some case. The <b>typical</b> columns: how plausible it looks on "
            "N(0, 1) inputs "
            "(relative L2 error, cosine to the reference, whether <code>torch.testing.assert_close</code>'s "
            "defaults pass it); <b>exposed rel_l2</b>: its error on the case that exposes it worst.</p>"
            + head + markup.table(frame, "mutants", styles={"caught by": _caught_style}, html_columns=(EXPOSED,),
                                  classes={"mutant": "nowrap", "op@convention": "nowrap", "caught by": "nowrap",
                                           "exposing regimes": "regimes", "invisible regimes": "regimes",
                                           "typical rel_l2": "nowrap", "exposed rel_l2": "nowrap",
                                           EXPOSED: "casecol"}))


MUTANTS = View("mutants", 90, derive=derive, files=_files, markdown=_markdown, html=_html, nav="Mutants",
               owns=("kill_matrix.csv", "kill_summary.csv"),
              describes=(("kill_matrix.csv, kill_summary.csv", "mutants x cases"),))
