"""ULP budgets: how far from the exact contract a correct implementation may land.

Measured in ULPs of the output dtype at the reference value. Every result row records the budget
it was judged with (column `tolerance_ulp`), so a report can always be re-read against it.

Why these numbers (measured with `pytest tests/harness/test_budgets.py -s`, see the README):
- bfloat16 / float16: a one-rounding pipeline lands within 0.5 ulp (+ float32 noise); the Llama
  cast rounds twice (`w * round(xh)`) and the gated norm three times, which measures up to ~1.5 ulp
  at binade edges. 2 ulp accepts those orders and rejects every catalogued formula bug on its
  exposing regime (eps outside at rms 1e-3 is ~1e2 bf16 ulp; 1 + gamma is a 2x rescale).
- float32: the float32 statistics of a width-4096 row and XLA's rsqrt add a few ulp; 16 leaves
  headroom over the worst seen while eps-outside at rms 1e-3 is still ~1e6 ulp away.
"""
from __future__ import annotations

ULP_BUDGETS: dict[str, float] = {
    "float32": 16.0,
    "bfloat16": 2.0,
    "float16": 2.0,
}


def budget_for(dtype: str) -> float:
    try:
        return ULP_BUDGETS[dtype]
    except KeyError:
        raise ValueError(f"no ULP budget for dtype {dtype!r}; known: {', '.join(ULP_BUDGETS)}") from None
