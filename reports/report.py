"""The Report: a run's long tables with everything derived from them.

`results` (one row per case x implementation) and `pairs` (one row per case x pair of
implementations) come from the engine (harness/engine/tables.py); every other view is registered in
reports/views/ and derived on demand, once per report (`view`). The accessors below are the views
code and tests ask for most often.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from normdiff.reports.views import get_view
from normdiff.reports.views import agreement as _agreement

EXACT_SHARE = _agreement.EXACT_SHARE


@dataclass
class Report:
    results: pd.DataFrame
    pairs: pd.DataFrame
    meta: dict
    # (case_id, implementation) -> output array, kept only when asked for (explain, repro)
    outputs: dict = field(default_factory=dict)
    # the comparison with a baseline (reports/baseline.py), when the run was given --baseline
    baseline: object = None
    # the suite's cases, from which the conventions view is derived
    cases: tuple = ()
    # each view's data, derived once; not an init field, so dataclasses.replace starts afresh
    _derived: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def view(self, name: str):
        """The data of view `name` (reports/views/NAME.py), derived once."""
        if name not in self._derived:
            self._derived[name] = get_view(name).derive(self)
        return self._derived[name]

    @property
    def summary(self) -> pd.DataFrame:
        return self.view("summary")

    @property
    def kill_summary(self) -> pd.DataFrame:
        return self.view("mutants")["summary"]

    @property
    def conventions(self) -> pd.DataFrame | None:
        """How the conventions' exact contracts differ on the suite's inputs (views/conventions.py)."""
        return self.view("conventions")

    def agreement(self, value: str = "agree") -> pd.DataFrame:
        return _agreement.agreement_matrix(self.pairs, value)

    def groups(self, value: str = "agree", dtype: str | None = None, share: float = 1.0) -> list[list[str]]:
        """Implementations linked by `value` on `share` of shared cases (of `dtype`, when given)."""
        return _agreement.report_groups(self, value, dtype, share)

    def exact_families(self) -> dict[str, list[list[str]]]:
        """Bit-exact families per dtype (views/agreement.py)."""
        return _agreement.exact_families(self)

    def _repr_html_(self) -> str:
        """How Jupyter shows a Report: the verdict, what failed and how to replay it, one compact
        table (reports/notebook.py)."""
        from normdiff.reports.notebook import report_html

        return report_html(self)
