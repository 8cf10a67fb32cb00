"""The worst error of each implementation per input regime, as a multiple of each row's budget."""
from __future__ import annotations

from normdiff.harness.engine import verdict
from normdiff.harness.engine.columns import C
from normdiff.reports import plots
from normdiff.reports.view import View


def derive(report):
    """regime x implementation (mutants left out): the worst max_ulp / tolerance_ulp, at least
    1e-2 (identical rows would vanish on a log scale); None when nothing was judged."""
    results = report.results
    rows = results[~verdict.expected(results) & results[C.max_ulp].notna() & (results[C.tolerance_ulp] > 0)]
    if rows.empty:
        return None
    share = (rows[C.max_ulp] / rows[C.tolerance_ulp]).clip(lower=1e-2)
    table = (rows.assign(share=share).groupby([C.regime, C.implementation], observed=True)["share"].max()
             .unstack(C.implementation))
    return table.reindex(sorted(table.index, key=lambda r: (r != "normal", r)))


def _html(report, table, page) -> str:
    return '<h2 id="errors">Error by input regime</h2>' + page.figure(
        "regime_errors", plots.regime_errors, table, "worst error per input regime and implementation",
        "The worst error of each implementation (mutants left out) in each input regime, as a multiple of the "
        "ULP budget of its case (max ULP / budget, log scale). Points above the red line are outside the budget.")


ERRORS = View("errors", 40, derive=derive, html=_html, nav="Error by regime")
