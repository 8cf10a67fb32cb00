"""The backward budgets (harness/data/budgets.py, `gradient_budget`) in both directions: every dw
reduction order a correct kernel uses lands inside them at many rows and wide spans, a gradient
without its weight far outside; and their shape (what each part grows with)."""
import numpy as np
import pytest

from normdiff.cases.model import Case
from normdiff.harness.data.budgets import gradient_budget
from normdiff.harness.data.dtypes import get_format
from normdiff.harness.engine import judge
from normdiff.harness.engine.runner import prepare
from normdiff.implementations import numpy_backward as nb


def test_the_budget_grows_with_the_span_and_for_dw_with_the_rows():
    assert gradient_budget("float32", "rms_norm", "dx", 4096) > gradient_budget("float32", "rms_norm", "dx", 128)
    assert gradient_budget("float32", "rms_norm", "dw", 128, 4096) > gradient_budget("float32", "rms_norm", "dw", 128, 8)
    # in bf16 the dtype's roundings dominate: a few ULPs at the terms' scale
    assert 3 <= gradient_budget("bfloat16", "rms_norm", "dx", 128) < 3.1
    assert gradient_budget("bfloat16", "qk_norm_rope", "dx", 128) > gradient_budget("bfloat16", "qk_norm", "dx", 128)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("shape, dy", [("1024x128", "aligned"), ("4x16384", "normal"), ("64x4096", "aligned")])
def test_every_correct_dw_order_is_within_the_budget(dtype, shape, dy):
    case = Case.of("rms_norm", "qwen3", dtype, shape, "outliers" if "16384" in shape else "normal",
                   weight="trained", dy=dy)
    p = prepare(case)
    fmt = get_format(dtype)
    for order in nb.DW_ORDERS:
        grads = nb.backward("rms_norm", case.contract, p.inputs, p.dy, dw_order=order)
        for name, e in p.expected.items():
            m = judge.judge(grads[name], e.ref, fmt, e.budget, operand=name)
            assert m.outcome in ("identical", "agree"), (order, name, m.max_ulp, e.budget)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_a_gradient_without_its_weight_is_far_outside(dtype):
    case = Case.of("rms_norm", "qwen3", dtype, "8x1024", weight="trained", dy="normal")
    p = prepare(case)
    grads = nb.backward("rms_norm", case.contract, p.inputs, p.dy, bug="bwd-weight-missing")
    e = p.expected["x"]
    m = judge.judge(grads["x"], e.ref, get_format(dtype), e.budget, operand="x")
    assert m.outcome == "disagree" and m.max_ulp > 10 * e.budget
    assert np.isfinite(m.cosine)
