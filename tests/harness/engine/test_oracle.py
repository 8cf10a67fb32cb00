"""The oracle against hand-computed values and the seed's maths."""
import numpy as np
import pytest

from normdiff.harness.engine import oracle
from normdiff.harness.data.contracts import Contract
from normdiff.harness.data.conventions import get_contract


def test_seed_worked_example():
    # seed 004, section 3.3: x = (3, 4): RMS 3.5355, y = (0.8485, 1.1314), mean(y^2) = 1
    y = oracle.evaluate(Contract("rms_norm", eps=0.0), {"x": np.array([[3.0, 4.0]]), "weight": np.ones(2)})
    np.testing.assert_allclose(y, [[0.848528137, 1.131370850]], rtol=1e-9)
    assert np.mean(y**2) == pytest.approx(1.0)


def test_eps_sits_inside_the_square_root():
    x = np.array([[1e-3, -2e-3, 3e-3]])
    ms = np.mean(x**2)
    y = oracle.evaluate(Contract("rms_norm", eps=1e-6), {"x": x, "weight": np.ones(3)})
    np.testing.assert_allclose(y, x / np.sqrt(ms + 1e-6), rtol=1e-12)
    outside = oracle.evaluate(Contract("rms_norm", eps=1e-6, eps_placement="outside"), {"x": x, "weight": np.ones(3)})
    np.testing.assert_allclose(outside, x / (np.sqrt(ms) + 1e-6), rtol=1e-12)
    assert not np.allclose(y, outside, rtol=1e-2)


def test_zero_centred_weight_multiplies_one_plus_w():
    x, w = np.array([[1.0, -1.0]]), np.array([0.5, -0.25])
    plain = oracle.evaluate(get_contract("rms_norm", "qwen3"), {"x": x, "weight": w})
    centred = oracle.evaluate(get_contract("rms_norm", "qwen3.5"), {"x": x, "weight": w})
    np.testing.assert_allclose(plain, x / np.sqrt(1 + 1e-6) * w)
    np.testing.assert_allclose(centred, x / np.sqrt(1 + 1e-6) * (1 + w))


def test_per_head_and_full_vector_scopes():
    head_a, head_b = np.array([3.0, 4.0]), np.array([30.0, 40.0])
    x = np.concatenate([head_a, head_b])[None]
    per_head = oracle.evaluate(get_contract("qk_norm", "qwen3").replace(eps=0.0), {"x": x, "weight": np.ones(2)}, num_heads=2)
    np.testing.assert_allclose(per_head, [[0.8485281, 1.1313708, 0.8485281, 1.1313708]], rtol=1e-6)
    full = oracle.evaluate(get_contract("qk_norm", "olmo2").replace(eps=0.0), {"x": x, "weight": np.ones(4)}, num_heads=2)
    np.testing.assert_allclose(full, x / np.sqrt(np.mean(x**2)), rtol=1e-12)


def test_gated_norm_orders_and_activations():
    rng = np.random.default_rng(0)
    x, z, w = rng.standard_normal((2, 8)), rng.standard_normal((2, 8)), rng.standard_normal(8)
    silu = z / (1 + np.exp(-z))
    c = get_contract("gated_rms_norm", "qwen3.5")
    y = oracle.evaluate(c, {"x": x, "gate": z, "weight": w})
    normed = x / np.sqrt(np.mean(x**2, -1, keepdims=True) + 1e-6)
    np.testing.assert_allclose(y, normed * w * silu, rtol=1e-12)
    g = x * silu
    y2 = oracle.evaluate(c.replace(gate_order="gate_then_norm"), {"x": x, "gate": z, "weight": w})
    np.testing.assert_allclose(y2, g / np.sqrt(np.mean(g**2, -1, keepdims=True) + 1e-6) * w, rtol=1e-12)


def test_l2_norm_and_its_zero_row():
    x = np.array([[3.0, 4.0], [0.0, 0.0]])
    y = oracle.evaluate(get_contract("l2_norm", "qwen3.5"), {"x": x})
    np.testing.assert_allclose(y[0], np.array([3.0, 4.0]) / np.sqrt(25 + 1e-6))
    assert np.all(y[1] == 0)
    clamp = oracle.evaluate(get_contract("l2_norm", "qwen3.5").replace(eps_placement="clamp", eps=1e-12), {"x": x})
    np.testing.assert_allclose(clamp[0], [0.6, 0.8])
    ignored = oracle.evaluate(get_contract("l2_norm", "qwen3.5").replace(eps_placement="none"), {"x": x})
    assert np.isnan(ignored[1]).all()


def test_jacobian_matches_finite_differences():
    rng = np.random.default_rng(1)
    x, g, eps = rng.standard_normal(6), rng.standard_normal(6), 1e-6
    f = lambda v: oracle.evaluate(Contract("rms_norm", eps=eps), {"x": v[None], "weight": g})[0]
    h = 1e-6
    numeric = np.stack([(f(x + h * e) - f(x - h * e)) / (2 * h) for e in np.eye(6)], axis=1)
    np.testing.assert_allclose(oracle.rms_norm_jacobian(x, g, eps), numeric, atol=1e-8)


def test_variance_statistic_removes_the_mean():
    x = np.array([[1.0, 2.0, 3.0]])
    y = oracle.evaluate(Contract("rms_norm", eps=0.0, statistic="variance"), {"x": x, "weight": np.ones(3)})
    np.testing.assert_allclose(y, x / np.std(x))


# ---- qk_norm_rope: per-head QK-Norm, then RoPE in rotate_half form (seed 004, section 3.5) --------


def test_rope_rotates_each_pair_by_its_float32_angle():
    # D = 4, theta = 100: inverse frequencies 1 and 1/10, so at position 1 the pair (0, 2) turns by
    # exactly 1 rad and the pair (1, 3) by float32(0.1) (the contract's float32 angle). x has RMS 1
    # and eps = 0, so the norm leaves it as it is and only the rotation acts.
    c = get_contract("qk_norm_rope", "qwen3").replace(eps=0.0, rope_theta=100.0)
    x = np.array([[1.0, 1.0, 1.0, 1.0]])
    y = oracle.evaluate(c, {"x": x, "weight": np.ones(4), "positions": np.array([1])}, num_heads=1)[0]
    a, b = 1.0, float(np.float32(0.1))
    # rotate_half(x) = (-x2, -x3, x0, x1): y = x * cos + rotate_half(x) * sin
    np.testing.assert_allclose(y, [np.cos(a) - np.sin(a), np.cos(b) - np.sin(b),
                                   np.cos(a) + np.sin(a), np.cos(b) + np.sin(b)], rtol=1e-15)
    assert b != 0.1  # the float32 angle, not the exact one


def test_rope_position_zero_is_qk_norm_and_heads_turn_alike():
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal((3, 2 * 8)), rng.uniform(0.5, 1.5, 8)
    rope = get_contract("qk_norm_rope", "qwen3")
    plain = oracle.evaluate(get_contract("qk_norm", "qwen3"), {"x": x, "weight": w}, num_heads=2)
    at_zero = oracle.evaluate(rope, {"x": x, "weight": w, "positions": np.zeros(3, np.int64)}, num_heads=2)
    np.testing.assert_array_equal(at_zero, plain)
    # the same vector in both heads turns the same way at any position
    same = np.tile(x[:, :8], 2)
    y = oracle.evaluate(rope, {"x": same, "weight": w, "positions": np.array([5, 700, 8191])}, num_heads=2)
    np.testing.assert_array_equal(y[:, :8], y[:, 8:])


def test_norm_then_rope_equals_rope_then_norm_only_for_uniform_gamma():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((6, 4 * 16))
    positions = np.array([3, 10, 99, 1000, 4000, 8000])
    right = get_contract("qk_norm_rope", "qwen3")
    wrong = right.replace(rope_order="rope_then_norm")
    for w, equal in ((np.full(16, 0.7), True), (rng.uniform(-0.1, 1.0, 16), False)):
        arrays = {"x": x, "weight": w, "positions": positions}
        a, b = (oracle.evaluate(c, arrays, num_heads=4) for c in (right, wrong))
        rel = np.linalg.norm(a - b) / np.linalg.norm(a)
        assert (rel < 1e-14) if equal else (rel > 0.05), rel
        # a rotation keeps each head's RMS: the weighted norm's per-head RMS survives either order
        head_rms = lambda y: np.sqrt(np.mean(y.reshape(6, 4, 16) ** 2, -1))  # noqa: E731
        plain = oracle.evaluate(get_contract("qk_norm", "qwen3"), {"x": x, "weight": w}, num_heads=4)
        np.testing.assert_allclose(head_rms(a), head_rms(plain), rtol=1e-13)


def test_rope_needs_one_position_per_row():
    c = get_contract("qk_norm_rope", "qwen3")
    with pytest.raises(ValueError, match="2 positions for 3 tokens"):
        oracle.evaluate(c, {"x": np.ones((3, 8)), "weight": np.ones(8), "positions": np.arange(2)})


def test_rope_knobs_are_validated_and_described():
    c = get_contract("qk_norm_rope", "qwen3")
    assert (c.rope_order, c.rope_theta, c.cast, c.scope) == ("norm_then_rope", 1e6, "llama", "head")
    assert c.describe().endswith("; then RoPE (rotate_half, theta=1e+06, float32 angles)")
    assert c.replace(rope_order="rope_then_norm").describe().startswith("RoPE (rotate_half")
    # the knobs' defaults leave the other ops' contracts (and their descriptions) as they were
    assert "RoPE" not in get_contract("qk_norm", "qwen3").describe()
    with pytest.raises(ValueError, match="rope_order='after' is not one of"):
        c.replace(rope_order="after")
    for bad in (0.0, -1.0, float("inf"), float("nan"), "1e6"):
        with pytest.raises(ValueError, match="rope_theta"):
            c.replace(rope_theta=bad)


# --- centring: where a LayerNorm's mean error is counted (budgets.py, "Centring") ----------------

def _layer_norm_judged(case, out):
    """`out` judged as the run judges it: the centred floor and the budget at the case's kappa."""
    from normdiff.harness.data.budgets import budget_for
    from normdiff.harness.data.dtypes import get_format
    from normdiff.harness.engine import judge
    inputs = case.inputs()
    exact = oracle.evaluate(case.contract, inputs.arrays, inputs.num_heads)
    budget = budget_for(case.dtype, case.op, case.span, oracle.centring_condition(case.contract, inputs.arrays))
    return judge.judge(np.asarray(out), judge.reference_for(case, inputs, exact), get_format(case.dtype), budget)


def _mean_not_subtracted(case):
    """The ln-mean-not-subtracted mutant's output (its contract knob, through own NumPy)."""
    from normdiff.implementations import numpy_own
    return numpy_own.run(case.op, case.contract.replace(centre=False), case.inputs())


# eps = 1e-5 over a variance of 7e-10: u = +-0.0085, and two values at mean 6.6e-4 (fuzz, issue 15)
EPS_DOMINATED = "layer_norm@cohere/fp32/1x2/tiny_rms:1e-3/w=ones/b=zeros#2"


def test_kappa_is_mean_over_std_where_eps_dominates_the_variance():
    from normdiff.cases.model import Case
    case = Case.from_id(EPS_DOMINATED)
    x = case.inputs().arrays["x"].astype(np.float64)
    # the mean's error, over sqrt(var + eps), counted at rms(u) = sqrt(var / (var + eps)): mean|x| / std
    kappa = oracle.centring_condition(case.contract, case.inputs().arrays)
    assert kappa == pytest.approx(np.abs(x).mean() / x.std(), rel=1e-9)
    assert kappa > 20 * np.abs(x).mean() / np.sqrt(x.var() + case.contract.eps)  # the first version's


def test_the_eps_dominated_case_is_within_and_mean_not_subtracted_outside():
    torch = pytest.importorskip("torch")
    from normdiff.cases.model import Case
    from normdiff.implementations import torch_own
    case = Case.from_id(EPS_DOMINATED)
    correct = _layer_norm_judged(case, torch_own.run(case.op, case.contract, case.inputs()).to(torch.float32).numpy())
    # measured 10.6 ulp, budget 10.4 before (kappa over sqrt(var + eps)); 108 now
    assert correct.outcome in ("identical", "agree") and correct.max_ulp > 10.4, correct.max_ulp
    bug = _layer_norm_judged(case, _mean_not_subtracted(case))
    assert bug.outcome == "disagree" and bug.max_ulp > 1e5 * bug.tolerance_ulp


def test_a_constant_row_is_counted_at_the_error_a_legal_mean_leaves():
    from normdiff.cases.model import Case
    from normdiff.harness.data.budgets import centring_gamma
    case = Case.from_id("layer_norm@torch/bf16/1x1/normal/w=ones/b=zeros")
    arrays = case.inputs().arrays
    x = float(arrays["x"].astype(np.float64)[0, 0])
    # u = 0 and rms(u) = 0: the floor is g_1 |x| / sqrt(eps), not 0, and kappa is 1 / g_1, not infinite
    floor = oracle.centred_floor(case.contract, arrays)
    assert floor[0, 0] == pytest.approx(centring_gamma(1) * abs(x) / np.sqrt(case.contract.eps))
    assert oracle.centring_condition(case.contract, arrays) == pytest.approx(1 / centring_gamma(1))


def test_torch_layer_norm_on_constant_rows_is_within_and_mean_not_subtracted_outside():
    torch = pytest.importorskip("torch")
    from normdiff.cases.model import Case
    from normdiff.implementations import builtins
    case = Case.from_id("layer_norm@torch/bf16/1x1/normal/w=ones/b=zeros")
    # torch's CPU kernel computes x * rstd - mean * rstd: 4.8e-7 where the exact u is 0 (5.2e33 ulp
    # at rms(u) = 0 before); 32 ulp at the floor, budget 258 (at most 1 / u_bf16 = 256 there)
    out = builtins.functional_layer_norm(case.op, case.contract, case.inputs()).to(torch.float32).numpy()
    correct = _layer_norm_judged(case, out.astype(case.inputs().arrays["x"].dtype))
    assert correct.outcome == "agree" and 16 < correct.max_ulp < correct.tolerance_ulp, correct.max_ulp
    bug = _layer_norm_judged(case, _mean_not_subtracted(case))
    assert bug.outcome == "disagree" and bug.max_ulp > 1e5 * bug.tolerance_ulp


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_wider_constant_rows_too(dtype):
    torch = pytest.importorskip("torch")
    from normdiff.harness.data.budgets import budget_for
    from normdiff.harness.data.dtypes import get_format
    from normdiff.harness.engine import judge
    fmt = get_format(dtype)
    contract = get_contract("layer_norm", "torch")
    rng = np.random.default_rng(0)
    x = np.repeat(rng.normal(0, 3, (32, 1)), 48, axis=1).astype(fmt.np_dtype)  # each row one value
    w = rng.normal(1, 0.5, 48).astype(fmt.np_dtype)
    arrays = {"x": x, "weight": w, "bias": np.zeros(48, fmt.np_dtype)}
    exact = oracle.evaluate(contract, arrays)
    ref = judge.Reference(exact, fmt, floor=oracle.centred_floor(contract, arrays))
    budget = budget_for(dtype, "layer_norm", 48, oracle.centring_condition(contract, arrays))
    t = torch.from_numpy(x.astype(np.float32)).to(getattr(torch, dtype))
    tw = torch.from_numpy(w.astype(np.float32)).to(t.dtype)
    out = torch.nn.functional.layer_norm(t, (48,), tw, torch.zeros_like(tw), contract.eps).float().numpy()
    assert judge.judge(out.astype(fmt.np_dtype), ref, fmt, budget).outcome in ("identical", "agree")
    bug = (x.astype(np.float64) / np.sqrt(contract.eps) * w).astype(fmt.np_dtype)  # mean not subtracted
    assert judge.judge(bug, ref, fmt, budget).max_ulp > 100 * budget
