"""A persistent evaluation session: the workers of some implementations, started once, judging
cases a few at a time (what `normdiff fuzz` needs: thousands of one-case evaluations, where `run`
starts its workers once per suite).

    with Session(impls, timeout=10) as session:
        outcomes = session.evaluate([case])          # one Outcome per case x implementation
        bad = session.failures(outcomes)             # those `run` would fail on (mutants: caught)

Each evaluation is the runner's: `runner.prepare` (the inputs and the oracle's reference, cached by
call id, so a case Hypothesis replays while shrinking is not prepared again), `runner.plan` and
`runner.run_task` per implementation (batching rows where the implementation may), judged by
`runner.judge_task`. A worker that crashes or hangs on a call becomes that call's `crashed` /
`timeout` outcome, and pool.Worker starts it afresh on the next call, so the next example runs on a
fresh process; every call is made (no "not run after a hang": a fuzzer's shrinking must see what
each case really does). Workers run concurrently when there are several (one thread each).

Nothing outlives the session: `close()` (or leaving the `with` block, also on KeyboardInterrupt)
kills every worker and removes its temporary folder.
"""
from __future__ import annotations

import shutil
import threading
from collections import OrderedDict, defaultdict
from concurrent.futures import ThreadPoolExecutor

from normdiff.cases.model import Case
from normdiff.harness.engine import judge, runner, verdict
from normdiff.harness.engine.columns import C
from normdiff.harness.engine.pool import Worker
from normdiff.harness.engine.runner import Outcome, Prepared
from normdiff.implementations.entry import Implementation

PREPARED_CACHE = 512  # calls whose prepared reference is kept (a shrink revisits recent ones)


class Session:
    def __init__(self, implementations: list[Implementation], timeout: float = 60.0,
                 load_timeout: float | None = None):
        """`timeout`: seconds one call may take; `load_timeout`: starting a worker and importing an
        implementation (default pool.load_timeout_for(timeout))."""
        self.implementations = list(implementations)
        self.timeout, self.load_timeout = timeout, load_timeout
        self.unavailable: dict[str, str] = {}  # name -> why it cannot run here (not installed)
        self.failed: dict[str, tuple] = {}  # name -> the reply its load gave (error, unavailable, timeout)
        self.hung: dict[str, str] = {}  # filled by runner.run_task; never consulted (keep_calling)
        self.workers: dict[str, Worker] = {}
        self.by_worker: dict[str, list[Implementation]] = defaultdict(list)
        self._prepared: OrderedDict[str, Prepared] = OrderedDict()
        self._tmp_dir = None
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self.started = False

    # ---- lifecycle -------------------------------------------------------------------------------

    def start(self) -> "Session":
        """Start one worker per framework and load every available implementation in it (in
        parallel); one not installed is in `unavailable` with why, one whose loading failed
        (raised, hung, crashed) in `failed` with the reply."""
        if self.started:
            return self
        self.started = True
        self._tmp_dir = runner.run_tmp_dir()
        for impl in self.implementations:
            reason = impl.unavailable_reason()
            if reason:
                self.unavailable[impl.name] = reason
            else:
                self.by_worker[impl.worker].append(impl)
        self.workers = {name: Worker(name, timeout=self.timeout, load_timeout=self.load_timeout, tmp_dir=self._tmp_dir)
                        for name in self.by_worker}
        if len(self.workers) > 1:
            self._pool = ThreadPoolExecutor(max_workers=len(self.workers), thread_name_prefix="normdiff-session")
        self._each_worker(self._load)
        return self

    def _load(self, name: str) -> list:
        for impl in list(self.by_worker[name]):
            reply = self.workers[name].call(("load", impl))
            if reply[0] == "unavailable":  # its module or class is not installed: reported, never run
                with self._lock:
                    self.unavailable[impl.name] = reply[1]
                    self.by_worker[name].remove(impl)
            elif reply[0] != "ok":
                with self._lock:
                    self.failed[impl.name] = reply
        return []

    def close(self) -> None:
        """Kill every worker now and remove the session's temporary folder (idempotent)."""
        for worker in self.workers.values():
            worker.kill()  # first every one (a call waiting on it returns), then each closed
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        for worker in self.workers.values():
            worker.close()
        if self._tmp_dir:
            shutil.rmtree(self._tmp_dir, ignore_errors=True)
            self._tmp_dir = None

    def __enter__(self) -> "Session":
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- evaluating ------------------------------------------------------------------------------

    def prepare(self, cases: list[Case]) -> list[Prepared]:
        """One Prepared per call of `cases`, each judging every output of its call (a fused add's
        y and residual_out, a backward call's gradients), cached by call id."""
        out = []
        for case in dict((c.call_id, c) for c in cases).values():
            p = self._prepared.get(case.call_id)
            if p is None:
                p = runner.prepare(case)
                self._prepared[case.call_id] = p
                if len(self._prepared) > PREPARED_CACHE:
                    self._prepared.popitem(last=False)
            else:
                self._prepared.move_to_end(case.call_id)
            out.append(p)
        return out

    def evaluate(self, cases: list[Case]) -> list[Outcome]:
        """Every output of each case's call through every implementation: one Outcome per output x
        implementation (`unsupported` where one does not run it, `unavailable` where it is not
        installed, the load's reply where it could not be loaded)."""
        if not self.started:
            self.start()
        prepared = self.prepare(cases)
        outcomes: list[Outcome] = []
        for impl in self.implementations:
            for p in prepared:
                if not impl.runs(p.case):
                    note = runner.unsupported_note(impl, p.case)
                    outcomes += [Outcome(e.case, impl, judge.failure("unsupported", note)) for e in p.expected.values()]
                elif impl.name in self.unavailable:
                    outcomes += [Outcome(e.case, impl, judge.failure("unavailable", self.unavailable[impl.name]))
                                 for e in p.expected.values()]
        outcomes += self._each_worker(lambda name: self._run(name, prepared))
        return outcomes

    def _run(self, name: str, prepared: list[Prepared]) -> list[Outcome]:
        worker, out = self.workers[name], []
        for impl in self.by_worker[name]:
            for task in runner.plan(prepared, impl):
                out += runner.run_task(worker, task, self.failed, self.hung, True)
        return out

    def _each_worker(self, job) -> list:
        """`job(worker name)` for every worker, concurrently when there are several; their lists joined."""
        names = list(self.workers)
        if self._pool is None:
            return [o for name in names for o in job(name)]
        futures = [self._pool.submit(job, name) for name in names]
        try:
            return [o for f in futures for o in f.result()]
        except BaseException:  # Ctrl-C while they compute: end them now, the caller closes the session
            for worker in self.workers.values():
                worker.kill()
            raise

    # ---- what fails ------------------------------------------------------------------------------

    def failures(self, outcomes: list[Outcome]) -> list[Outcome]:
        """The outcomes a fuzzer searches for (engine/verdict.py, SEARCHED): those `run` would count
        as failures, and a mutant's disagree or nan_mismatch (the mutant caught, as the kill matrix
        counts it). A known finding excuses an outcome by the same rule as in a run: the evidence is
        the outcomes given (its library's among them, when it is one of the session's)."""
        candidates = [o for o in outcomes
                      if verdict.row_verdict(o.measurement.outcome, o.impl.expected_to_fail) in verdict.SEARCHED]
        if not candidates or all(o.impl.expected_to_fail for o in candidates):
            return candidates
        known = known_findings(outcomes)
        return [o for o in candidates if verdict.row_verdict(o.measurement.outcome, o.impl.expected_to_fail,
                                                             known.get((o.case.id, o.impl.name), "")) in verdict.SEARCHED]


def known_findings(outcomes: list[Outcome]) -> dict[tuple[str, str], str]:
    """(case id, implementation) -> the known finding its outcome shows ("" for none), judged as a
    run's table is (verdict.annotate), with these outcomes as the evidence."""
    from normdiff.harness.engine import tables  # pandas: only once some outcome may be excused

    frame, _ = verdict.annotate(tables.results_frame(outcomes))
    return dict(zip(zip(frame[C.case_id], frame[C.implementation]), frame[C.known_finding]))
