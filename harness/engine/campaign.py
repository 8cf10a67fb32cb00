"""Campaigns on a Dask cluster: one run sharded over Dask workers and merged into one RunData.

A shard is some implementations over some of the suite's calls, and runs as one Dask task: a plain
`runner.run` inside the Dask worker, which starts normdiff's own framework worker processes there,
so isolation, time limits and crash handling are those of a local run. Dask only places shards and
brings their outcomes back (no scheduler of ours). An implementation's `resources` (("GPU", 1))
put its shard on workers started with `--resources "GPU=1"`; when no worker offers them, its cases
are `unavailable` with the reason, never left waiting.

Where the framework workers are safe: they ask for PR_SET_PDEATHSIG, which fires when the *thread*
that started them exits. The runner starts them from threads of its own that live until the run
has closed them, never from the Dask task thread, so a Dask worker's thread pool changes nothing;
and when a Dask worker process ends, every thread goes, and its framework workers with it.
What Dask changes around them is undone: its nanny's OMP_NUM_THREADS=1 and the like would reach
them and change results (every shard runs with our values), and a LocalCluster's workers get
sessions of their own, as ours have, so that a Ctrl-C at the terminal reaches normdiff alone.

Dask is imported only here, inside functions: nothing else pays for it.
"""
from __future__ import annotations

import contextlib
import functools
import os
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass

from normdiff import processes
from normdiff.cases.suites import Suite
from normdiff.harness.data.errors import UsageError
from normdiff.harness.engine import judge, pool, runner
from normdiff.implementations.entry import Implementation
from normdiff.interrupts import as_interrupted
from normdiff.text import general

LOCAL = "local"  # --dask local: a LocalCluster on this machine
CONNECT_TIMEOUT = 10.0  # seconds to reach a scheduler, and for it to have a worker
INSTALL = "pip install 'normdiff[dask]'"
SCRATCH_PREFIX = "normdiff-dask-"
# Our LocalCluster's workers run long tasks of ours: Dask's sampling profiler (every 10 ms, in each
# worker) would only cost CPU (measured: a third of an idle worker's).
LOCAL_CONFIG = {"distributed.worker.profile.enabled": False}


@dataclass(frozen=True)
class Shard:
    """One Dask task: these implementations over these cases (whole calls)."""

    suite: Suite
    impls: tuple[Implementation, ...]

    @property
    def resources(self) -> dict:
        """What its worker must offer (the implementations of a shard share one need)."""
        return dict(self.impls[0].resources) if self.impls else {}


@dataclass(frozen=True)
class ShardError:
    """A shard that gave no result: `outcome` ("unavailable": no worker could take it; "crashed": its
    task failed) and why."""

    outcome: str
    reason: str


# ---- the cluster ---------------------------------------------------------------------------------


def _distributed():
    try:
        import distributed
    except ImportError:
        raise UsageError(f"--dask needs Dask's distributed scheduler, which is not installed: {INSTALL}") from None
    return distributed


# One Dask run at a time in a process: a LocalCluster's nannies write their environment into the
# process's os.environ, which each run restores as it found it, and dask.config.set changes the
# process's configuration: two runs in two threads would each restore a mix of both.
_IN_USE = threading.Lock()
IN_USE = ("another run of this process (in another thread) is using Dask: Dask's configuration, and the "
          "environment a LocalCluster's nannies write, are the whole process's; run them one after the other, "
          "or in separate processes")


@contextlib.contextmanager
def connect(address: str, n_workers: int | None = None):
    """A Client of the cluster at `address` ("local": a LocalCluster of `n_workers` processes,
    default one per CPU), closed on the way out, also on Ctrl-C. An address that cannot be reached,
    or a cluster without a worker, is a UsageError that names it, raised before any work; so is a
    second Dask run while one runs in another thread of this process (IN_USE)."""
    if not isinstance(address, str) or not address:
        raise UsageError(f"the Dask address must be 'local' or a scheduler address such as tcp://HOST:8786; "
                         f"got {address!r}")
    if not _IN_USE.acquire(blocking=False):
        raise UsageError(IN_USE)
    try:
        distributed = _distributed()
        with _environment_kept() as restore:
            if address == LOCAL:
                with _local_cluster(distributed, n_workers) as cluster, distributed.Client(cluster) as client:
                    restore()  # its nannies wrote theirs into ours as they started the workers
                    yield client
                return
            client = _remote_client(distributed, address)
            try:
                yield client
            finally:
                client.close()
    finally:
        _IN_USE.release()


def _our_environment() -> dict:
    """Our values (None: unset) of what Dask's nanny puts in the environment before it starts a
    worker process (its config's pre-spawn-environ and environ: OMP_NUM_THREADS=1 and the like, and
    PYTHONHASHSEED). It writes them into its own process's os.environ, which for a LocalCluster is
    ours, and they would reach our framework workers through the Dask worker and change results:
    one thread changes the order of torch's sums (LayerNorm's dw and db in bf16)."""
    import dask

    _distributed()  # its configuration comes with it
    names = {*dask.config.get("distributed.nanny.pre-spawn-environ", {}),
             *dask.config.get("distributed.nanny.environ", {}), "PYTHONHASHSEED"}
    return {name: os.environ.get(name) for name in sorted(names)}


@contextlib.contextmanager
def _environment(values: dict):
    """os.environ with `values` (None: unset) while the block runs, as it was afterwards. Processes
    started meanwhile inherit it (nothing already imported reads it again)."""
    before = {name: os.environ.get(name) for name in values}

    def apply(settings):
        for name, value in settings.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value

    apply(values)
    try:
        yield
    finally:
        apply(before)


@contextlib.contextmanager
def _environment_kept():
    """os.environ as it was once the block ends, and whenever the function it gives is called: a
    LocalCluster's nannies write into ours (OMP_NUM_THREADS=1 and the rest of _our_environment(),
    __DASK_PARENT_PID)."""
    before = dict(os.environ)

    def restore():
        for name in set(os.environ) - set(before):
            del os.environ[name]
        os.environ.update(before)

    try:
        with pool.environment_kept(before):  # a run in another thread starts its workers from it meanwhile
            yield restore
    finally:
        restore()


def _remote_client(distributed, address: str):
    fix = (f"start a scheduler there (`dask scheduler`) and workers (`dask worker {address} --nthreads 1`), "
           "or give --dask local")
    try:
        client = distributed.Client(address, timeout=CONNECT_TIMEOUT)
    except (OSError, ValueError, TimeoutError) as exc:  # unreachable, or not an address at all
        raise UsageError(f"cannot connect to a Dask scheduler at {address} ({exc}): {fix}") from None
    try:
        client.wait_for_workers(1, timeout=CONNECT_TIMEOUT)
    except (OSError, TimeoutError):
        client.close()
        raise UsageError(f"the Dask scheduler at {address} has no worker after {general(CONNECT_TIMEOUT)} s: "
                         f"{fix}") from None
    return client


@contextlib.contextmanager
def _local_cluster(distributed, n_workers: int | None):
    """A LocalCluster whose every file lies in a temporary folder of ours, removed at the end; no
    fixed port: every one, the scheduler's HTTP server's too (it would take 8787 even without a
    dashboard), is chosen by the system, on 127.0.0.1; no memory limit (a local run has none: the
    nanny would otherwise kill a worker holding a large shard's outputs)."""
    import logging

    import dask
    from distributed.gc import disable_gc_diagnosis

    processes.remove_orphaned(tempfile.gettempdir(), SCRATCH_PREFIX)  # those of SIGKILLed runs
    scratch = tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-")
    tracker_was_running = _resource_tracker_pid() is not None
    try:
        with dask.config.set({**LOCAL_CONFIG, "temporary-directory": scratch}), distributed.LocalCluster(
                n_workers=n_workers or os.cpu_count() or 1, threads_per_worker=1, processes=True,
                scheduler_port=0, dashboard_address="127.0.0.1:0", local_directory=scratch, memory_limit=0,
                silence_logs=logging.CRITICAL, preload=[__name__]) as cluster:
            # Its scheduler runs in this process and hooks a callback into the garbage collector:
            # a Ctrl-C whose handler runs inside that callback is swallowed (the collector ignores
            # a callback's exceptions), and the run goes on as if nothing was pressed.
            disable_gc_diagnosis(force=True)
            try:
                yield cluster
            except BaseException:
                _end_workers_now(cluster)
                raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        if not tracker_was_running:
            _stop_resource_tracker()


def dask_setup(worker) -> None:
    """Run in each of our LocalCluster's workers as it starts (a Dask preload of this module): a
    session of its own, as normdiff's own workers have, so that a Ctrl-C at the terminal reaches
    normdiff alone, which ends the cluster; the Dask worker would otherwise die of it, print a
    traceback and lose its shard."""
    with contextlib.suppress(OSError):
        os.setsid()


def _end_workers_now(cluster) -> None:
    """On a stop (Ctrl-C, an error): end the Dask workers at once. A close would give each busy
    one 4 s to finish its shard, whose result is dropped anyway. What runs below them (framework
    workers and whatever those started) is killed first, then each worker closes with half a
    second's grace; marked closing, its nanny does not restart it."""
    import asyncio

    nannies = list(cluster.workers.values())
    ours = set(processes.descendants(os.getpid()))
    for nanny in nannies:
        if nanny.pid in ours:
            processes.kill_tree(nanny.pid, include_self=False)

    async def close_all():
        await asyncio.gather(*(n.close(timeout=0.5, reason="normdiff-stopped") for n in nannies),
                             return_exceptions=True)

    with contextlib.suppress(Exception):
        cluster.sync(close_all)
    processes.remove_orphaned(tempfile.gettempdir(), runner.RUN_TMP_PREFIX)  # their runs' folders


def _resource_tracker_pid():
    from multiprocessing import resource_tracker

    return getattr(resource_tracker._resource_tracker, "_pid", None)


def _stop_resource_tracker() -> None:
    """Starting the Dask workers (multiprocessing's spawn) started multiprocessing's resource tracker
    in this process; it would live on until we exit. Ours to end, since we started it."""
    from multiprocessing import resource_tracker

    stop = getattr(resource_tracker._resource_tracker, "_stop", None)
    if stop is not None and _resource_tracker_pid() is not None:
        stop()


def threads(client) -> int:
    """How many tasks the cluster runs at once."""
    return sum(w["nthreads"] for w in client.scheduler_info(n_workers=-1)["workers"].values()) or 1


# ---- any function over shards --------------------------------------------------------------------


def map_shards(fn, shards: list, address, resources_for=None, on_result=None, meanwhile=None) -> list:
    """fn(shard) for each shard as one Dask task on the cluster at `address` ("local", a scheduler
    address, or a Client from connect(), left open); the results in shard order.

    `resources_for(shard)` -> {"GPU": 1}: what the worker must offer (default: nothing). A shard no
    worker offers it to is not submitted: its result is ShardError("unavailable", why); a task that
    failed (fn raised, or its worker died more often than Dask retries) gives ShardError("crashed").
    `on_result(index, result)` is called on this thread as each arrives, `meanwhile()` once every
    shard is submitted. fn runs with our environment's values of what Dask's nanny sets. Ctrl-C (or normdiff.interrupts.Interrupted) cancels what is left, closes the
    cluster and raises Interrupted whose `partial` is the results list (None for shards not done)."""
    if isinstance(address, str):
        with connect(address) as client:
            return map_shards(fn, shards, client, resources_for, on_result, meanwhile)
    from distributed import as_completed

    client, results, futures = address, [None] * len(shards), {}
    work = functools.partial(_in_environment, fn, _our_environment())
    offers = [w.get("resources") or {} for w in client.scheduler_info(n_workers=-1)["workers"].values()]
    try:
        for index, shard in enumerate(shards):
            need = resources_for(shard) if resources_for else {}
            if need and not any(all(offer.get(k, 0) >= v for k, v in need.items()) for offer in offers):
                _arrived(results, index, ShardError("unavailable", _no_worker_offers(need)), on_result)
            else:
                futures[client.submit(work, shard, resources=need or None, pure=False)] = index
        if meanwhile:
            meanwhile()
        for future in as_completed(futures):
            _arrived(results, futures[future], _result(future), on_result)
    except KeyboardInterrupt as exc:
        stop = as_interrupted(exc)
        client.cancel(list(futures))
        stop.partial = results
        raise stop from None
    return results


def _in_environment(fn, environ: dict, shard):
    """fn(shard) in a Dask worker, with our values of what its nanny set (_our_environment()): the
    processes fn starts there see the environment they would see here."""
    with _environment(environ):
        return fn(shard)


def _arrived(results: list, index: int, result, on_result) -> None:
    results[index] = result
    if on_result:
        on_result(index, result)


def _result(future):
    try:
        return future.result()
    except Exception as exc:  # the task's own error, or Dask's KilledWorker: this shard's, not the run's
        return ShardError("crashed", f"its Dask task failed: {type(exc).__name__}: {exc}")


def _no_worker_offers(need: dict) -> str:
    wanted = ",".join(f"{k}={general(v)}" for k, v in need.items())
    return (f"no Dask worker offers the resources it needs ({wanted}); start one with "
            f"`dask worker SCHEDULER --resources \"{wanted}\"`")


# ---- a run ---------------------------------------------------------------------------------------


def plan_shards(suite: Suite, impls: list[Implementation], slots: int) -> list[Shard]:
    """The shards of a run on a cluster that runs `slots` tasks at once.

    Implementations are grouped by framework worker. With no more slots than frameworks, every
    implementation gets all its calls in one shard (the same row batches and the same calls
    skipped after a hang as a local run, each framework imported once), and with fewer,
    frameworks share `slots` shards of about equal work, so each Dask worker's runner still
    overlaps several frameworks as a local run does. On this project's 2-core machine with --dask
    local this was the plan measured fastest and cheapest in CPU (docs/dask.md): a shard per
    framework keeps one framework process busy per Dask worker at a time, and a shard per slot over
    every implementation imports every framework in every Dask worker.
    With more slots than frameworks, each framework's calls are split over them (whole row
    batches: the same results). Implementations that need resources get a shard per framework:
    how many workers offer those is not the plan's to know."""
    by_need: dict[tuple, dict[str, list[Implementation]]] = {}
    for impl in impls:
        by_need.setdefault(impl.resources, {}).setdefault(impl.worker, []).append(impl)
    shards = []
    for need, groups in by_need.items():
        if need:  # only some workers can take these (how many, the plan does not know): one each
            shards += [Shard(suite, tuple(group)) for group in groups.values()]
        elif len(groups) > slots:
            shards += [Shard(suite, group) for group in _balanced(list(groups.values()), slots, suite)]
        else:
            parts = _split_calls(suite, slots // len(groups))
            shards += [Shard(part, tuple(group)) for group in groups.values() for part in parts]
    return shards


def _balanced(groups: list[list[Implementation]], n: int, suite: Suite) -> list[tuple]:
    """The groups in `n` bins of about equal work (case x implementation pairs they run), largest
    first into the lightest bin."""
    def work(group):
        return sum(impl.supports(c.op, c.convention, c.pass_) for impl in group for c in suite.cases)

    bins: list[list[Implementation]] = [[] for _ in range(n)]
    loads = [0] * n
    for group in sorted(groups, key=work, reverse=True):
        lightest = loads.index(min(loads))
        bins[lightest] += group
        loads[lightest] += work(group)
    return [tuple(b) for b in bins if b]


def _split_calls(suite: Suite, n: int) -> list[Suite]:
    """`suite` as up to `n` suites of whole calls, each in the suite's order. Cases that the runner
    could batch into one call (the same op, convention, contract, dtype and shape per row) stay in
    one part, so every row is computed in the batch it would be in locally."""
    if n <= 1:
        return [suite]
    batches: dict[tuple, list[int]] = {}
    for index, c in enumerate(suite.cases):
        key = (c.op, c.convention, c.contract, c.dtype, c.num_heads, c.width, c.layout)
        batches.setdefault(key, []).append(index)
    parts: list[list[int]] = [[] for _ in range(n)]
    for members in sorted(batches.values(), key=len, reverse=True):  # largest first, into the emptiest
        min(parts, key=len).extend(members)
    return [Suite(suite.name, suite.description, tuple(suite.cases[i] for i in sorted(part)), suite.path)
            for part in parts if part]


def _run_shard(shard: Shard, timeout: float, keep_calling: bool) -> runner.RunData:
    """A shard's run, inside a Dask worker."""
    return runner.run(shard.suite, list(shard.impls), timeout=timeout, keep_calling=keep_calling)


def run_sharded(suite: Suite, impls: list[Implementation], address, timeout: float = 60.0,
                keep_calling: bool = False, progress=None, meanwhile=None, n_workers: int | None = None
                ) -> runner.RunData:
    """runner.run's RunData, computed on the Dask cluster at `address` ("local": a LocalCluster of
    `n_workers` processes) in shards (plan_shards); the outcomes in the suite's order, then the
    implementations'. Stopped, it raises Interrupted whose `partial` holds the shards that finished."""
    start = time.perf_counter()
    work = functools.partial(_run_shard, timeout=timeout, keep_calling=keep_calling)
    with connect(address, n_workers) if isinstance(address, str) else contextlib.nullcontext(address) as client:
        shards = plan_shards(suite, impls, threads(client))
        done = [0]

        def arrived(index, result):
            done[0] += len(shards[index].suite) * len(shards[index].impls)
            if progress:
                progress(done[0], len(suite) * len(impls))

        try:
            results = map_shards(work, shards, client, lambda shard: shard.resources, arrived, meanwhile)
        except KeyboardInterrupt as exc:
            stop = as_interrupted(exc)
            stop.partial = _merge(suite, impls, shards, stop.partial or [], start)
            raise stop from None
    return _merge(suite, impls, shards, results, start)


def _merge(suite: Suite, impls: list[Implementation], shards: list[Shard], results: list, start: float
           ) -> runner.RunData:
    data = runner.RunData(planned=len(suite) * len(impls))
    for shard, result in zip(shards, results):
        if isinstance(result, ShardError):
            data.outcomes += _not_run(shard, result)
        elif result is not None:
            data.outcomes += result.outcomes
            data.calls, data.shared = data.calls + result.calls, data.shared + result.shared
    case_order = {c.id: i for i, c in enumerate(suite.cases)}
    impl_order = {impl.name: i for i, impl in enumerate(impls)}
    data.outcomes.sort(key=lambda o: (case_order[o.case.id], impl_order[o.impl.name]))
    data.seconds = time.perf_counter() - start
    return data


def _not_run(shard: Shard, error: ShardError) -> list[runner.Outcome]:
    """A shard's outcomes when it gave none: the rows a local run would call unsupported, and the
    error on every other."""
    data = runner.RunData()
    runner.unsupported(data, shard.suite, list(shard.impls))  # the runner's own rule for what it runs
    skipped = {(o.case.id, o.impl.name) for o in data.outcomes}
    return data.outcomes + [runner.Outcome(c, impl, judge.failure(error.outcome, error.reason))
                            for impl in shard.impls for c in shard.suite.cases if (c.id, impl.name) not in skipped]
