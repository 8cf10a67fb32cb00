"""What the backward pass costs: the default run with both passes against the forward-only run.

Measured in one process (the frameworks imported once, a warm JAX compile cache from a first,
discarded round), alternating the two so drift on this machine hits both alike: the median of
--repeat runs of each, through normdiff's Python API with every registered implementation.
Target (issue 13): both / forward <= 1.5.
Usage: python benchmarks/bench_passes.py [--suite default] [--repeat 3]
"""
from __future__ import annotations

import argparse
import statistics
import time

from normdiff.harness import api


def timed(suite: str, passes: str) -> tuple[float, int]:
    start = time.perf_counter()
    report = api.run_suite(suite, passes=passes)
    return time.perf_counter() - start, len(report.results)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--suite", default="default")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    timed(args.suite, "both")  # warm-up: imports, JAX's compile cache for every shape
    times = {"forward": [], "both": []}
    rows = {}
    for _ in range(args.repeat):
        for passes in times:
            seconds, rows[passes] = timed(args.suite, passes)
            times[passes].append(seconds)
    forward, both = (statistics.median(times[p]) for p in ("forward", "both"))
    print(f"forward only   {forward:6.2f} s   ({rows['forward']} rows)")
    print(f"both passes    {both:6.2f} s   ({rows['both']} rows)   ratio {both / forward:4.2f}  (target <= 1.5)")


if __name__ == "__main__":
    main()
