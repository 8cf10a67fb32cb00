"""The PyTorch backward adapters (autograd through the very code of each forward: torch_own.backward,
the HF families' FamilyAdapter.backward, builtins' F.rms_norm / nn.RMSNorm / F.normalize backwards)
against the oracle's exact float64 VJP (harness/engine/vjp.py) on the dtype-cast inputs, for every
op@convention each implements, in float32, bfloat16 and float16, with dy from the "normal" and
"aligned" gradient regimes; and the keys, shapes and dtypes they return, that each differentiates
exactly its forward's computation, the attention path's exactness, a tiled weight's fold, and the
autograd helper (frameworks/torch.py).

Where errors are counted. As the harness judges a backward output (engine/runner.py): in ULPs of
the dtype at A_i = max(|exact_i|, S_i), S the magnitude of the terms each gradient is a sum of
(`vjp(..., absolute=True)`, floored at the dtype's smallest normal). dx = g / d minus the projection
term; with dy aligned with y the two nearly cancel, and |dx| falls far below the terms whose
roundings it carries: l2_norm's aligned dx is ~16x smaller than S (measured), so a float32 backward
13 ulp off at max|exact| is < 1 ulp off at S. In the brief's form max|err| <= K ulp(max|exact|),
K = bound x ulp(max A) / ulp(max|exact|): the bound below times the cancellation (1 for the
"normal" regime, up to 16 for "aligned"), which follows from the bound at A, so only the figures
at A are asserted.

Bounds (u_d the dtype's unit roundoff; a rounding of a value of magnitude <= A_i errs by < 1 ulp at
A_i, and an error committed on a term of S carries through the linear backward as a part of S):
  bfloat16 / float16: 0.5 (the final rounding to the dtype) + one ulp for each other rounding to the
    dtype on the gradient's path (`dtype_roundings`) + the float32 part (budgets'
    `gradient_float32_part`, the worst case for every order of the float32 sums, converted:
    <= 0.05 ulp of bf16, <= 0.4 of fp16 at these spans). Which operations autograd rounds in the
    dtype (each op's backward runs in its operands' dtype; a cast's backward casts the gradient):
      - float32 statistics, one rounding (olmo2, gemma3, qwen3.5, qwen3-next, torch; HF's
        Olmo2 / Gemma3 / Qwen3_5 RMSNorm, F.rms_norm, nn.RMSNorm, both l2norms): none; the float32
        gradient is rounded once to x's dtype, and the weight's once to the parameter's dtype.
      - the Llama cast (llama, qwen3): the forward multiplies w by u rounded to the dtype, in the
        dtype, so autograd forms g = dy * w in the dtype (dx: 1), and dw's terms dy * u_rounded in
        the dtype (u's rounding and the product: 2; the sum over rows and heads is one float32
        accumulation, rounded once: the final rounding).
      - the gated norm (qwen3.5, qwen3-next: the Llama-cast product times a float32 silu): the
        backward of that bf16 -> float32 promotion rounds dy * silu(z) to the dtype (+1 for dx and
        dw); dgate multiplies dy by the forward's pre-gate value, itself u rounded and w * u rounded
        (2).
      - RoPE after the norm (qk_norm_rope@qwen3, in the dtype as HF applies it): R^T dy = dy cos +
        rotate_half^T(dy sin) with cos / sin rounded to the dtype (1 for the pair: each is a
        relative u_d of its own term), the two products (1) and their sum (1): +3 for dx and dw.
      - F.normalize (l2_norm@torch) computes in the input dtype, forward and backward: ||x|| rounded
        (it enters the direct term once and the projection term three times, d^3), the projection
        term's -dy * ((x / d) / d) (3), its sum over the row (1), the norm's backward x * (s / d)
        (2): 9 ulp at S for dx (the harness's dx budget counts 3: measured it needs about 1).
      - a (head_dim,) weight tiled over a full-width parameter: the full-width gradient is rounded
        to the parameter's dtype before the tiles are summed (+1 for dw).
      - LayerNorm (own torch, HF's CohereLayerNorm: float32 statistics, centring and affine, one
        rounding): none; db is the float32 sum of dy over the rows, rounded once. HF's
        OlmoLayerNorm has no weight or bias: the identity affine after it, in the dtype
        (hf.Identity), gives dw = sum dy * y of the rounded y in the dtype (2) and dx, db exactly.
        The float32 part adds the centring's n kappa u32 for dx and dw (kappa = |mean| / std).
      - Mamba2's grouped norm (the gate before the norm, in float32, then the Llama cast): the
        Llama cast's roundings (dx 1, dw 2) and dgate the cotangent g = dy w formed in the dtype (1).
      - the fused add (add_rms_norm): dx = dresidual = d residual_out + J^T dy, the norm's
        gradient at h rounded to the dtype before autograd adds d residual_out in it (+1); where
        h itself is rounded to the dtype before the norm (residual_dtype "input": qwen3), a relative
        u_d on every element of the norm's input: once through 1 / rms and four times through the
        projection term (x_i, r^3 and sum g x) for dx (+5), twice through u = h r for dw (+2).
      - torch's F.layer_norm / nn.LayerNorm run native_layer_norm_backward's CPU kernel (with a
        bf16 / fp16 weight it saves the mean and rstd in that dtype), not autograd of code here:
        no rounding order is derived here, they are held to the harness's budget (measured: dx
        0.73, dw 1.23, db 1.25 bf16 ULPs at A against 3, 3 and 2).
  float32: the harness's own derivation (budgets.gradient_budget: the forward chain's float32
    constant plus (2.5 k + 36) u32 for dx, (R + k / 2 + 8) for dw, (k / 2 + 16) for dgate, where the
    harness takes k = n, the worst of every legal order of a sum over a span of n, and R for the sum
    over R rows), here with k the depth of torch's own CPU float32 row sum (`torch_sum_depth`: 23 at
    n = 128, 24 at 32, from SumKernel.cpp's cascade): dx within 102-114 ulp at A, dw and dgate within
    31-54, where autograd measures <= 8.4 (the grouped norm's dgate; l2_norm's dx 7.3). That is
    asserted too: a float32 gradient past 12 ulp at A (FLOAT32_MEASURED, room for another CPU's sum
    order) has lost accuracy that a bound for every order of the sums would let pass unseen.
    F.normalize's norm, OlmoLayerNorm's F.layer_norm and the native LayerNorm kernels are other
    reduction kernels, so they keep k = n (the harness's budget).
Each result is also judged as the run judges it (runner.prepare: the upstream gradients the run
draws, a fused add's dy and dresidual_out both; the reference at A and the budget; judge.judge) and
must agree. The cases take each operand's regime from CHOICES, the LayerNorm conventions' own
affine (Cohere: no bias; OLMo-1: neither weight nor bias) from CONVENTION_CHOICES.
A wrong gradient (the weight left out) is off by a sizeable fraction of S: hundreds of ULPs in bf16,
millions in float32 (test_a_wrong_gradient_is_far_outside).

Findings, recorded by tests below: torch_own's clamp placement (l2_norm@torch, 1 / sqrt(s).clamp_min
(eps)) differentiates sqrt at s = 0 as 0 / 0, so a zero row's gradient is NaN where the exact VJP
(and F.normalize, whose norm backward masks ||x|| = 0) is finite; F.normalize's in-dtype backward is
the least accurate of these in bf16 / fp16 (about 10 ulp at max|exact| under aligned dy, 2.3 at A);
the HF attention path takes x's gradient at q_norm's input, because back through the identity
q_proj an overflowed fp16 gradient turns into a row of NaN (inf * 0).
"""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from normdiff.cases.model import Case, CaseInputs  # noqa: E402
from normdiff.cases.regimes import draw_gradient  # noqa: E402
from normdiff.harness.data.budgets import gradient_budget, gradient_systematic  # noqa: E402
from normdiff.harness.data.dtypes import get_format  # noqa: E402
from normdiff.harness.data.ops import get_op  # noqa: E402
from normdiff.harness.engine import judge, oracle, runner  # noqa: E402
from normdiff.harness.engine.vjp import vjp  # noqa: E402
from normdiff.implementations import builtins, catalog, torch_own  # noqa: E402
from normdiff.implementations.frameworks import torch as torch_framework  # noqa: E402
from normdiff.implementations.frameworks.torch import autograd_vjp, from_numpy, to_numpy  # noqa: E402
from normdiff.implementations.loading import load_entry  # noqa: E402

HAVE_TRANSFORMERS = importlib.util.find_spec("transformers") is not None
DTYPES = ("float32", "bfloat16", "float16")
REGIMES = ("normal", "aligned")
PASSING = ("identical", "agree")
TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
FLOAT32_MEASURED = 12.0  # float32's worst measured at A, 8.4 ulp, with room (module docstring)

# the adapters this file is about, by registry name (the catalog must point at them)
OWN = "normdiff.implementations.torch_own:backward"
BUILTIN = {"torch-F.rms_norm": "normdiff.implementations.builtins:functional_rms_norm_backward",
           "torch-nn.RMSNorm": "normdiff.implementations.builtins:module_rms_norm_backward",
           "torch-F.normalize": "normdiff.implementations.builtins:normalize_backward",
           "torch-F.layer_norm": "normdiff.implementations.builtins:functional_layer_norm_backward",
           "torch-nn.LayerNorm": "normdiff.implementations.builtins:module_layer_norm_backward"}
# their own kernels (not autograd of the code here): no rounding order derived in this file
NATIVE_LAYER_NORM = ("torch-F.layer_norm", "torch-nn.LayerNorm")
# reductions in another kernel than torch's sum (SumKernel.cpp): sums bounded as the harness does
OTHER_REDUCTIONS = ("torch-F.normalize", "hf-olmo", *NATIVE_LAYER_NORM)
# each drawn operand's regime; the LayerNorm conventions' own affine (suites/default.toml): Cohere's
# LayerNorm has no bias, OLMo-1's neither weight nor bias (hf-olmo refuses anything but the identity)
CHOICES = {"weight": "trained", "gate": "open", "bias": "trained", "residual": "large"}
CONVENTION_CHOICES = {"cohere": {"bias": "zeros"}, "olmo": {"weight": "ones", "bias": "zeros"}}


def torch_backwards():
    """The registry's torch implementations with a backward pass (mutants have none)."""
    return [i for i in catalog.builtin() if i.framework == "torch" and i.kind != "mutant" and i.backward]


GROUPS = [(impl.name, op, conv) for impl in torch_backwards() for op, conv in sorted(impl.op_conventions)
          if impl.supports(op, conv, "backward")]
IMPLS = {impl.name: impl for impl in torch_backwards()}


def backward_of(name: str):
    impl = IMPLS[name]
    if "transformers" in impl.requires and not HAVE_TRANSFORMERS:
        pytest.skip("transformers is not installed")
    return load_entry(impl.backward)


def forward_of(name: str):
    return load_entry(IMPLS[name].entry)


def make_case(op: str, convention: str, dtype: str, regime: str = "normal", dy: str = "") -> Case:
    """The forward case, or with `dy` (a gradient regime) the backward case judged on dx."""
    record = get_op(op)
    choices = {o.name: CHOICES[o.name] for o in record.chosen}
    choices.update({k: v for k, v in CONVENTION_CHOICES.get(convention, {}).items() if record.operand(k)})
    return Case.of(op, convention, dtype, "4x4x32" if "num_heads" in record.dims else "8x128", regime, dy=dy,
                   **choices)


def prepared(op: str, convention: str, dtype: str, dy: str = "normal", regime: str = "normal") -> runner.Prepared:
    """The backward call as the run prepares it (engine/runner.py): its inputs, its upstream
    gradient (a fused add's {"y": dy, "residual_out": dresidual_out}) and every output's reference
    and budget, by operand."""
    return runner.prepare(make_case(op, convention, dtype, regime, dy))


def results_of(value) -> tuple:
    """A forward's results: (y,), or a fused add's (y, residual_out)."""
    return value if isinstance(value, tuple) else (value,)


def upstream(case: Case, inputs: CaseInputs, regime: str) -> np.ndarray:
    """dy of the gradient regime (the exact y for "aligned"), cast to the case dtype."""
    y = oracle.evaluate(case.contract, inputs.arrays, inputs.num_heads)
    return draw_gradient(regime, np.random.default_rng(0), y).astype(get_format(case.dtype).np_dtype)


def dtype_roundings(name: str, contract, arrays: dict, key: str) -> float:
    """The roundings to the case dtype on a gradient's path besides its final one, each one ulp at
    A (module docstring)."""
    if name == "torch-F.normalize":
        return 9.0
    if name == "hf-olmo":  # the identity affine after the class, in the dtype: dw = sum dy * y, y rounded
        return 2.0 if key == "weight" else 0.0
    llama = contract.cast == "llama" and "weight" in arrays
    rope = "positions" in arrays
    # a gate after the norm (the gated norm) meets the Llama cast's product; before it (the
    # grouped norm) it is float32 throughout
    gate = bool(llama and "gate" in arrays and contract.gate_order == "norm_then_gate")
    # a (head_dim,) weight on a full-vector norm: tiled over the heads (a shared per-head weight is not)
    tiled = "weight" in arrays and contract.scope == "full" and arrays["weight"].shape[-1] != arrays["x"].shape[-1]
    # a fused add: the norm's gradient at h rounded to the dtype, then d residual_out added to it in
    # the dtype (1); h itself rounded to the dtype (residual_dtype "input") is a relative u_d on
    # every element of the norm's input: 1 through 1 / rms and 4 through the projection term for dx
    # (x_i, r^3 and sum g x), 2 for dw (u = h r), each at most an ulp at A
    fused = "residual" in arrays
    rounded_h = fused and contract.residual_dtype == "input"
    if key in ("x", "residual"):  # a fused add's residual gets x's gradient
        return 1.0 * llama + gate + 3.0 * rope + fused + 5.0 * rounded_h
    if key == "weight":
        return 2.0 * llama + gate + 3.0 * rope + tiled + 2.0 * rounded_h
    if key == "bias":  # the float32 sum of dy over the rows, rounded once
        return 0.0
    # gate: after the norm, the pre-gate value's two roundings; before it, the Llama cast's g = dy w
    return 2.0 * llama if contract.gate_order == "norm_then_gate" else 1.0 * llama


def span_of(contract, arrays: dict, heads: int) -> int:
    width = arrays["x"].shape[-1]
    return width // heads if contract.scope == "head" else width


def torch_sum_depth(n: int) -> int:
    """An upper bound on the roundings a term goes through in torch's CPU float32 sum over a
    contiguous row of n (aten/src/ATen/native/cpu/SumKernel.cpp, vectorized_inner_sum / row_sum /
    multi_row_sum), for SIMD vectors of L = 8 (AVX2, the default build) or 16 (AVX512) floats: the
    n // L vectors summed as 4 interleaved running sums (a cascade of 16-long chunks beyond 16 each,
    never deeper than a running sum, plus its level carries), the leftover vectors into the first,
    the 4 partial vectors combined, then the leftover scalars and the L lanes added one by one."""
    depths = []
    for lanes in (8, 16):
        vectors = n // lanes
        if vectors == 0:  # too short for a vector: row_sum on scalars, 4 running sums
            per = n // 4
            depths.append(max(per - 1, 0) + 3 + n % 4 + 3)
            continue
        per = vectors // 4
        depths.append(max(per - 1, 0) + 3 + vectors % 4 + 3 + n % lanes + lanes)
    return max(depths)


def bound(name: str, case_op: str, contract, inputs: CaseInputs, key: str, dtype: str) -> tuple[float, float]:
    """(this file's bound, the harness's budget), in ULPs at A."""
    arrays = inputs.arrays
    output = {operand: out for out, operand in get_op(case_op).gradients.items()}[key]
    n = span_of(contract, arrays, inputs.num_heads)
    reduced = arrays["x"].size // arrays[key].size if key in ("weight", "bias") else 1
    kappa = oracle.centring_condition(contract, arrays, inputs.num_heads)  # LayerNorm's; 0 for the rest
    harness = gradient_budget(dtype, case_op, output, n, reduced, kappa)
    if name in NATIVE_LAYER_NORM:  # no rounding order of its own derived here (module docstring)
        return harness, harness
    if dtype == "float32":
        # the harness's float32 derivation with the sums over the span (and the centring's mean)
        # as deep as torch's are (another reduction kernel keeps the sequential worst case)
        depth = n if name in OTHER_REDUCTIONS else torch_sum_depth(n)
        return gradient_budget(dtype, case_op, output, depth, reduced, kappa), harness
    float32 = gradient_systematic(dtype, output, n, reduced, kappa)
    return 0.5 + dtype_roundings(name, contract, arrays, key) + float32, harness


def ulps(got: np.ndarray, exact: np.ndarray, scale: np.ndarray, dtype: str) -> float:
    """Worst |got - exact| in ULPs of `dtype` at max(|exact|, scale) elementwise."""
    fmt = get_format(dtype)
    err = np.abs(np.asarray(got).astype(np.float64) - exact)
    at = np.maximum(np.abs(exact), scale)
    return float((err / fmt.ulp(at)).max()) if err.size else 0.0


def check(impl: str, name: str, p: runner.Prepared, out: dict) -> None:
    """`out` (implementation `impl`'s gradients of the call `p`) against the exact VJP: keys, types,
    dtypes, shapes, judged as the run judges them (runner.prepare's reference at A and budget,
    judge.judge) and within this file's bound, a float32 one within what was measured
    (FLOAT32_MEASURED); `name` says which in a failure."""
    case, inputs = p.case, p.inputs
    contract = case.contract
    fmt = get_format(case.dtype)
    # the float operands' gradients, in the operands' order; never positions
    assert list(out) == [k for k in inputs.arrays if k != "positions"], (name, list(out))
    assert set(p.expected) == set(out), (name, list(p.expected))
    for key, e in p.expected.items():
        got, want = out[key], e.ref.exact
        assert isinstance(got, torch.Tensor), (name, key, type(got))
        # the dtype autograd gives: the operand's (a bf16 parameter gets a bf16 gradient)
        assert got.dtype == TORCH_DTYPES[case.dtype], (name, key, got.dtype)
        got = to_numpy(got)
        assert got.shape == want.shape == inputs.arrays[key].shape, (name, key, got.shape)
        assert np.isfinite(got.astype(np.float32)).all(), (name, key)
        m = judge.judge(got, e.ref, fmt, e.budget, inputs.num_heads, operand=key, systematic=e.systematic)
        assert m.outcome in PASSING, f"{name} d{key}: {m.outcome}, {m.max_ulp:.3f} ulp at A > {e.budget:.3f} {m.detail}"
        at_a = m.max_ulp  # ULPs at A = max(|exact|, S), S the terms' scale (vjp absolute=True)
        mine, harness = bound(impl, case.op, contract, inputs, key, case.dtype)
        assert harness == e.budget, (name, key, harness, e.budget)  # this file's reading of the run's budget
        assert at_a <= mine, f"{name} d{key}: {at_a:.3f} ulp at A > {mine:.3f}"
        if case.dtype == "float32":
            assert at_a <= FLOAT32_MEASURED, f"{name} d{key}: {at_a:.3f} ulp at A, measured <= {FLOAT32_MEASURED}"


# ---- every implementation x op@convention x dtype ----------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("impl,op,conv", GROUPS, ids=[f"{i}:{o}@{c}" for i, o, c in GROUPS])
def test_backward_close_to_exact_vjp(impl, op, conv, dtype):
    backward = backward_of(impl)
    for regime in REGIMES:
        p = prepared(op, conv, dtype, regime)
        check(impl, f"{impl} {op}@{conv} {dtype}", p, backward(op, p.case.contract, p.inputs, p.dy))


def test_registry_points_at_these_adapters():
    by_name = {impl.name: impl for impl in torch_backwards()}
    assert by_name["torch"].backward == OWN and load_entry(OWN) is torch_own.backward
    for name, entry in BUILTIN.items():
        assert by_name[name].backward == entry
        assert load_entry(entry) is getattr(builtins, entry.rpartition(":")[2])
    assert {i.name for i in catalog.hf_implementations()} <= set(by_name)
    if HAVE_TRANSFORMERS:
        from normdiff.implementations import hf

        for attr in hf.FAMILIES:
            method = load_entry(f"normdiff.implementations.hf:{attr}.backward")  # the dotted walk
            assert method.__self__ is getattr(hf, attr) and method.__func__ is hf.FamilyAdapter.backward


def test_keys_shapes_and_dtypes():
    # positions get no gradient; a per-head weight's is summed over the heads (D,)
    case = make_case("qk_norm_rope", "qwen3", "bfloat16")
    inputs = case.inputs()
    out = torch_own.backward(case.op, case.contract, inputs, upstream(case, inputs, "normal"))
    assert list(out) == ["x", "weight"]
    assert tuple(out["x"].shape) == (4, 128) and tuple(out["weight"].shape) == (32,)
    assert {v.dtype for v in out.values()} == {torch.bfloat16}
    assert not any(v.requires_grad for v in out.values())
    gated = make_case("gated_rms_norm", "qwen3.5", "float16")
    inputs = gated.inputs()
    out = torch_own.backward(gated.op, gated.contract, inputs, upstream(gated, inputs, "normal"))
    assert {k: (tuple(v.shape), v.dtype) for k, v in out.items()} == {
        k: (a.shape, torch.float16) for k, a in inputs.arrays.items()}
    assert list(out) == list(inputs.arrays)
    # a bias gets its gradient (in its dtype, its shape); a fused add's residual too, from both
    # upstream gradients ({"y": dy, "residual_out": dresidual_out}, as the run passes them)
    for op, conv, names in (("layer_norm", "torch", ["x", "weight", "bias"]),
                            ("add_rms_norm", "vllm", ["x", "residual", "weight"])):
        p = prepared(op, conv, "bfloat16")
        out = torch_own.backward(op, p.case.contract, p.inputs, p.dy)
        assert list(out) == names == list(p.inputs.arrays)
        assert {k: (tuple(v.shape), v.dtype) for k, v in out.items()} == {
            k: (a.shape, torch.bfloat16) for k, a in p.inputs.arrays.items()}
    assert isinstance(p.dy, dict) and list(p.dy) == ["y", "residual_out"]
    # dx = dresidual = dresidual_out + J^T dy: without dresidual_out (dy alone, as the VJP takes it)
    # both change, the weight's gradient does not
    alone = torch_own.backward("add_rms_norm", p.case.contract, p.inputs, p.dy["y"])
    assert torch.equal(alone["x"], alone["residual"]) and torch.equal(out["x"], out["residual"])
    assert not torch.equal(alone["x"], out["x"]) and torch.equal(alone["weight"], out["weight"])


# ---- each backward differentiates exactly its forward --------------------------------------------


@pytest.mark.parametrize("dtype", ("float32", "bfloat16"))
@pytest.mark.parametrize("impl,op,conv", GROUPS, ids=[f"{i}:{o}@{c}" for i, o, c in GROUPS])
def test_backward_differentiates_the_forward_itself(impl, op, conv, dtype, monkeypatch):
    """The output autograd differentiates has the forward's very bits (one code path, run under
    autograd instead of inference_mode), and the forward's bits are the same after a backward (the
    cached modules and parameters serve both)."""
    backward = backward_of(impl)
    forward = forward_of(impl)
    p = prepared(op, conv, dtype)
    case, inputs = p.case, p.inputs
    before = [to_numpy(t) for t in results_of(forward(op, case.contract, inputs))]
    seen = []
    real = torch_framework.autograd_vjp

    def spy(fwd, leaves, dy):
        def recorded():
            y = fwd()
            seen.append([t.detach().clone() for t in results_of(y)])  # y, and a fused add's residual_out
            return y
        return real(recorded, leaves, dy)

    module = {"torch": torch_own}.get(impl, builtins)
    if impl.startswith("hf-"):
        from normdiff.implementations import hf as module
    monkeypatch.setattr(module, "autograd_vjp", spy)
    backward(op, case.contract, inputs, p.dy)
    assert len(seen) == 1
    graph = [to_numpy(t) for t in seen[0]]
    assert len(graph) == len(before) == len(get_op(op).results)
    for g, b in zip(graph, before):
        assert g.dtype == b.dtype and g.tobytes() == b.tobytes()
    after = [to_numpy(t) for t in results_of(forward(op, case.contract, inputs))]
    assert [a.tobytes() for a in after] == [b.tobytes() for b in before]


# ---- the HF attention path ---------------------------------------------------------------------


ATTENTION_FAMILIES = ("qwen3", "qwen3_5", "qwen3_next", "olmo2", "gemma3")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("attr", ATTENTION_FAMILIES)
def test_attention_gradient_is_q_norm_alone_bit_for_bit(attr, dtype):
    """Through the real attention (identity q_proj, hooks), dx and dw are exactly autograd's of the
    family's q_norm called alone on x in the layout the attention gives it (per head, heads first
    for Gemma3, the full vector for OLMo2, a chunk of the gated query for Qwen3.5 / Qwen3-Next):
    k_norm, the gate half and the rest of the attention contribute nothing."""
    if not HAVE_TRANSFORMERS:
        pytest.skip("transformers is not installed")
    from normdiff.implementations import hf

    adapter = getattr(hf, attr)
    conv = adapter.family.convention
    case = make_case("qk_norm", conv, dtype)
    inputs = case.inputs()
    dy = upstream(case, inputs, "normal")
    out = adapter.backward("qk_norm", case.contract, inputs, dy)
    tokens, width = inputs.arrays["x"].shape
    heads = inputs.num_heads
    attention = adapter.attention(heads, width // heads, case.contract.eps, TORCH_DTYPES[dtype])
    q_norm = attention.q_norm
    with torch.no_grad():
        q_norm.weight.copy_(hf.fit_weight(from_numpy(inputs.arrays["weight"]), q_norm.weight, heads))
    x = torch_framework.input_leaf(inputs.arrays["x"])

    def alone():
        if case.contract.scope == "full":  # OLMo2: q_norm on the projection's (1, T, H*D)
            return q_norm(x.view(1, tokens, width)).reshape(tokens, width)
        q = x.view(1, tokens, heads, -1)
        if adapter.family.heads_first:  # Gemma3: (1, H, T, D)
            return adapter.by_token(q_norm(q.transpose(1, 2)), tokens)
        return q_norm(q).reshape(tokens, width)

    direct = autograd_vjp(alone, {"x": x, "weight": q_norm.weight}, dy)
    for key in ("x", "weight"):
        assert to_numpy(out[key]).tobytes() == to_numpy(direct[key]).tobytes(), (attr, dtype, key)


def test_an_overflowed_gradient_stays_inf_not_nan():
    """fp16 dy ~300 on rows of rms 1e-4: dq = dy w / rms overflows to inf, as the exact gradient
    rounded to fp16 does. Taken at q_norm's input, it stays inf (as torch_own's); sent back through
    the identity q_proj it would be inf * 0 = NaN across every row that overflowed."""
    if not HAVE_TRANSFORMERS:
        pytest.skip("transformers is not installed")
    from normdiff.implementations import hf

    case = Case.of("qk_norm", "qwen3", "float16", "4x8x64", "tiny_rms:1e-4", weight="trained")
    inputs = case.inputs()
    dy = upstream(case, inputs, "large")
    out = to_numpy(hf.qwen3.backward("qk_norm", case.contract, inputs, dy)["x"]).astype(np.float64)
    own = to_numpy(torch_own.backward("qk_norm", case.contract, inputs, dy)["x"]).astype(np.float64)
    rounded = get_format("float16").round(vjp(case.contract, inputs.arrays, dy, inputs.num_heads)["x"])
    assert np.isinf(rounded).any() and np.isinf(out).any()
    assert not np.isnan(out).any()
    assert np.array_equal(np.isinf(out), np.isinf(own))
    through_identity = torch.from_numpy(out.astype(np.float16)) @ torch.eye(512, dtype=torch.float16)
    assert torch.isnan(through_identity).all(dim=-1).any()


def test_only_q_norm_is_differentiated():
    """k_norm holds the same weight but gets no gradient, nor do the projections: autograd.grad
    reaches only the leaves asked for, and nothing accumulates into .grad."""
    if not HAVE_TRANSFORMERS:
        pytest.skip("transformers is not installed")
    from normdiff.implementations import hf

    case = make_case("qk_norm", "qwen3", "float32")
    inputs = case.inputs()
    hf.qwen3.backward("qk_norm", case.contract, inputs, upstream(case, inputs, "normal"))
    attention = hf.qwen3.attention(4, 32, case.contract.eps, torch.float32)
    assert all(p.grad is None for p in attention.parameters())


# ---- a tiled weight ----------------------------------------------------------------------------


TILED = [name for name in IMPLS if ("qk_norm", "olmo2") in IMPLS[name].op_conventions]
assert {"torch", "torch-F.rms_norm", "torch-nn.RMSNorm", "hf-olmo2"} <= set(TILED)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("impl", TILED)
def test_a_tiled_weight_comes_back_folded(impl, dtype, monkeypatch):
    """A (head_dim,) weight on OLMo2's full-vector norm is tiled over the heads (numpy_own's rule);
    its gradient comes back in its own shape, the sum over the tiles, as the exact VJP's."""
    backward = backward_of(impl)
    case = make_case("qk_norm", "olmo2", dtype, dy="normal")
    full = case.inputs()
    tiled = CaseInputs({"x": full.arrays["x"], "weight": full.arrays["weight"][:32]}, full.num_heads)
    monkeypatch.setattr(Case, "inputs", lambda self: tiled)  # the run's preparation of these very inputs
    p = runner.prepare(case)
    out = backward("qk_norm", case.contract, tiled, p.dy)
    assert tuple(out["weight"].shape) == (32,)
    check(impl, f"{impl} qk_norm@olmo2 tiled {case.dtype}", p, out)


# ---- sensitivity -------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_wrong_gradient_is_far_outside(dtype):
    """The bounds see a wrong gradient: autograd's dx against the exact VJP of the same case with
    the weight taken as ones (the weight left out of g)."""
    case = make_case("rms_norm", "qwen3", dtype)
    inputs = case.inputs()
    dy = upstream(case, inputs, "normal")
    out = torch_own.backward("rms_norm", case.contract, inputs, dy)
    ones = CaseInputs({**inputs.arrays, "weight": np.ones_like(inputs.arrays["weight"])}, 1)
    exact = vjp(case.contract, ones.arrays, dy, 1)["x"]
    scale = vjp(case.contract, ones.arrays, dy, 1, absolute=True)["x"]
    mine, _ = bound("torch", "rms_norm", case.contract, inputs, "x", dtype)
    assert ulps(to_numpy(out["x"]), exact, scale, dtype) > 10 * mine


# ---- the autograd helper -----------------------------------------------------------------------


def test_autograd_vjp_takes_dy_bits_exactly_and_casts_only_exactly():
    rng = np.random.default_rng(3)
    x = torch_framework.input_leaf(rng.standard_normal((2, 8)).astype(np.float32))
    # edge bits (a subnormal, -0.0, the largest float32): x * 1's backward passes each on exactly
    dy = np.array([1e-45, -0.0, np.finfo(np.float32).max, 1.0, -2.5, 3e-39, 7.0, -1e-30] * 2, np.float32).reshape(2, 8)
    grads = autograd_vjp(lambda: x * 1.0, {"x": x}, dy)
    assert to_numpy(grads["x"]).tobytes() == dy.tobytes()
    # a bf16 dy for a float32 output: the cast is exact, so it is made
    import ml_dtypes

    half = rng.standard_normal((2, 8)).astype(ml_dtypes.bfloat16)
    grads = autograd_vjp(lambda: x * 1.0, {"x": x}, half)
    assert np.array_equal(to_numpy(grads["x"]), half.astype(np.float32))
    # a float32 dy that bf16 cannot hold: refused, not rounded
    xb = torch_framework.input_leaf(half)
    with pytest.raises(ValueError, match="not exactly representable"):
        autograd_vjp(lambda: xb * 1.0, {"x": xb}, np.full((2, 8), 1.0 + 2.0 ** -20, np.float32))
    with pytest.raises(ValueError, match="shape"):
        autograd_vjp(lambda: x * 1.0, {"x": x}, dy[:1])
    # a leaf the output does not use gets zeros of its own shape and dtype
    unused = torch_framework.input_leaf(np.ones(3, np.float16))
    grads = autograd_vjp(lambda: x * 2.0, {"x": x, "unused": unused}, dy)
    assert grads["unused"].dtype == torch.float16 and not grads["unused"].any()


def test_input_leaves_are_fresh_copies():
    a = np.arange(4, dtype=np.float32)
    leaf = torch_framework.input_leaf(a)
    assert leaf.requires_grad and leaf.is_leaf
    a[0] = 99.0  # the caller's array is not aliased
    assert float(leaf.detach()[0]) == 0.0


# ---- findings ----------------------------------------------------------------------------------


def test_finding_own_clamp_l2_norm_gradient_is_nan_on_zero_rows():
    """torch_own's "clamp" placement, 1 / sqrt(s).clamp_min(eps), is differentiated through sqrt at
    s = 0: clamp_min passes a zero gradient, and sqrt's backward divides it by 2 sqrt(0) = 0, so the
    zero rows' dx is NaN. The exact VJP there is dy / eps (the clamp's branch, sqrt's gradient never
    needed), and F.normalize, whose norm backward masks ||x|| = 0, gives it finite. The forward is
    untouched (it must stay bit-identical); this is what autograd of that formula gives."""
    case = make_case("l2_norm", "torch", "float32", "zero_rows")
    inputs = case.inputs()
    dy = upstream(case, inputs, "normal")
    exact = vjp(case.contract, inputs.arrays, dy, 1)["x"]
    zero = ~inputs.arrays["x"].any(axis=-1)
    assert zero.any() and np.isfinite(exact).all()
    own = to_numpy(torch_own.backward("l2_norm", case.contract, inputs, dy)["x"])
    assert np.isnan(own[zero]).all() and np.isfinite(own[~zero]).all()
    builtin = to_numpy(builtins.normalize_backward("l2_norm", case.contract, inputs, dy)["x"])
    assert np.isfinite(builtin).all()
