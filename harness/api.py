"""The Python entry points behind the CLI: run a suite and get a Report back."""
from __future__ import annotations

from typing import TYPE_CHECKING

from normdiff.cases import suites
from normdiff.harness import findings, registry, runner
from normdiff.harness.budgets import ULP_BUDGETS
from normdiff.harness.registry import Implementation

if TYPE_CHECKING:  # the report layer (pandas) is imported only once a run has finished
    from normdiff.reports.render import Report


def select(names: list[str] | None = None) -> list[Implementation]:
    """Registered implementations, all of them or those named (unknown names raise)."""
    if not names:
        return registry.implementations()
    return [registry.get(n) for n in names]


def run_suite(suite: str | suites.Suite = "default", implementations: list[Implementation] | None = None,
              timeout: float = 60.0, progress=None, keep_outputs: bool | str = False) -> Report:
    """Run `suite` over `implementations` (default: every registered one). keep_outputs: True keeps
    every output array in report.outputs, "worst" only those the report's side-by-sides show."""
    suite = suites.load(suite) if isinstance(suite, str) else suite
    impls = implementations if implementations is not None else select()
    # pandas (for the report) is imported while the workers compute, not before they start
    data = runner.run(suite, impls, timeout=timeout, progress=progress, meanwhile=_import_reports)
    from normdiff.reports import tables, worst
    from normdiff.reports.render import Report, git_revision, versions

    results, stale = findings.annotate(tables.results_frame(data.outcomes))
    failing = tables.failing_implementations(results)
    meta = {"suite": suite.name, "suite_path": str(suite.path) if suite.path else None,
            "cases": len(suite), "implementations": len(impls), "seconds": data.seconds,
            "exit_code": 1 if failing else 0, "failing": failing, "stale_findings": stale,
            "budgets": dict(ULP_BUDGETS), "versions": versions(), "git_revision": git_revision()}
    outputs = worst.keep_outputs(data.outcomes, results, keep_outputs)
    return Report(results, tables.pairs_frame(data.outcomes), meta, outputs, cases=suite.cases)


def _import_reports() -> None:
    import normdiff.reports.render  # noqa: F401  (pandas)
