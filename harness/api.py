"""The Python API: run a suite and get a Report back.

    from normdiff.harness import api
    report = api.run_suite("default", api.select(["numpy", "torch"]))
    report.results      # the long table: one row per case x implementation

Importing it loads no pandas and no framework; the engine (harness/engine/) runs the cases and the
report layer (reports/) is imported while the workers compute.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from normdiff.cases import suites
from normdiff.harness.engine import api as engine
from normdiff.implementations import registry
from normdiff.implementations.entry import Implementation

if TYPE_CHECKING:  # the report layer (pandas) is imported only once the workers are computing
    from normdiff.reports.report import Report


def select(names: list[str] | None = None) -> list[Implementation]:
    """Registered implementations, all of them or those named (unknown names raise UsageError)."""
    if not names:
        return registry.implementations()
    return [registry.get(n) for n in names]


def run_suite(suite: str | suites.Suite = "default", implementations: list[Implementation] | None = None,
              timeout: float = 60.0, progress=None, keep_outputs: bool | str = False) -> Report:
    """Run `suite` over `implementations` (default: every registered one). keep_outputs: True keeps
    every output array in report.outputs, "worst" only those the report's side-by-sides show."""
    suite = suites.load(suite) if isinstance(suite, str) else suite
    impls = implementations if implementations is not None else select()
    tables = engine.run(suite, impls, timeout=timeout, progress=progress, keep_outputs=keep_outputs,
                        meanwhile=_import_reports)
    from normdiff.reports.report import Report

    return Report(tables.results, tables.pairs, tables.meta, tables.outputs, cases=tables.cases)


def _import_reports() -> None:
    import normdiff.reports.report  # noqa: F401  (the views and renderers' modules)
