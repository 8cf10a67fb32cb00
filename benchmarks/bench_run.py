"""How long `normdiff run --suite default` takes compared with importing the frameworks it uses.

Measured in one run, each figure the median of --repeat fresh processes:
  import     one fresh process importing every framework the default run loads: torch, jax,
             flax.nnx, transformers' Qwen3 modeling module (the first modeling module pays for
             transformers' modeling_utils; the other families' modules add ~50 ms), and the runtimes
             of the default tier, mlx.core and onnxruntime (those installed). Each alone is printed too.
  first run  normdiff run with an empty JAX compilation cache (what a fresh machine pays)
  repeat     normdiff run again, with the cache the first run left
The machine's speed drifts by 15-30 % over minutes, so each round measures the import, a first run
and a repeat run back to back, and the ratios are also given as the median of the rounds' own ratios.

Targets (issue 2): repeat / import <= 2, first run / import <= 4.
Usage: python benchmarks/bench_run.py [--suite default] [--repeat 3]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time


FRAMEWORKS = ("torch", "jax", "flax.nnx", "transformers.models.qwen3.modeling_qwen3")
RUNTIMES = ("mlx.core", "onnxruntime")  # the default tier's; the full tier's are not in the default run


def installed(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module.split(".")[0]) is not None


def wall(cmd: list[str], env: dict | None = None) -> float:
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if proc.returncode not in (0, 1):
        sys.exit(f"command failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr}")
    return elapsed


def median(cmd, repeat, env=None, before=None) -> float:
    times = []
    for _ in range(repeat):
        if before:
            before()
        times.append(wall(cmd, env))
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--suite", default="default")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    py = sys.executable
    startup = median([py, "-c", "pass"], args.repeat)
    modules = FRAMEWORKS + tuple(m for m in RUNTIMES if installed(m))
    imports = {m: median([py, "-c", f"import {m}"], args.repeat) for m in modules}
    rounds = []  # (import, first run, repeat run), measured back to back
    with tempfile.TemporaryDirectory() as tmp:
        cache = os.path.join(tmp, "jax-cache")
        env = dict(os.environ, NORMDIFF_JAX_CACHE=cache)
        run = [py, "-m", "normdiff.harness.commands.cli", "run", "--suite", args.suite, "--out", os.path.join(tmp, "r"), "-q"]
        for _ in range(args.repeat):
            import_total = wall([py, "-c", "import " + ", ".join(modules)])
            subprocess.run(["rm", "-rf", cache], check=True)
            rounds.append((import_total, wall(run, env), wall(run, env)))
    import_total, first, repeat = (statistics.median(r[i] for r in rounds) for i in range(3))
    first_ratio = statistics.median(r[1] / r[0] for r in rounds)
    repeat_ratio = statistics.median(r[2] / r[0] for r in rounds)
    print(f"python startup                                {startup:6.2f} s")
    for m, t in imports.items():
        print(f"import {m:<42} {t:6.2f} s")
    print(f"all of them in one process                    {import_total:6.2f} s")
    print(f"first run (empty JAX compile cache)           {first:6.2f} s   ratio {first / import_total:4.2f}  "
          f"(median of the rounds' ratios {first_ratio:4.2f}; target <= 4)")
    print(f"repeat run                                    {repeat:6.2f} s   ratio {repeat / import_total:4.2f}  "
          f"(median of the rounds' ratios {repeat_ratio:4.2f}; target <= 2)")
    if args.repeat > 1:
        print("rounds (import, first, repeat): " + "; ".join(f"{a:.2f}, {b:.2f}, {c:.2f}" for a, b, c in rounds))


if __name__ == "__main__":
    main()
