"""The own NumPy backward (implementations/numpy_backward.py) of LayerNorm (layer_norm@torch, cohere,
olmo: centring, the variance over n - correction, the bias before or after the weight) and of
Mamba2's grouped gated norm (group_gated_rms_norm@mamba2: x * silu(gate) first, then an RMSNorm per
group, a full-width weight, the Llama cast):

  * exact=True is the oracle's exact VJP (harness/engine/vjp.py) to float64 rounding, for the
    conventions' contracts and for every value of the knobs it implements beyond them (correction,
    bias_order, centre, variance_form; the grouped norm's scope and gate order), in every dw order;
  * exact=False (float32 statistics and sums, the cast points) agrees with the oracle within the
    budgets the harness judges by (runner.prepare, judge.judge; harness/data/budgets.py) on the
    regimes where centring and the groups matter, in float32, bfloat16 and float16;
  * the knobs change the result where they should, and a backward of the wrong knob value is far
    outside the correct one's budget.

test_numpy_backward.py derives elementwise bounds for the square statistics; these ops are judged
here as the harness judges every implementation. Cases have at most 16 rows: the judge's per-channel
bias check (32 rows and more) is left to the budgets' own tests.
"""
from __future__ import annotations

import numpy as np
import pytest

from normdiff.cases.model import Case
from normdiff.harness.data.dtypes import get_format
from normdiff.harness.engine import judge
from normdiff.harness.engine.runner import prepare
from normdiff.harness.engine.vjp import vjp
from normdiff.implementations import numpy_backward as nb

DTYPES = ("float32", "bfloat16", "float16")
DYS = ("normal", "aligned", "sparse")
EXACT_REL = 1e-12  # exact=True against the VJP, relative to the magnitude of the gradient's terms

LN_REGIMES = ("normal", "narrow:1", "mean_shift:3", "tiny_rms", "outliers")
LN_SHAPES = ("16x128", "8x1024")
GROUP_REGIMES = ("normal", "group_scales", "tiny_rms")
GROUP_SHAPES = ("16x4x64", "8x8x64")
# the knob values each op's backward implements beyond its conventions' contracts
LN_KNOBS = ({}, {"correction": 1}, {"bias_order": "before_scale"}, {"centre": False},
            {"variance_form": "one_pass"}, {"correction": 1, "bias_order": "before_scale"})
GROUP_KNOBS = ({}, {"scope": "full"}, {"gate_order": "norm_then_gate"})


def ln_case(dtype="float32", shape="16x128", regime="normal", bias="trained", dy="normal", convention="torch",
            weight="trained") -> Case:
    return Case.of("layer_norm", convention, dtype, shape, regime, weight=weight, bias=bias, dy=dy)


def group_case(dtype="float32", shape="16x4x64", regime="normal", gate="open", dy="normal") -> Case:
    return Case.of("group_gated_rms_norm", "mamba2", dtype, shape, regime, weight="trained", gate=gate, dy=dy)


def _upstream(case: Case) -> np.ndarray:
    x = case.inputs().arrays["x"]
    return np.random.default_rng([case.seed, 11]).standard_normal(x.shape).astype(x.dtype)


# ---- exact=True: the VJP ------------------------------------------------------------------------

def _exact_cases():
    for dtype in ("float32", "bfloat16"):
        for regime in ("normal", "narrow:1", "mean_shift:3", "zero_rows"):
            for conv, weight, bias in (("torch", "trained", "trained"), ("cohere", "trained", "zeros"),
                                       ("olmo", "ones", "zeros")):
                for knobs in LN_KNOBS:
                    yield pytest.param(ln_case(dtype, "8x64", regime, bias, convention=conv, weight=weight), knobs,
                                       id=f"layer_norm@{conv}-{dtype}-{regime}-{knobs}")
        for regime in ("normal", "group_scales", "tiny_rms"):
            for gate in ("open", "closed"):
                for knobs in GROUP_KNOBS:
                    yield pytest.param(group_case(dtype, "8x4x32", regime, gate), knobs,
                                       id=f"group_gated_rms_norm-{dtype}-{regime}-{gate}-{knobs}")


@pytest.mark.parametrize("case, knobs", list(_exact_cases()))
def test_exact_mode_is_the_vjp(case, knobs):
    inputs = case.inputs()
    contract = case.contract.replace(**knobs)
    dy = _upstream(case)
    arrays, dy64 = inputs.as_float64(), dy.astype(np.float64)
    ref = vjp(contract, arrays, dy64, inputs.num_heads)
    scale = vjp(contract, arrays, dy64, inputs.num_heads, absolute=True)
    for order in nb.DW_ORDERS:
        got = nb.backward(case.op, contract, inputs, dy, order, exact=True)
        assert list(got) == list(inputs.arrays)  # every float operand, in the operands' order
        for name, value in got.items():
            assert value.dtype == np.float64 and value.shape == ref[name].shape
            err = np.abs(value - ref[name])
            assert np.all(err <= EXACT_REL * scale[name]), (name, order, float(np.max(err / scale[name])))


# ---- exact=False: within the harness's budgets ---------------------------------------------------

def _budget_cases():
    for dtype in DTYPES:
        for dy in DYS:
            for shape in LN_SHAPES:
                for regime in LN_REGIMES:
                    for bias in ("zeros", "trained"):
                        yield pytest.param(ln_case(dtype, shape, regime, bias, dy),
                                           id=f"ln-{dtype}-{dy}-{shape}-{regime}-b={bias}")
            for shape in GROUP_SHAPES:
                for regime in GROUP_REGIMES:
                    for gate in ("open", "closed"):
                        yield pytest.param(group_case(dtype, shape, regime, gate, dy),
                                           id=f"group-{dtype}-{dy}-{shape}-{regime}-z={gate}")


def _judged(case: Case, grads: dict, p=None) -> dict:
    p = p or prepare(case)
    fmt = get_format(case.dtype)
    return {name: judge.judge(grads[name], e.ref, fmt, e.budget, operand=name) for name, e in p.expected.items()}


@pytest.mark.parametrize("case", list(_budget_cases()))
def test_the_float32_backward_is_within_the_budgets(case):
    p = prepare(case)
    for order in nb.DW_ORDERS:
        grads = nb.backward(case.op, case.contract, p.inputs, p.dy, order)
        x = p.inputs.arrays["x"]
        assert grads["x"].dtype == x.dtype and grads["weight"].dtype == np.float32
        if "bias" in grads:
            assert grads["bias"].dtype == np.float32 and grads["bias"].shape == p.inputs.arrays["bias"].shape
        if "gate" in grads:
            assert grads["gate"].dtype == x.dtype
        for name, m in _judged(case, grads, p).items():
            assert m.outcome in ("identical", "agree"), (order, name, m.outcome, m.max_ulp, m.tolerance_ulp, m.detail)


# ---- the knobs -----------------------------------------------------------------------------------

def _differs(a: np.ndarray, b: np.ndarray) -> bool:
    return not np.array_equal(a, b)


def test_bias_order_moves_dw_and_db_and_not_dx():
    """(u + b) * w: dw sums dy (u + b), db sums dy w; du = dy w either way."""
    case = ln_case("float32", "8x64", bias="trained")
    inputs, dy = case.inputs(), _upstream(case)
    after = nb.backward(case.op, case.contract, inputs, dy)
    before = nb.backward(case.op, case.contract.replace(bias_order="before_scale"), inputs, dy)
    assert np.array_equal(after["x"], before["x"])
    assert _differs(after["weight"], before["weight"]) and _differs(after["bias"], before["bias"])
    w = inputs.arrays["weight"].astype(np.float64)
    expected_db = (dy.astype(np.float64) * w).sum(0)
    assert np.allclose(before["bias"], expected_db, rtol=1e-5, atol=1e-6)
    assert np.allclose(after["bias"], dy.astype(np.float64).sum(0), rtol=1e-5, atol=1e-6)
    zeros = ln_case("float32", "8x64", bias="zeros")  # a zero bias: the same dw either way
    inputs = zeros.inputs()
    a = nb.backward(zeros.op, zeros.contract, inputs, dy)
    b = nb.backward(zeros.op, zeros.contract.replace(bias_order="before_scale"), inputs, dy)
    assert np.array_equal(a["weight"], b["weight"])


def test_correction_scales_the_normalised_value_and_not_db():
    case = ln_case("float32", "8x64")
    inputs, dy = case.inputs(), _upstream(case)
    biased = nb.backward(case.op, case.contract, inputs, dy, exact=True)
    unbiased = nb.backward(case.op, case.contract.replace(correction=1), inputs, dy, exact=True)
    assert np.array_equal(biased["bias"], unbiased["bias"])
    # eps aside, the unbiased variance is n / (n - 1) times the biased one: u and dx shrink by
    # sqrt((n - 1) / n), dw with them
    n = 64
    ratio = np.sqrt((n - 1) / n)
    assert np.allclose(unbiased["weight"], biased["weight"] * ratio, rtol=1e-4)
    assert np.allclose(unbiased["x"], biased["x"] * ratio, rtol=1e-3, atol=1e-6 * np.abs(biased["x"]).max())
    assert _differs(biased["x"], unbiased["x"])


def test_centring_and_the_variance_form_change_what_they_should():
    case = ln_case("float32", "8x64", "mean_shift:3")
    inputs, dy = case.inputs(), _upstream(case)
    right = nb.backward(case.op, case.contract, inputs, dy, exact=True)
    uncentred = nb.backward(case.op, case.contract.replace(centre=False), inputs, dy, exact=True)
    assert np.array_equal(right["bias"], uncentred["bias"])
    assert np.max(np.abs(uncentred["weight"] - right["weight"])) > 0.1 * np.max(np.abs(right["weight"]))
    # the centred dx sums to 0 over each span (g - mean g, and c sums to 0); the uncentred does not
    assert np.allclose(right["x"].sum(-1), 0.0, atol=1e-9)
    assert not np.allclose(uncentred["x"].sum(-1), 0.0, atol=1e-3)
    # one pass: a rounding, so the same exact maths; in float32 at mean 1000 the cancellation shows
    one_pass = nb.backward(case.op, case.contract.replace(variance_form="one_pass"), inputs, dy, exact=True)
    for name in right:
        assert np.allclose(one_pass[name], right[name], rtol=1e-12, atol=1e-12 * np.abs(right[name]).max())
    narrow = ln_case("float32", "16x128", "narrow:0.1")
    inputs, dy = narrow.inputs(), _upstream(narrow)
    two = nb.backward(narrow.op, narrow.contract, inputs, dy)
    one = nb.backward(narrow.op, narrow.contract.replace(variance_form="one_pass"), inputs, dy)
    assert _differs(two["x"], one["x"]) and np.array_equal(two["bias"], one["bias"])


@pytest.mark.parametrize("knobs, case", [
    ({"correction": 1}, ln_case("float32", "16x64")),
    ({"bias_order": "before_scale"}, ln_case("float32", "16x128", bias="trained")),
    ({"centre": False}, ln_case("bfloat16", "16x128", "mean_shift:3")),
    ({"variance_form": "one_pass"}, ln_case("float32", "16x64", "narrow:0.1")),
    ({"scope": "full"}, group_case("bfloat16", "16x4x64", "group_scales")),
    ({"gate_order": "norm_then_gate"}, group_case("bfloat16", "16x4x64")),
])
def test_a_wrong_knob_values_backward_is_far_outside_the_correct_budget(knobs, case):
    p = prepare(case)
    wrong = nb.backward(case.op, case.contract.replace(**knobs), p.inputs, p.dy)
    judged = _judged(case, wrong, p)
    shown = {n: (m.outcome, m.max_ulp, m.tolerance_ulp) for n, m in judged.items()}
    # the one-pass variance at std 0.1 around 1000 goes negative: NaN where the reference is finite
    if not any(m.outcome == "nan_mismatch" for m in judged.values()):
        worst = max(judged.values(), key=lambda m: m.max_ulp / m.tolerance_ulp)
        assert worst.outcome == "disagree" and worst.max_ulp > 10 * worst.tolerance_ulp, shown
    else:
        assert knobs == {"variance_form": "one_pass"}, shown


# ---- what it refuses, and the outputs' keys ------------------------------------------------------

def test_centring_with_another_statistic_is_refused_naming_it():
    case = ln_case("float32", "2x8")
    with pytest.raises(NotImplementedError, match=r"centre=True with statistic='mean_square'"):
        nb.backward(case.op, case.contract.replace(statistic="mean_square"), case.inputs(), _upstream(case))
    with pytest.raises(NotImplementedError, match=r"eps_placement='outside'"):
        nb.backward(case.op, case.contract.replace(eps_placement="outside"), case.inputs(), _upstream(case))
    nb.check_supported(case.contract.replace(centre=False, statistic="mean_square"))  # RMS-like: fine


def test_outputs_keys_dtypes_and_shapes():
    case = ln_case("bfloat16", "4x16")
    out = nb.run_backward(case.op, case.contract, case.inputs(), _upstream(case))
    assert list(out) == ["x", "weight", "bias"]
    assert out["x"].dtype == case.inputs().arrays["x"].dtype
    assert out["weight"].dtype == out["bias"].dtype == np.float32 and out["bias"].shape == (16,)
    grouped = group_case("float16", "4x2x8")
    out = nb.run_backward(grouped.op, grouped.contract, grouped.inputs(), _upstream(grouped))
    assert list(out) == ["x", "gate", "weight"] and out["gate"].dtype == np.float16
    assert out["weight"].shape == (16,)  # the full width: one weight over every group
