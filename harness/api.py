"""The Python API: run a suite and get a Report back; or run a small HF model with your norm in
every site (normdiff model).

    from normdiff.harness import api
    report = api.run_suite("default", api.select(["numpy", "torch"]))
    report.results      # the long table: one row per case x implementation
    run = api.run_model("qwen3", norm="my_norm.py:RMSNorm")
    run.agrees, run.first_diverging, run.logits.top1_agreement

Importing it loads no pandas and no framework; the engine (harness/engine/) runs the cases and the
report layer (reports/) is imported on a thread of this layer's own while the engine runs (the engine
is handed nothing that imports a layer above it).
"""
from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING

from normdiff.cases import suites
from normdiff.harness.data import inputs
from normdiff.harness.data.errors import UsageError
from normdiff.harness.data.names import canonical, resolve
from normdiff.harness.engine import api as engine
from normdiff.implementations import registry
from normdiff.implementations.entry import Implementation
from normdiff.interrupts import Interrupted

if TYPE_CHECKING:  # the report layer (pandas) is imported only once the workers are computing
    from normdiff.reports.report import Report


def select(names: list[str] | None = None, full: bool = False) -> list[Implementation]:
    """Registered implementations: those named (read as the CLI's -i reads them: 'NumPy' is numpy;
    unknown names raise UsageError with the nearest), or every one of the default tier, and with
    `full` the runtimes of the "full" tier too (entry.py `tier`)."""
    if names is not None and (isinstance(names, (str, bytes)) or not isinstance(names, (list, tuple)) or
                              not all(isinstance(n, str) for n in names)):
        raise UsageError(f"select takes a list of implementation names, e.g. select(['numpy', 'torch']); got {names!r}")
    inputs.flag(full, "full")
    if not names:
        return [i for i in registry.implementations() if full or i.tier == "default"]
    known = [i.name for i in registry.implementations()]
    chosen = [resolve("implementation", n, known, "normdiff list implementations") for n in names]
    return [registry.get(n) for n in dict.fromkeys(chosen)]


def check_timeout(timeout, what: str = "timeout") -> float:
    """A per-call limit in seconds: a finite positive number of at most a day (a string, 0, NaN,
    inf or 1e10 is refused)."""
    return inputs.seconds(timeout, what)


def check_implementations(implementations) -> list[Implementation]:
    """A non-empty list of distinct Implementation entries, or a UsageError saying how to get one."""
    if isinstance(implementations, (str, Implementation)) or not hasattr(implementations, "__iter__"):
        raise UsageError(f"implementations must be a list of Implementation entries, e.g. select(['numpy']); "
                         f"got {implementations!r}")
    impls = list(implementations)
    if not impls:
        raise UsageError("no implementations to run: give some, e.g. select(['numpy', 'torch']), or None for all")
    names = [i for i in impls if isinstance(i, str)]
    if names:
        raise UsageError(f"implementations are entries, not names: use select({names!r})")
    wrong = [i for i in impls if not isinstance(i, Implementation)]
    if wrong:
        raise UsageError(f"not an Implementation: {wrong[0]!r} ({type(wrong[0]).__name__}); use select([...]) or "
                         "the entries normdiff's helpers return")
    seen = set()
    for impl in impls:
        if impl.name in seen:
            raise UsageError(f"implementation {impl.name!r} is given twice; each runs once")
        seen.add(impl.name)
    return impls


def check_suite(suite) -> suites.Suite:
    """A suite given as its name (as the CLI's --suite reads it: 'Smoke' is smoke), a path to a
    .toml file (a string or a pathlib.Path) or a Suite; loaded and checked (UsageError)."""
    if isinstance(suite, suites.Suite):
        return suite
    if not isinstance(suite, (str, os.PathLike)):
        raise UsageError(f"suite must be a suite name, a path to a .toml file or a Suite; got {suite!r} "
                         f"({type(suite).__name__})")
    text = inputs.path(suite, "suite", "a suite name (normdiff list suites) or a path to a .toml file")
    return suites.load(text if text.endswith(".toml") else canonical(text, suites.available()) or text)


def check_passes(passes) -> str:
    """Which pass a run judges: "forward", "backward" or "both"."""
    if not isinstance(passes, str) or passes not in suites.PASS_CHOICES:
        raise UsageError(f"passes must be one of {', '.join(map(repr, suites.PASS_CHOICES))}; got {passes!r}")
    return passes


def check_progress(progress):
    """None, or a function normdiff calls as progress(finished, total) while a run goes on."""
    if progress is not None and not callable(progress):
        raise UsageError(f"progress must be None or a function, called as progress(finished, total); got "
                         f"{progress!r} ({type(progress).__name__})")
    return progress


def check_dask(dask):
    """None (run here), "local" (a LocalCluster here) or a Dask scheduler's address."""
    if dask is not None and (not isinstance(dask, str) or not dask.strip()):
        raise UsageError(f"dask must be None, 'local' or a scheduler address such as 'tcp://HOST:8786'; got {dask!r}")
    return dask


def run_suite(suite: str | os.PathLike | suites.Suite = "default", implementations: list[Implementation] | None = None,
              timeout: float = 60.0, progress=None, keep_outputs: bool | str = False,
              keep_calling: bool = False, passes: str = "both", dask: str | None = None,
              diagnose: bool = True) -> Report:
    """Run `suite` (a name, a path to a .toml file, or a Suite) over `implementations` (default:
    every registered one). keep_outputs: True keeps
    every output array in report.outputs, "worst" only those the report's side-by-sides show and a
    user implementation's failing ones. `diagnose`: each disagreeing row of a user implementation
    that disagrees says which bug it looks like, as check does (results `diagnosis`; from the
    outputs kept, so not with keep_outputs False).
    After a call times out, that implementation's other calls are not made unless `keep_calling`.
    `passes`: "forward", "backward" or "both" (the suite's cases of that pass).
    `progress`: None, or a function called as progress(finished, total).
    `dask`: shard the run over the Dask cluster at this address ("local": a LocalCluster here;
    docs/dask.md); the same report.
    Every argument is checked before any work (UsageError: the argument, what it got, what it
    takes). Runs in several threads at once are independent (docs/faults.md). Stopped by Ctrl-C or
    SIGTERM/SIGHUP, it raises normdiff.interrupts.Interrupted whose `partial` is the Report of what
    had finished (or None)."""
    timeout = check_timeout(timeout)
    if not (isinstance(keep_outputs, bool) or keep_outputs == "worst"):
        raise UsageError(f"keep_outputs must be True, False or 'worst'; got {keep_outputs!r}")
    inputs.flag(keep_calling, "keep_calling")
    inputs.flag(diagnose, "diagnose")
    check_progress(progress)
    check_dask(dask)
    passes = check_passes(passes)
    suite = check_suite(suite)
    if not len(suite):
        raise UsageError(f"suite {suite.name!r} has no cases: give it at least one group")
    suite = suites.for_pass(suite, passes)
    if not len(suite):
        raise UsageError(f"suite {suite.name!r} has no cases: give it at least one group")
    impls = check_implementations(implementations) if implementations is not None else select()
    # The report layer's import (pandas, the views, the renderers) overlaps the run: the engine starts
    # its workers and they compute while this thread imports. Joined before the report is built, so
    # no thread is left behind (a forked child of the report's renderers needs this one alone).
    reports = threading.Thread(target=_import_reports, name="normdiff-import-reports", daemon=True)
    reports.start()
    try:
        try:
            tables = engine.run(suite, impls, timeout=timeout, progress=progress, keep_outputs=keep_outputs,
                                keep_calling=keep_calling, dask=dask)
        finally:
            reports.join()
    except Interrupted as stop:
        stop.partial = _report(stop.partial) if stop.partial is not None else None
        raise
    return _report(tables, diagnose)


def _report(tables, diagnose: bool = False) -> Report:
    from normdiff.reports.report import Report

    results = tables.results
    if diagnose and tables.outputs:
        from normdiff.harness.analysis import answer

        results = answer.diagnosed(results, tables.outputs)
    return Report(results, tables.pairs, tables.meta, tables.outputs, cases=tables.cases)


def _import_reports() -> None:
    """Import the report layer ahead of need, on its own thread (run_suite). Only a head start: if
    the import fails, _report imports it again on the caller's thread and raises there."""
    try:
        import normdiff.reports.report  # noqa: F401  (the views and renderers' modules)
    except Exception:  # noqa: BLE001
        pass


def run_model(family: str, dtype: str = "bfloat16", seed: int = 0, tokens: int = 128, timeout: float = 600.0,
              quant_convention: str | None = None, **targets: str):
    """`normdiff model` from Python: `targets` by kind (norm=, qk=, gated=, l2=, add=, rope=, quant=,
    add_quant=), each a registered implementation's name or FILE.py:NAME / package.module:NAME;
    `quant_convention` that of the quantizing sites (--quant-convention). Returns the judged run
    (harness/engine/model_run.ModelRun); a usage error raises UsageError before any model runs."""
    from normdiff.harness.commands import model
    from normdiff.harness.data.conventions import CONVENTIONS
    from normdiff.harness.data.dtypes import FORMATS, _ALIASES
    from normdiff.implementations.hf_model_families import FAMILIES

    unknown = sorted(set(targets) - set(model.OPTIONS))
    if unknown:
        raise UsageError(f"run_model: no kind {', '.join(map(repr, unknown))}; the kinds: {', '.join(model.OPTIONS)}")
    family = resolve("family", family, FAMILIES, what="family")
    dtype = resolve("dtype", dtype, [*FORMATS, *_ALIASES], what="dtype")
    inputs.seed(seed)
    inputs.whole(tokens, "tokens", 1, 256)
    check_timeout(timeout)
    for kind, target in targets.items():
        inputs.path(target, kind, "a registered implementation's name or a target 'FILE.py:NAME'")
    if quant_convention is not None:
        quant_convention = resolve("convention", quant_convention, CONVENTIONS, what="quant_convention")
    return model.model(family, {kind: (os.fspath(target), False) for kind, target in targets.items()}, dtype, seed,
                       tokens, timeout, quant_convention=quant_convention)
