"""The engine's entry point: run a suite over implementations and return the tables.

Importing this module loads no pandas (tested): the tables are built with pandas, which is imported
only once the workers are computing, so the import overlaps their work. The public Python API
(`normdiff.harness.api`) wraps what this returns in a Report (and imports the report layer on a
thread of its own meanwhile: nothing from a layer above is handed in here).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field

from normdiff.cases.suites import Suite
from normdiff.interrupts import Interrupted
from normdiff.harness.data.budgets import budget_table
from normdiff.harness.engine import campaign, provenance, runner
from normdiff.implementations.entry import Implementation


@dataclass
class RunTables:
    results: object  # pandas.DataFrame: one row per case x implementation (engine/tables.py)
    pairs: object  # pandas.DataFrame: one row per case x pair of implementations
    meta: dict
    outputs: dict = field(default_factory=dict)  # (case_id, implementation) -> output, when kept
    cases: tuple = ()


def run(suite: Suite, implementations: list[Implementation], timeout: float = 60.0, progress=None,
        keep_outputs: bool | str = False, keep_calling: bool = False, dask: str | None = None) -> RunTables:
    """Run every case of `suite` through `implementations`. keep_outputs: True keeps every output
    array, "worst" only those a report's side-by-sides show. Stopped by a signal, it raises
    Interrupted whose `partial` is the RunTables of what finished, meta["incomplete"] set.
    `dask`: the address of a Dask cluster ("local": a LocalCluster) to shard the run over
    (campaign.py); the same tables."""
    try:
        run = runner.run if dask is None else functools.partial(campaign.run_sharded, address=dask)
        data = run(suite, implementations, timeout=timeout, progress=progress, meanwhile=_import_tables,
                   keep_calling=keep_calling)
    except Interrupted as stop:
        partial = stop.partial
        stop.partial = None
        if partial is not None and partial.outcomes:
            stop.partial = _tables(suite, implementations, partial, keep_outputs)
            stop.partial.meta["incomplete"] = (f"stopped by {stop.name} after {len(partial.outcomes)} of "
                                               f"{partial.planned} outcomes")
        raise
    return _tables(suite, implementations, data, keep_outputs)


def _tables(suite: Suite, implementations: list[Implementation], data: runner.RunData,
            keep_outputs: bool | str) -> RunTables:
    from normdiff.harness.engine import tables

    targets = {impl.name: dict(impl.params).get("target", "") for impl in implementations if impl.params}
    results, stale = tables.annotate(tables.results_frame(data.outcomes), targets=targets)
    failing = tables.failing_implementations(results)
    meta = {"suite": suite.name, "suite_path": str(suite.path) if suite.path else None,
            "cases": len(suite), "implementations": len(implementations), "seconds": data.seconds,
            "exit_code": 1 if failing else 0, "failing": failing, "stale_findings": stale,
            "replay": tables.replays(implementations), "budgets": budget_table(), "versions": provenance.versions(),
            "git_revision": provenance.git_revision()}
    outputs = tables.keep_outputs(data.outcomes, results, keep_outputs)
    return RunTables(results, tables.pairs_frame(data.outcomes, data.pairs), meta, outputs, suite.cases)


def _import_tables() -> None:
    import normdiff.harness.engine.tables  # noqa: F401  (pandas)
