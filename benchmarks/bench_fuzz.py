"""Fuzz throughput: case evaluations per second per implementation (`normdiff fuzz -i NAME` on
small cases: 1-4 rows, width <= 128, the forward pass), for the own NumPy, PyTorch and JAX
implementations, and what bounds it: each part of one example timed on its own.

    hypothesis   Hypothesis drawing one case (normdiff.strategies.cases) and running a no-op body:
                 its per-example engine overhead plus the strategy's draws
    prepare      runner.prepare: the case's inputs, the float64 oracle, the budget, the reference
    round trip   one worker call over the pipe (pickling both ways, the worker's checks), of which
    impl         the implementation's own time in the worker (JAX: compiling each new shape)
    judge        runner.judge_task on the reply
    fuzz         the real loop (fuzz.fuzz for --seconds): evaluations per second, and that against
                 the target of 3,000 per second

The parts are measured on the same cases, drawn once by the fuzz strategy with a fixed seed; the
bound is 1000 / (sum of the parts in ms). Everything runs in one process, one implementation after
the other (timings on a shared 2-core machine move 15-30 % between runs: compare the ratios).
Usage: python benchmarks/bench_fuzz.py [--seconds 15] [--cases 200] [--only numpy,torch,jax]
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time

os.environ.setdefault("NORMDIFF_HYPOTHESIS_CACHE", "")  # no database: every run starts cold

from hypothesis import HealthCheck, Phase, given, seed, settings  # noqa: E402

from normdiff import strategies  # noqa: E402
from normdiff.harness.commands import fuzz  # noqa: E402
from normdiff.harness.engine import runner  # noqa: E402
from normdiff.harness.engine.session import Session  # noqa: E402
from normdiff.implementations import registry  # noqa: E402

TARGET = 3000.0
MAX_ROWS, MAX_WIDTH = 4, 128


def strategy_for(impl):
    passes = ("forward",)
    pairs = fuzz.pairs_for([impl], passes)
    return fuzz.case_strategy([impl], passes, pairs, max_rows=MAX_ROWS, max_width=MAX_WIDTH)


def hypothesis_only(strategy, examples: int, keep: list | None = None) -> float:
    """Seconds per example of Hypothesis drawing a case and running a body that does nothing."""
    count = [0]

    @seed(0)
    @settings(max_examples=examples, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=[HealthCheck.too_slow])
    @given(strategy)
    def body(case):
        count[0] += 1
        if keep is not None:
            keep.append(case)

    home = tempfile.mkdtemp(prefix="bench-fuzz-")
    with fuzz._HypothesisHome(home):
        start = time.perf_counter()
        body()
        return (time.perf_counter() - start) / max(count[0], 1)


def parts(impl, cases: list) -> dict:
    """ms per case of each part, on `cases` (prepared afresh: no cache)."""
    with Session([impl], timeout=60) as session:
        session.evaluate(fuzz.warm_up([impl], ("forward",), fuzz.pairs_for([impl], ("forward",))))
        worker = session.workers[impl.worker]
        start = time.perf_counter()
        prepared = [runner.prepare(c) for c in cases]
        prepare = time.perf_counter() - start
        replies, start = [], time.perf_counter()
        for p in prepared:
            replies.append(worker.call(("call", impl, p.case.op, p.case.contract, p.inputs)))
        trip = time.perf_counter() - start
        own = sum(r[2] for r in replies if r[0] == "ok")
        start = time.perf_counter()
        for p, r in zip(prepared, replies):
            runner.judge_task(runner.Task(impl, [p]), r)
        judged = time.perf_counter() - start
    n = len(cases)
    return {"prepare": 1e3 * prepare / n, "round trip": 1e3 * trip / n, "impl": 1e3 * own / n,
            "judge": 1e3 * judged / n}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=15.0, help="seconds of real fuzzing per implementation")
    parser.add_argument("--cases", type=int, default=200, help="cases the parts are timed on")
    parser.add_argument("--only", default="numpy,torch,jax")
    args = parser.parse_args()
    print(f"small cases: 1-{MAX_ROWS} rows, width <= {MAX_WIDTH}, forward pass; parts in ms per case "
          f"(on {args.cases} cases), fuzz for {args.seconds:g} s; target {TARGET:,.0f} evaluations / s")
    print(f"{'impl':<7} {'hypothesis':>10} {'prepare':>8} {'trip':>7} {'(impl)':>7} {'judge':>7} "
          f"{'bound/s':>8} {'fuzz/s':>8} {'examples/s':>10} {'vs target':>9}")
    simple = strategies.cases(op="rms_norm", convention="qwen3", max_rows=MAX_ROWS, max_width=MAX_WIDTH,
                              layouts=["contiguous"])
    hypothesis_only(simple, 50)  # once, untimed: Hypothesis scans local modules for constants on its first run
    noop = hypothesis_only(simple, 300)
    for name in args.only.split(","):
        impl = registry.get(name)
        cases: list = []
        hypothesis_only(strategy_for(impl), 20)  # untimed: the strategy's first use
        hyp = 1e3 * hypothesis_only(strategy_for(impl), args.cases, cases)
        ms = parts(impl, cases)
        bound = 1e3 / (hyp + ms["prepare"] + ms["round trip"] + ms["judge"])
        result = fuzz.fuzz([impl], passes="forward", max_time=args.seconds, seed=0, max_rows=MAX_ROWS,
                           max_width=MAX_WIDTH, database=False)
        rate = result.per_second
        note = f" (found {result.minimal['case_id']})" if result.found else ""
        print(f"{name:<7} {hyp:>10.2f} {ms['prepare']:>8.2f} {ms['round trip']:>7.2f} {ms['impl']:>7.2f} "
              f"{ms['judge']:>7.2f} {bound:>8.0f} {rate:>8.0f} {result.examples / result.seconds:>10.0f} "
              f"{rate / TARGET:>9.3f}{note}")
    print(f"Hypothesis alone, one rms_norm@qwen3 case per example, a no-op body: {1e3 * noop:.2f} ms per example "
          f"({1 / noop:,.0f} per second at most)")
    print(f"machine load (1, 5, 15 min): {', '.join(f'{v:.1f}' for v in os.getloadavg())} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
