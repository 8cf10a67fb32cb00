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
from normdiff.harness.engine import campaign, provenance, runner, verdict
from normdiff.harness.engine.columns import C
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
    return _tables(suite, implementations, data, keep_outputs, timeout)


def _tables(suite: Suite, implementations: list[Implementation], data: runner.RunData,
            keep_outputs: bool | str, timeout: float | None = None) -> RunTables:
    """The run's tables. `timeout`: the limit for the calls of a known finding's library that its
    evidence needs (`exemplar_rows`); None (a stopped run) makes none."""
    from normdiff.harness.engine import tables

    results, stale = verdict.annotate(tables.results_frame(data.outcomes))
    exemplars = exemplar_rows(suite, results, timeout) if timeout is not None else None
    if exemplars is not None:  # what failed may show a finding of a library that did not run here
        results, stale = verdict.annotate(results.drop(columns=[C.known_finding]), exemplars=exemplars)
    failing = verdict.failing_implementations(results)
    meta = {"suite": suite.name, "suite_path": str(suite.path) if suite.path else None,
            "cases": len(suite), "implementations": len(implementations), "seconds": data.seconds,
            "exit_code": 1 if failing else 0, "failing": failing, "stale_findings": stale,
            **({"takes": dict(data.takes)} if getattr(data, "takes", None) else {}),
            **({"calls": {"made": data.calls, "shared": data.shared}}
               if any(i.shares_calls for i in implementations) else {}),
            "replay": tables.replays(implementations), "budgets": budget_table(), "versions": provenance.versions(),
            "git_revision": provenance.git_revision()}
    outputs = tables.keep_outputs(data.outcomes, results, keep_outputs)
    return RunTables(results, tables.pairs_frame(data.outcomes, data.pairs), meta, outputs, suite.cases)


def exemplar_rows(suite: Suite, results, timeout: float):
    """Rows of the libraries known findings were seen in, on the cases where a failing row of their
    framework may show one of them and the library did not run (verdict.wanted_exemplars): the
    evidence that a user's function wrapping F.layer_norm gives F.layer_norm's numbers. None when
    none is wanted or none can run here (a run where nothing fails asks for none). Made quietly,
    with the run's timeout; they are evidence, never rows of the report."""
    from normdiff.harness.data.findings import KNOWN
    from normdiff.harness.engine import tables
    from normdiff.implementations import registry

    libraries = {f.seen_in: registry.find(f.seen_in) for f in KNOWN}
    wanted = verdict.wanted_exemplars(results, {n: i.framework for n, i in libraries.items() if i is not None})
    frames = []
    for name, case_ids in sorted(wanted.items()):
        impl = registry.find(name)
        if impl is None or impl.unavailable_reason():
            continue
        cases = tuple(c for c in suite.cases if c.id in case_ids and impl.runs(c))
        if cases:
            data = runner.run(Suite(f"{suite.name}[evidence]", "", cases, suite.path), [impl], timeout=timeout)
            frames.append(tables.results_frame(data.outcomes))
    if not frames:
        return None
    import pandas as pd

    return pd.concat(frames, ignore_index=True)


def _import_tables() -> None:
    import normdiff.harness.engine.tables  # noqa: F401  (pandas)
