"""How long `normdiff model` takes compared with importing what its worker needs (torch and
transformers' Qwen3 modeling module), measured in one run, each figure the median of --repeat
fresh processes:
  import        one process importing torch and transformers.models.qwen3.modeling_qwen3
  one model     normdiff model --family qwen3 --norm numpy (two forwards and every site judged)
  mutants       normdiff model --mutants (every forward mutant, three dtypes, one worker)
No target is set; the ratios say what a run costs beyond the imports.
Usage: python benchmarks/bench_model.py [--repeat 3]
"""
from __future__ import annotations

import argparse
import sys

from bench_run import median


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    py = sys.executable
    floor = median([py, "-c", "import torch, transformers.models.qwen3.modeling_qwen3"], args.repeat)
    cli = [py, "-m", "normdiff.harness.commands.cli", "model"]
    one = median(cli + ["--family", "qwen3", "--norm", "numpy"], args.repeat)
    table = median(cli + ["--mutants"], args.repeat)
    print(f"import torch + transformers (qwen3)   {floor:6.2f} s")
    print(f"one model (qwen3, --norm numpy)       {one:6.2f} s   ratio {one / floor:5.2f}")
    print(f"the teaching table (--mutants)        {table:6.2f} s   ratio {table / floor:5.2f}")


if __name__ == "__main__":
    main()
