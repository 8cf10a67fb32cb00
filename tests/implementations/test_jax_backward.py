"""The JAX backward adapters (jax_own.backward: jax.vjp of jax_own's own forward; builtins_jax's
flax nnx.RMSNorm backwards) against the oracle's exact float64 VJP (harness/engine/vjp.py) on the
dtype-cast inputs, for every op@convention in float32, bfloat16 and float16, with dy from the
"normal" and "aligned" gradient regimes; and the keys, shapes and dtypes they return, the padding,
and compiled-program reuse.

How close, and why. Each gradient's error is counted in ULPs of its dtype at A = max(M, S): M the
largest |exact gradient|, S the scale of the terms the gradient is made of, both exact (float64):
  dx     S = max |g / d|, g the upstream gradient at the normalised value (R^T dy for RoPE, times the
         gate's activation, times offset + w) and d the span's denominator: dx = g / d minus the
         projection term, and with dy aligned with y ("aligned") the two nearly cancel, so |dx| is
         far below the terms whose roundings it carries (measured: l2_norm@torch float32, 18.5 ulp
         at M, 1.2 at S; a factor 16 of cancellation).
  dw     S = max over the weight's elements of the sum of |terms| (over rows, and heads sharing a
         per-head weight): a sum's roundings scale with it, not with the sum.
  dgate  S = M (elementwise: no sum).
Bounds (u_d: the dtype's unit roundoff; a value of magnitude <= A off by a relative k u_d is within
k ulp at A):
  bfloat16 / float16: everything is computed in float32, whose roundings are 2^16 (bf16) or 2^13
    (fp16) times finer than the dtype's: <= 0.05 ulp in all (SLACK). What counts are the roundings
    to the dtype: the final one of each gradient (0.5 ulp) and one ulp at S for each other rounding
    on its path (`dtype_roundings`):
      - the Llama cast: the forward rounds u = x / d and offset + w to the dtype, and JAX's vjp
        rounds the cotangent at each of those points (jax_own's `_round`): dx carries the rounded
        weight and the rounded cotangent at u (2); with a gate after the norm, the cotangent at the
        rounded product too (+1); dw carries the rounded u (1) and, the rounded scale being per
        column, its per-column partial sums rounded before the heads sharing it are added (1/2 per
        head); dgate carries the forward's pre-gate value, a rounded product of rounded factors (3);
      - RoPE after the norm: the cotangent is rounded where the norm's output enters RoPE (1), and
        the rotation back uses the dtype-rounded cos / sin (a pair of products: 1.5).
    The one-rounding conventions get 0.5 + SLACK: the gradient is the float32 one rounded once
    (LayerNorm too: its db, the float32 sum of dy over the rows, as well).
      - Mamba2's grouped norm (the gate before the norm, in float32, then the Llama cast): dx and
        dw as the Llama cast's; dgate is the norm's cotangent at x * silu(z) times x silu'(z), so it
        carries dx's two.
      - the fused add (add_rms_norm): d residual_out joins the norm's float32 cotangent at h before
        its one rounding (no rounding of its own), and the residual gets x's gradient; where h is
        rounded to the dtype before the norm (residual_dtype "input"), that is a relative u_d on
        every element of the norm's input: 1 ulp at S through 1 / rms and 4 through the projection
        term (x_i, r^3, sum g x) for dx, 2 through u = h r for dw.
  For these three ops S is not the formula above but the largest of the harness's own scale
  (vjp absolute=True: every term of the gradient in magnitude); every test also judges each
  gradient as the run does (runner.prepare: the run's upstream gradients, a fused add's dy and
  dresidual_out both, its reference and budget; judge.judge), which must agree.
  float32: no dtype roundings but float32's own, dozens of them and the sums over the span (of the
    squares, of g * x) and over the rows (dw) in XLA's order: 16 ulp at A (jax_own's forward budget
    in float32, tests/implementations/test_jax_own.py). What jax_own and flax measure here is far
    less, <= 2.2 ulp at A (gated_rms_norm@qwen3-next's dgate the worst), and is asserted too: a
    float32 gradient past 3 ulp (FLOAT32_MEASURED) has lost accuracy that the borrowed 16 would let
    pass unseen.
A wrong gradient (the projection term or the weight left out) is off by a sizeable fraction of S:
hundreds of ULPs in the half dtypes, millions in float32.
"""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest

jax = pytest.importorskip("jax")

from normdiff.cases.model import Case, CaseInputs  # noqa: E402
from normdiff.cases.regimes import draw_gradient  # noqa: E402
from normdiff.harness.data.conventions import float_op_conventions, get_contract  # noqa: E402
from normdiff.harness.data.dtypes import get_format  # noqa: E402
from normdiff.harness.data.ops import get_op  # noqa: E402
from normdiff.harness.engine import judge, oracle, runner  # noqa: E402
from normdiff.harness.engine.vjp import vjp  # noqa: E402

HAVE_FLAX = importlib.util.find_spec("flax") is not None
DTYPES = ("float32", "bfloat16", "float16")
REGIMES = ("normal", "aligned")
SLACK = 0.05  # float32's roundings, in ULPs of bfloat16 / float16 (module docstring)
FLOAT32_K = 16.0
FLOAT32_MEASURED = 3.0  # float32's worst measured at A, 2.2 ulp, with a little room (module docstring)
PASSING = ("identical", "agree")
# each drawn operand's regime; the LayerNorm conventions' own affine (cases/suites/default.toml):
# Cohere's LayerNorm has no bias, OLMo-1's neither weight nor bias
CHOICES = {"weight": "trained", "gate": "open", "bias": "trained", "residual": "large"}
CONVENTION_CHOICES = {"cohere": {"bias": "zeros"}, "olmo": {"weight": "ones", "bias": "zeros"}}


@pytest.fixture(scope="module")
def jax_own():
    from normdiff.implementations import jax_own  # conftest.py points its cache away from ~/.cache

    return jax_own


@pytest.fixture(scope="module")
def builtins_jax():
    if not HAVE_FLAX:
        pytest.skip("flax is not installed")
    from normdiff.implementations import builtins_jax

    return builtins_jax


def make_case(op: str, convention: str, dtype: str, sample: int = 0, dy: str = "") -> Case:
    """A small case; rows that are not a power of two, so the padding is exercised everywhere. One
    shape per op layout: few programs to compile. With `dy` (a gradient regime): the backward case."""
    record = get_op(op)
    choices = {o.name: CHOICES[o.name] for o in record.chosen}
    choices.update({k: v for k, v in CONVENTION_CHOICES.get(convention, {}).items() if record.operand(k)})
    shape = "3x4x32" if "num_heads" in record.dims else "6x128"
    return Case.of(op, convention, dtype, shape, sample=sample, dy=dy, **choices)


def prepared(op: str, convention: str, dtype: str, dy: str) -> runner.Prepared:
    """The backward call as the run prepares it (engine/runner.py): inputs, the upstream gradient
    the run draws (a fused add's {"y": dy, "residual_out": dresidual_out}), and every output's
    reference and budget."""
    return runner.prepare(make_case(op, convention, dtype, dy=dy))


def judged(name: str, out: dict, p: runner.Prepared) -> None:
    """Every gradient as the run judges it (runner.prepare's reference at A, its budget,
    judge.judge): it must agree."""
    assert set(out) == set(p.expected), (name, list(out))
    for key, e in p.expected.items():
        m = judge.judge(np.asarray(out[key]), e.ref, get_format(p.case.dtype), e.budget, p.inputs.num_heads,
                        operand=key, systematic=e.systematic)
        assert m.outcome in PASSING, f"{name} d{key}: {m.outcome}, {m.max_ulp:.3f} ulp > {e.budget:.3f} {m.detail}"


def upstream(case: Case, inputs: CaseInputs, regime: str) -> np.ndarray:
    """dy from the gradient regime (the exact forward output y for "aligned"), in the case dtype."""
    y = oracle.evaluate(case.contract, inputs.as_float64(), inputs.num_heads)
    rng = np.random.default_rng([case.seed, 11])
    return draw_gradient(regime, rng, y).astype(get_format(case.dtype).np_dtype)


# ---- the exact scales and the bounds ------------------------------------------------------------


def _flip(v: np.ndarray, heads: int) -> np.ndarray:
    h = v.reshape(*v.shape[:-1], heads, -1).copy()
    h[..., h.shape[-1] // 2:] *= -1.0
    return h.reshape(v.shape)


def derived_scales(contract, arrays: dict) -> bool:
    """Whether the docstring's S is derived for the contract: the square statistics with the gate,
    if any, after the norm, and no residual."""
    gate_first = "gate" in arrays and contract.gate_order == "gate_then_norm"
    return contract.statistic != "variance" and "residual" not in arrays and not gate_first


def scales(contract, arrays: dict, dy, heads: int) -> dict[str, np.ndarray]:
    """S per output, exact (float64): module docstring. For LayerNorm, the grouped norm (the gate
    before it) and the fused add, the largest of the harness's own scale (`vjp(absolute=True)`, the
    magnitude of every term of the gradient)."""
    if not derived_scales(contract, arrays):
        absolute = vjp(contract, arrays, dy, heads, absolute=True)
        return {k: float(np.max(v)) if v.size else 0.0 for k, v in absolute.items()}
    x = arrays["x"]
    g = dy
    if "positions" in arrays:  # R^T dy = F R F dy (F negates each head's second half)
        g = _flip(oracle.rotate(_flip(g, heads), arrays["positions"], heads, contract.rope_theta), heads)
    if "gate" in arrays:
        g = g * oracle.ACTIVATIONS[contract.gate_activation](arrays["gate"])
    spans_n = heads if contract.scope == "head" else 1
    spans = x.reshape(*x.shape[:-1], spans_n, -1)
    d = oracle.denominator(oracle.statistic(spans, contract.statistic), contract, spans)
    u = (spans / d).reshape(x.shape)
    out = {}
    if "weight" in arrays:
        w = arrays["weight"]
        out["weight"] = np.abs(g * u).reshape(-1, w.shape[-1]).sum(axis=0).max()
        g = g * (contract.weight_offset + np.tile(w, x.shape[-1] // w.shape[-1]))
    out["x"] = np.abs(g.reshape(spans.shape) / d).max()
    return out


def dtype_roundings(contract, inputs: CaseInputs) -> dict[str, float]:
    """The roundings to the case dtype on each gradient's path besides its final one, each worth
    one ulp at S (module docstring)."""
    a = inputs.arrays
    llama = contract.cast == "llama" and "weight" in a
    rope = "positions" in a
    gate = "gate" in a and contract.gate_order == "norm_then_gate"  # after the norm: in the Llama product
    # a fused add with h rounded to the dtype before the norm (residual_dtype "input"): a relative
    # u_d on every element of the norm's input, once through 1 / rms and four times through the
    # projection term for dx (x_i, r^3, sum g x), twice through u = h r for dw; d residual_out is
    # added to the norm's float32 cotangent before the one rounding (no rounding of its own)
    rounded_h = "residual" in a and contract.residual_dtype == "input"
    n = {"x": 2.0 * llama + (llama and gate) + 2.5 * rope + 5.0 * rounded_h}
    if "residual" in a:  # the residual gets x's gradient
        n["residual"] = n["x"]
    if "weight" in a:
        sharing = a["x"].shape[-1] // a["weight"].shape[-1]
        n["weight"] = llama * (1.0 + sharing / 2) + (llama and gate) + 2.5 * rope + 2.0 * rounded_h
    if "gate" in a:
        # after the norm: the pre-gate value, a rounded product of rounded factors (3); before it
        # (the grouped norm, the gate in float32): the norm's cotangent at x * silu(z), which
        # carries the Llama cast's two
        n["gate"] = 3.0 * llama if gate else 2.0 * llama
    if "bias" in a:  # the float32 sum of dy over the rows, rounded once
        n["bias"] = 0.0
    return n


def bound(dtype: str, extra: float) -> float:
    """The bound in ULPs at A for a gradient in `dtype` with `extra` dtype roundings on its path."""
    return FLOAT32_K if dtype == "float32" else 0.5 + extra + SLACK


def ulps_at(got: np.ndarray, exact: np.ndarray, scale: float, dtype: str) -> float:
    err = np.abs(np.asarray(got).astype(np.float64) - exact).max()
    return float(err / get_format(dtype).ulp(max(np.abs(exact).max(), scale)))


def check(name: str, out: dict, exact: dict, scale: dict, roundings: dict, dtypes: dict) -> dict[str, float]:
    """Asserts every gradient within its bound, and a float32 one within what was measured
    (FLOAT32_MEASURED); returns the ULPs at A per output."""
    assert sorted(out) == sorted(exact), (name, list(out))
    figures = {}
    for key, want in exact.items():
        got = np.asarray(out[key])
        dtype = dtypes[key]
        assert got.shape == want.shape and got.dtype == get_format(dtype).np_dtype, (name, key, got.shape, got.dtype)
        assert np.isfinite(got.astype(np.float32)).all(), (name, key)
        ulps = ulps_at(got, want, scale.get(key, 0.0), dtype)
        limit = bound(dtype, roundings.get(key, 0.0))
        assert ulps <= limit, f"{name} d{key}: {ulps:.3f} ulp > {limit:.2f}"
        if dtype == "float32":
            assert ulps <= FLOAT32_MEASURED, f"{name} d{key}: {ulps:.3f} ulp at A, measured <= {FLOAT32_MEASURED}"
        figures[key] = ulps
    return figures


def exact_for(case: Case, inputs: CaseInputs, dy):
    """The exact VJP and S for dy (a fused add's: {"y": dy, "residual_out": dresidual_out})."""
    f64 = inputs.as_float64()
    dy = {k: np.asarray(v, np.float64) for k, v in dy.items()} if isinstance(dy, dict) else dy.astype(np.float64)
    exact = vjp(case.contract, f64, dy, inputs.num_heads)
    return exact, scales(case.contract, f64, dy, inputs.num_heads)


# ---- jax_own ------------------------------------------------------------------------------------


PAIRS = float_op_conventions()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op,convention", PAIRS, ids=[f"{o}@{c}" for o, c in PAIRS])
def test_jax_own_backward_close_to_exact_vjp(op, convention, dtype, jax_own):
    for regime in REGIMES:
        p = prepared(op, convention, dtype, regime)
        case, inputs = p.case, p.inputs
        out = jax_own.backward(op, case.contract, inputs, p.dy)
        # every gradient in its operand's dtype, the case dtype; in the operands' order
        assert list(out) == [k for k in inputs.arrays if k != "positions"]
        name = f"{op}@{convention} {dtype} {regime}"
        judged(name, out, p)
        exact, scale = exact_for(case, inputs, p.dy)
        check(name, out, exact, scale, dtype_roundings(case.contract, inputs), {k: dtype for k in exact})


@pytest.mark.parametrize("op,convention", [("rms_norm", "qwen3"), ("gated_rms_norm", "qwen3.5"),
                                           ("qk_norm_rope", "qwen3")])
def test_float16_subnormal_cotangents_are_kept(op, convention, jax_own):
    """dy ~ 1e-4 ("tiny"): most of it float16 subnormals. reduce_precision, which jax_own's forward
    rounds with, flushes subnormals, and so would its transpose on the cotangent (measured 230-580
    ulp before jax_own's `_round` rule): the Llama cast and RoPE pass these cotangents through."""
    case = make_case(op, convention, "float16")
    inputs = case.inputs()
    dy = upstream(case, inputs, "tiny")
    assert (np.abs(dy) < np.finfo(np.float16).smallest_normal).mean() > 0.3
    exact, scale = exact_for(case, inputs, dy)
    check(f"{op}@{convention} float16 tiny", jax_own.backward(op, case.contract, inputs, dy), exact, scale,
          dtype_roundings(case.contract, inputs), {k: "float16" for k in exact})


def test_a_wrong_backward_is_far_outside_the_bound(jax_own):
    """The bounds are tight enough to see a wrong gradient: dx without the weight (g = dy), and the
    exact vjp's dw of another sample's weight."""
    for dtype in DTYPES:
        case = make_case("rms_norm", "qwen3", dtype)
        inputs = case.inputs()
        dy = upstream(case, inputs, "normal")
        out = jax_own.backward("rms_norm", case.contract, inputs, dy)
        ones = CaseInputs({**inputs.arrays, "weight": np.ones_like(inputs.arrays["weight"])}, 1)
        exact, scale = exact_for(case, ones, dy)
        limit = bound(dtype, dtype_roundings(case.contract, inputs)["x"])
        assert ulps_at(out["x"], exact["x"], scale["x"], dtype) > 10 * limit


def test_keys_shapes_and_dtypes(jax_own):
    case = make_case("qk_norm_rope", "qwen3", "bfloat16")
    inputs = case.inputs()
    out = jax_own.backward(case.op, case.contract, inputs, upstream(case, inputs, "normal"))
    assert list(out) == ["x", "weight"]  # positions get none
    assert out["x"].shape == (3, 128) and out["weight"].shape == (32,)  # per head: summed over heads
    assert all(v.dtype == inputs.arrays["x"].dtype for v in out.values())
    gated = make_case("gated_rms_norm", "qwen3.5", "float16")
    inputs = gated.inputs()
    out = jax_own.backward(gated.op, gated.contract, inputs, upstream(gated, inputs, "normal"))
    assert list(out) == list(inputs.arrays)  # x, gate, weight: the operands' order
    assert {k: (v.shape, v.dtype) for k, v in out.items()} == {
        k: (v.shape, v.dtype) for k, v in inputs.arrays.items()}
    # a bias gets its gradient, a fused add's residual too, from both upstream gradients (the run's
    # {"y": dy, "residual_out": dresidual_out}); dy alone means dresidual_out = 0, as the VJP's
    for op, conv, names in (("layer_norm", "torch", ["x", "weight", "bias"]),
                            ("add_rms_norm", "qwen3", ["x", "residual", "weight"])):
        p = prepared(op, conv, "bfloat16", "normal")
        both = jax_own.backward(op, p.case.contract, p.inputs, p.dy)
        assert list(both) == names == list(p.inputs.arrays)
        assert {k: (v.shape, v.dtype) for k, v in both.items()} == {
            k: (v.shape, v.dtype) for k, v in p.inputs.arrays.items()}
    assert isinstance(p.dy, dict) and list(p.dy) == ["y", "residual_out"]
    alone = jax_own.backward("add_rms_norm", p.case.contract, p.inputs, p.dy["y"])
    assert np.array_equal(alone["x"], alone["residual"]) and np.array_equal(both["x"], both["residual"])
    assert not np.array_equal(alone["x"], both["x"]) and np.array_equal(alone["weight"], both["weight"])
    # leading dims are rows, as in the forward
    flat = make_case("qk_norm", "olmo2", "float32")
    inputs = flat.inputs()
    dy = upstream(flat, inputs, "normal")
    nested = CaseInputs({"x": inputs.arrays["x"].reshape(1, 3, 128), "weight": inputs.arrays["weight"]}, 4)
    a = jax_own.backward("qk_norm", flat.contract, inputs, dy)
    b = jax_own.backward("qk_norm", flat.contract, nested, dy.reshape(1, 3, 128))
    assert b["x"].shape == (1, 3, 128) and np.array_equal(a["x"], b["x"].reshape(3, 128))
    assert np.array_equal(a["weight"], b["weight"])
    with pytest.raises(ValueError, match="shape"):
        jax_own.backward("qk_norm", flat.contract, inputs, dy[:2])
    with pytest.raises(ValueError, match="float32"):
        jax_own.backward("qk_norm", flat.contract, inputs, dy.astype(np.float16))


def test_padding_leaves_dw_exact_even_where_a_zero_row_is_nan(jax_own):
    """6 rows pad to 8. dw of the 6 rows is bit-identical to dw of 8 rows whose last two have
    dy = 0 (the same program, padded rows adding exact zeros), and stays finite under eps_placement
    "none", where a zero padding row would normalise to NaN and make all of dw NaN."""
    case = make_case("rms_norm", "qwen3", "bfloat16")
    inputs = case.inputs()
    dy = upstream(case, inputs, "normal")
    rng = np.random.default_rng(5)
    for contract in (case.contract, case.contract.replace(eps_placement="none")):
        six = jax_own.backward("rms_norm", contract, inputs, dy)
        extra = rng.standard_normal((2, 128)).astype(dy.dtype)
        eight_inputs = CaseInputs({**inputs.arrays, "x": np.concatenate([inputs.arrays["x"], extra])}, 1)
        eight = jax_own.backward("rms_norm", contract, eight_inputs, np.concatenate([dy, np.zeros_like(extra)]))
        assert np.isfinite(six["weight"].astype(np.float32)).all()
        assert np.array_equal(six["weight"], eight["weight"])
        assert np.array_equal(six["x"], eight["x"][:6])
    exact, scale = exact_for(case, inputs, dy)  # "none" has no eps; these rows are far from zero
    none = jax_own.backward("rms_norm", case.contract.replace(eps_placement="none"), inputs, dy)
    assert ulps_at(none["weight"], exact["weight"], scale["weight"], "bfloat16") <= 3.0


def test_empty_case(jax_own):
    c = get_contract("gated_rms_norm", "qwen3.5")
    inputs = CaseInputs({"x": np.zeros((0, 16), np.float32), "weight": np.ones(16, np.float32),
                         "gate": np.zeros((0, 16), np.float32)}, 1)
    out = jax_own.backward("gated_rms_norm", c, inputs, np.zeros((0, 16), np.float32))
    assert out["x"].shape == (0, 16) and out["gate"].shape == (0, 16)
    assert np.array_equal(out["weight"], np.zeros(16, np.float32))


def test_new_eps_and_rows_reuse_the_compiled_backward(jax_own):
    compiles = []

    def listener(event, duration, **kwargs):
        if event.startswith("/jax/core/compile/"):
            compiles.append(event)

    contract = get_contract("rms_norm", "llama")
    first = Case.of("rms_norm", "llama", "float32", "5x40").inputs()  # width 40: used by no other test
    jax_own.backward("rms_norm", contract, first, first.arrays["x"])
    n_functions, n_programs = len(jax_own._JITTED_BACKWARD), len(jax_own.PROGRAMS.loaded)
    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        for rows, eps in ((7, 1e-5), (8, 1e-6), (6, 3e-7)):  # all pad to 8 rows
            inputs = Case.of("rms_norm", "llama", "float32", f"{rows}x40").inputs()
            out = jax_own.backward("rms_norm", contract.replace(eps=eps), inputs, inputs.arrays["x"])
            assert out["x"].shape == (rows, 40)
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
    assert compiles == []
    assert len(jax_own._JITTED_BACKWARD) == n_functions
    assert len(jax_own.PROGRAMS.loaded) == n_programs  # no program made or loaded from disk either


# ---- flax nnx.RMSNorm -------------------------------------------------------------------------


FLAX_PAIRS = (("rms_norm", "olmo2"), ("rms_norm", "torch"))
# flax with dtype = param_dtype = bf16 / fp16 lifts x to float32 twice (for the statistics, and
# where it meets the float32 rsqrt), so its vjp rounds each half of dx (the direct term and the
# projection term, each <= S) to the dtype and adds them in the dtype: two more roundings of half an
# ulp at S. flax's defaults lift x once: dx is the float32 gradient rounded once.
FLAX_ROUNDINGS = {"x": 1.0}


@pytest.mark.parametrize("in_dtype", (False, True), ids=("flax-defaults", "flax-in-dtype"))
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op,convention", FLAX_PAIRS, ids=[f"{o}@{c}" for o, c in FLAX_PAIRS])
def test_flax_backward_close_to_exact_vjp(op, convention, dtype, in_dtype, builtins_jax):
    fn = builtins_jax.rms_norm_in_dtype_backward if in_dtype else builtins_jax.rms_norm_backward
    case = make_case(op, convention, dtype)
    inputs = case.inputs()
    # dx in x's dtype; the scale's gradient in the param's dtype: float32 by flax's default
    dtypes = {"x": dtype, "weight": dtype if in_dtype else "float32"}
    for regime in REGIMES:
        dy = upstream(case, inputs, regime)
        out = fn(op, case.contract, inputs, dy)
        assert list(out) == ["x", "weight"]
        exact, scale = exact_for(case, inputs, dy)
        name = f"{'flax-in-dtype' if in_dtype else 'flax'} {op}@{convention} {dtype} {regime}"
        check(name, out, exact, scale, FLAX_ROUNDINGS if in_dtype and dtype != "float32" else {}, dtypes)


@pytest.mark.parametrize("dtype", DTYPES)
def test_flax_layer_norm_backward_close_to_exact_vjp(dtype, builtins_jax):
    """nnx.LayerNorm with flax's defaults (layer_norm@torch): x lifted to float32 once, float32
    scale and bias, so dx is the float32 gradient rounded once (0.5 + SLACK in bf16 / fp16) and the
    params' gradients are float32 (16 ulp at A); judged as the run judges it too. (Its one-pass
    variance, use_fast_variance, fails the forward only where |mean| / std is large: narrow rows,
    tests/implementations/test_own_layer_norm.py; these rows are "normal".)"""
    for regime in REGIMES:
        p = prepared("layer_norm", "torch", dtype, regime)
        case, inputs = p.case, p.inputs
        out = builtins_jax.layer_norm_backward("layer_norm", case.contract, inputs, p.dy)
        assert list(out) == ["x", "weight", "bias"]
        name = f"flax layer_norm@torch {dtype} {regime}"
        judged(name, out, p)
        exact, scale = exact_for(case, inputs, p.dy)
        check(name, out, exact, scale, {}, {"x": dtype, "weight": "float32", "bias": "float32"})


def test_flax_folds_a_tiled_weight_back(builtins_jax):
    """A (head_dim,) weight on flax's full-width norm is tiled in the forward; its gradient comes
    back folded: the sum over the copies, as the exact vjp of the tiled weight."""
    case = make_case("rms_norm", "olmo2", "float32")
    inputs = case.inputs()
    w = inputs.arrays["weight"][:32]
    tiled = CaseInputs({"x": inputs.arrays["x"], "weight": w}, 1)
    dy = upstream(case, inputs, "normal")
    for fn in (builtins_jax.rms_norm_backward, builtins_jax.rms_norm_in_dtype_backward):
        out = fn("rms_norm", case.contract, tiled, dy)
        assert out["weight"].shape == (32,)
        exact, scale = exact_for(case, tiled, dy)
        check("flax tiled", out, exact, scale, {}, {"x": "float32", "weight": "float32"})
