"""How long `normdiff check` takes, cold (a fresh process, as a user runs it), in each framework,
next to what importing that framework alone costs.

Each figure is the median of --repeat fresh processes, measured in one run (timings on a shared
machine move 15-30 % between runs: compare the ratios). Targets (issue 11): a NumPy function's
check starts and finishes in under 1.5 s; the others are measured, not targeted.
Usage: python benchmarks/bench_check.py [--repeat 3] [--only numpy,mlx]
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import time

FIX = "tests/fixtures/user"
CHECKS = {  # name: (target and options, the modules importing the framework costs)
    "numpy": ([f"{FIX}/numpy_norms.py:rms_norm", "--convention", "qwen3"], "numpy"),
    "mlx": (["mlx.core.fast:rms_norm", "--convention", "qwen3"], "mlx.core"),
    "keras": (["keras.ops:rms_normalization", "--convention", "olmo2"], "keras"),
    "torch": ([f"{FIX}/torch_module.py:ScaleRMSNorm", "--convention", "qwen3"], "torch"),
    "jax": (["flax.nnx:RMSNorm", "--convention", "olmo2"], "flax.nnx"),
    "onnxruntime": ([f"{FIX}/onnx_norms.py:rms_norm_weight_in_float", "--convention", "olmo2"], "onnxruntime, onnx"),
    "tinygrad": (["tinygrad.nn:RMSNorm", "--convention", "qwen3"], "tinygrad"),
}
ENV = {**os.environ, "KERAS_BACKEND": os.environ.get("KERAS_BACKEND", "jax")}


def wall(cmd: list[str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=ENV)
    elapsed = time.perf_counter() - start
    if proc.returncode not in (0, 1, 3):
        sys.exit(f"command failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stdout}{proc.stderr}")
    return elapsed


def median(cmd: list[str], repeat: int) -> float:
    return statistics.median(wall(cmd) for _ in range(repeat))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", help="comma-separated frameworks (default: every one installed)")
    args = parser.parse_args()
    py = sys.executable
    chosen = args.only.split(",") if args.only else list(CHECKS)
    print(f"python startup {median([py, '-c', 'pass'], args.repeat):.2f} s; median of {args.repeat} fresh processes")
    from normdiff.harness.commands.check import check_suite

    cases = {conv: len(check_suite("default", "rms_norm", conv)) for conv in ("qwen3", "olmo2")}
    print(f"each check runs the default suite's rms_norm cases ({cases['qwen3']}), every dtype")
    print(f"{'framework':<12} {'import':>7} {'check':>7}  target")
    for name in chosen:
        target, modules = CHECKS[name]
        if importlib.util.find_spec(modules.split(".")[0].split(",")[0]) is None:
            print(f"{name:<12} not installed")
            continue
        imported = median([py, "-c", f"import {modules}"], args.repeat)
        checked = median([py, "-m", "normdiff.harness.commands.cli", "check", *target, "--op", "rms_norm"], args.repeat)
        goal = ("< 1.5 s: " + ("met" if checked < 1.5 else "MISSED")) if name == "numpy" else ""
        print(f"{name:<12} {imported:6.2f}s {checked:6.2f}s  {goal}")


if __name__ == "__main__":
    main()
