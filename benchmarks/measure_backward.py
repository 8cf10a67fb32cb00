"""How far the own NumPy backward (implementations/numpy_backward.py) is from the oracle's exact VJP,
for every op@convention x dtype x dw reduction order, over widths 128..16384 and rows 8..4096.

Per op@convention and dtype, the worst over the shapes of:
  dx    ULPs of the input dtype at the scale S of the two terms dx is the difference of
        (r |g| + |x| r^3 c sum|x g|; >= |dx|), the error over the derived elementwise bound, and
        (for reference) ULPs at |exact dx| as judge.ulp_distance counts them, which is unbounded
        where the two terms cancel
  dw    per order: float32 ULPs at |exact dw| and the error over the derived bound (the summary
        also gives the max relative error and the error over sum|terms|, with the bound's)
The bounds and the measuring are tests/implementations/test_numpy_backward.py's (its docstring
derives them); op@conventions whose contracts are equal get the same inputs and one row. A ratio
above 1 would be a bound broken. Usage: python benchmarks/measure_backward.py [--quick]
"""
from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests" / "implementations" / "test_numpy_backward.py"

# (rows, width): every width at 8 rows (the dx reduction alone) and at many rows (the dw
# reduction: 4096 rows at width 128, fewer as the width grows, ~0.5-1 M elements each)
SHAPES = ((8, 128), (4096, 128), (8, 1024), (512, 1024), (8, 4096), (128, 4096), (8, 16384), (64, 16384))
QUICK = ((8, 128), (512, 128), (8, 1024), (64, 1024))
HEAD_DIM = 128


def _load_tests():
    spec = importlib.util.spec_from_file_location("test_numpy_backward", TESTS)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks itself up there
    spec.loader.exec_module(module)
    return module


def _shape_text(t, op: str, rows: int, width: int) -> str:
    return f"{rows}x{max(width // HEAD_DIM, 1)}x{min(width, HEAD_DIM)}" if t.has_heads(op) else f"{rows}x{width}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="widths 128 and 1024, rows up to 512")
    args = parser.parse_args(argv)
    t = _load_tests()
    nb = t.nb
    shapes = QUICK if args.quick else SHAPES
    groups: dict = {}  # (op, contract) -> conventions with that contract
    for op, conv in t.PAIRS:
        groups.setdefault((op, t.CONVENTIONS[conv].contracts[op]), []).append(conv)
    orders = nb.DW_ORDERS
    print(f"shapes (rows x width; heads of {HEAD_DIM}): {', '.join(f'{r}x{w}' for r, w in shapes)}")
    head = f"{'op@conventions':40s} {'dtype':5s} {'dx@S':>6s} {'dx/B':>5s} {'dx@|dx|':>8s}"
    head += "".join(f" | {o[:5] + ' dw ulp':>13s} {'/B':>5s}" for o in orders)
    print(head)
    worst: dict = {}
    start = time.perf_counter()
    for (op, _), convs in groups.items():
        for dtype in t.DTYPES:
            agg: dict = {}
            for rows, width in shapes:
                fig = t.measure(t.make_case(op, convs[0], dtype, _shape_text(t, op, rows, width)), orders)
                for key, value in fig.items():
                    if key != "case":
                        agg[key] = max(agg.get(key, 0.0), value)
            for key, value in agg.items():
                worst.setdefault(dtype, {})[key] = max(worst.get(dtype, {}).get(key, 0.0), value)
            name = f"{op}@{','.join(convs)}"
            line = f"{name:40s} {t.get_format(dtype).short:5s} {agg['dx_ulp_scale']:6.2f} {agg['dx_ratio']:5.2f}"
            line += f" {agg['dx_ulp']:8.3g}"
            for o in orders:
                if f"dw_{o}_ulp" in agg:
                    line += f" | {agg[f'dw_{o}_ulp']:13.3g} {agg[f'dw_{o}_ratio']:5.2f}"
                else:
                    line += f" | {'-':>13s} {'-':>5s}"
            if "dgate_ratio" in agg:
                line += f"   dgate@S {agg['dgate_ulp_scale']:.2f} /B {agg['dgate_ratio']:.2f}"
            print(line, flush=True)
    print(f"\nworst per dtype (over every op@convention and shape; {time.perf_counter() - start:.0f} s):")
    for dtype, agg in worst.items():
        dws = "\n           ".join(
            f"dw {o:10s} {agg[f'dw_{o}_ulp']:9.3g} ulp@|dw|, rel {agg[f'dw_{o}_rel']:8.2g}, "
            f"/sum|T| {agg[f'dw_{o}_rel_sum']:8.2g} (bound {agg[f'dw_{o}_bound_rel_sum']:8.2g}), "
            f"/B {agg[f'dw_{o}_ratio']:.2f}" for o in orders)
        print(f"  {dtype:8s} dx {agg['dx_ulp_scale']:.2f} ulp@S (bound {agg['dx_bound_ulp_scale']:.2f}, "
              f"/B {agg['dx_ratio']:.2f}; {agg['dx_ulp']:.3g} ulp@|dx|)  dgate {agg['dgate_ulp_scale']:.2f} ulp@S "
              f"(/B {agg['dgate_ratio']:.2f})\n           {dws}")
    broken = [d for d, agg in worst.items() if any(v > 1.0 for k, v in agg.items() if k.endswith("_ratio"))]
    if broken:
        print(f"BOUND BROKEN in {', '.join(broken)}")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
