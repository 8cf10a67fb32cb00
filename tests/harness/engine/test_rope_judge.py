"""Where qk_norm_rope's ULPs are counted: at the magnitude of each rotated pair, not at |y| (an
element of a rotation can cancel to ~0 while its operands do not). Every other op is unchanged."""
import ml_dtypes
import numpy as np

from normdiff.harness.data.dtypes import get_format
from normdiff.harness.data.ops import OPS
from normdiff.harness.engine.judge import Reference, judge, ulp_magnitude

BF16 = get_format("bfloat16")
HEADS, DIM = 2, 8


def rotated_pairs() -> np.ndarray:
    """(3, HEADS * DIM): pairs (i, i + DIM/2) of magnitude ~1.5, one element of one pair ~1e-4."""
    rng = np.random.default_rng(0)
    angle = rng.uniform(0, 2 * np.pi, (3, HEADS, DIM // 2))
    r = rng.uniform(1.1, 1.9, (3, HEADS, DIM // 2))
    ref = np.concatenate([r * np.cos(angle), r * np.sin(angle)], axis=-1)
    ref[0, 0, 0], ref[0, 0, DIM // 2] = 1e-4, 1.5  # y_0 cancelled to ~0, its partner carries r
    return ref.reshape(3, HEADS * DIM)


def test_pair_magnitude_is_the_rotated_pair():
    ref = rotated_pairs()
    mag = ulp_magnitude(ref, "qk_norm_rope", HEADS)
    heads = ref.reshape(3, HEADS, DIM)
    pair = np.hypot(heads[..., : DIM // 2], heads[..., DIM // 2:])
    np.testing.assert_allclose(mag.reshape(3, HEADS, DIM), np.concatenate([pair, pair], -1), rtol=1e-15)
    assert (mag >= np.abs(ref)).all()
    assert mag[0, 0] == np.hypot(1e-4, 1.5)


def test_other_ops_keep_abs_ref():
    ref = rotated_pairs()
    for op in ("", "rms_norm", "qk_norm", "gated_rms_norm", "l2_norm"):
        np.testing.assert_array_equal(ulp_magnitude(ref, op, HEADS), np.abs(ref))
    assert {op.name for op in OPS.values() if op.ulp_at != "value"} == {"qk_norm_rope"}


def test_an_operand_ulp_on_a_cancelled_element_agrees_for_rope_only():
    ref = rotated_pairs()
    out = BF16.round(ref)
    out[0, 0] += BF16.ulp(1.5)  # one ulp of the operands: ~60000 ulp of the 1e-4 result
    out = out.astype(ml_dtypes.bfloat16)
    rope = judge(out, ref, BF16, 2.0, HEADS, "qk_norm_rope")
    assert rope.outcome == "agree" and 0.5 < rope.max_ulp <= 1.5
    plain = judge(out, ref, BF16, 2.0, HEADS)
    assert plain.outcome == "disagree" and plain.max_ulp > 1e4
    # while three ulps of the pair are still three ulps
    worse = BF16.round(ref)
    worse[0, 0] += 3 * BF16.ulp(1.5)
    assert judge(worse.astype(ml_dtypes.bfloat16), ref, BF16, 2.0, HEADS, "qk_norm_rope").outcome == "disagree"


def test_a_reference_prepared_without_the_op_is_judged_by_the_op_rule():
    ref = rotated_pairs()
    out = BF16.round(ref)
    out[0, 0] += BF16.ulp(1.5)
    out = out.astype(ml_dtypes.bfloat16)
    prepared = Reference(ref, BF16, HEADS)  # as the runner prepares it, once per case
    a = judge(out, prepared, BF16, 2.0, HEADS, "qk_norm_rope")
    b = judge(out, Reference(ref, BF16, HEADS, "qk_norm_rope"), BF16, 2.0, HEADS, "qk_norm_rope")
    assert a.as_row() == b.as_row() and a.outcome == "agree"
    # other ops judge a prepared reference as it is
    assert judge(out, prepared, BF16, 2.0, HEADS, "qk_norm").as_row() == judge(out, ref, BF16, 2.0, HEADS).as_row()


def test_non_finite_partners_count_as_zero():
    ref = rotated_pairs()
    ref[1, 0] = np.nan
    mag = ulp_magnitude(ref, "qk_norm_rope", HEADS)
    assert np.isnan(mag[1, 0]) and mag[1, DIM // 2] == abs(ref[1, DIM // 2])


# --- a faithfully rounded pow: each frequency judged at the nearer float32 neighbour of its power ---

def _rope_case_judged(case_id, out_of):
    """The run's judgement of implementation function `out_of(case)` on a qk_norm_rope case."""
    from normdiff.cases.model import Case
    from normdiff.harness.engine.runner import prepare
    case = Case.from_id(case_id)
    p = prepare(case)
    e = p.expected["y"]
    return judge(out_of(case, p.inputs), e.ref, get_format(case.dtype), e.budget, case.num_heads, case.op)


ODD_HALF = "qk_norm_rope@qwen3/fp32/1x1x42/normal/w=ones"  # torch's pow is an ulp off at frequency 6


def test_torch_rope_at_an_odd_half_head_dim_is_within_its_budget():
    import pytest
    torch = pytest.importorskip("torch")
    from normdiff.implementations import torch_own

    def torch_rope(case, inputs):
        return torch_own.run(case.op, case.contract, inputs).to(torch.float32).numpy()
    # 40.5 float32 ULPs against the correctly rounded frequencies (budget 39); 1.18 at the nearer
    m = _rope_case_judged(ODD_HALF, torch_rope)
    assert m.outcome == "agree" and m.max_ulp < 2, m.max_ulp


def test_qk_norm_after_rope_is_still_far_outside():
    from normdiff.implementations import numpy_own

    def after_rope(case, inputs):
        return numpy_own.run(case.op, case.contract.replace(rope_order="rope_then_norm"), inputs)
    m = _rope_case_judged("qk_norm_rope@qwen3/fp32/4x2x42/normal/w=trained", after_rope)
    assert m.outcome == "disagree" and m.max_ulp > 1e5 * m.tolerance_ulp


def test_one_choice_per_frequency_not_per_element():
    # an output that takes the nearest power in one row and the other in the next is not one
    # inv_freq buffer: judged against either, one of its rows is off by the angle's move
    from normdiff.cases.model import Case
    from normdiff.harness.engine import judge as J, oracle
    case = Case.from_id("qk_norm_rope@qwen3/fp32/2x1x42/normal/w=ones")
    inputs = case.inputs()
    exact = oracle.evaluate(case.contract, inputs.arrays, 1)
    other = oracle.evaluate(case.contract, inputs.arrays, 1, power="other")
    ref = J.reference_for(case, inputs, exact)
    fmt = get_format("float32")
    for out, ok in ((exact, True), (other, True), (np.stack([exact[0], other[1]]), False)):
        m = judge(fmt.round(out).astype(np.float32), ref, fmt, 39.0, 1, case.op)
        assert (m.outcome in ("identical", "agree")) == ok, (ok, m.max_ulp)


# --- the backward: dw per frequency, dx (whose projection term sums every frequency) at the choice ---

BACKWARD = "qk_norm_rope@qwen3/fp32/2x2x124/normal/w=trained/dy=normal"  # torch's pow: an ulp off at D = 124


def _gradients_judged(grads_of, case_id=BACKWARD):
    """{operand: Measurement} of the gradients `grads_of(case, inputs, dy)` returns, as run judges them."""
    from normdiff.cases.model import Case
    from normdiff.harness.engine.runner import prepare
    p = prepare(Case.from_id(case_id + "/out=dx"))
    fmt = get_format(p.case.dtype)
    grads = grads_of(p.case, p.inputs, p.dy)
    return {name: judge(fmt.round(grads[name]).astype(np.float32), e.ref, fmt, e.budget, p.case.num_heads,
                        operand=name) for name, e in p.expected.items()}


def _exact_gradients(power):
    from normdiff.harness.engine.vjp import vjp
    return lambda case, inputs, dy: vjp(case.contract, inputs.arrays, dy, inputs.num_heads, power=power)


def test_gradients_at_a_faithful_pow_are_judged_at_its_frequencies():
    # one frequency at the other neighbour of its power moves dx and dw by position x ulp(inv) there;
    # dx's projection term carries that into every element of the head, so dx is judged at the exact
    # gradient of the whole choice, not element by element
    choice = np.zeros(62, dtype=bool)
    choice[[5, 40]] = True
    for name, m in _gradients_judged(_exact_gradients(choice)).items():
        assert m.outcome in ("identical", "agree") and m.max_ulp <= 0.5, (name, m.max_ulp)
    # rows of one call at different choices are not one inv_freq buffer
    from normdiff.harness.engine.vjp import vjp

    def mixed_rows(case, inputs, dy):
        a, b = (vjp(case.contract, inputs.arrays, dy, inputs.num_heads, power=p) for p in ("nearest", "other"))
        return {"x": np.concatenate([a["x"][:1], b["x"][1:]]), "weight": a["weight"]}
    assert _gradients_judged(mixed_rows)["x"].outcome == "disagree"


def test_torch_rope_backward_at_a_head_dim_where_its_pow_is_off_agrees():
    import pytest
    torch = pytest.importorskip("torch")
    from normdiff.implementations import torch_own

    def torch_grads(case, inputs, dy):
        grads = torch_own.backward(case.op, case.contract, inputs, dy)
        return {name: g.to(torch.float64).numpy() for name, g in grads.items()}
    # against the correctly rounded frequencies alone: dw 423 ulp (budget 89) on 1x1x124
    for name, m in _gradients_judged(torch_grads).items():
        assert m.outcome in ("identical", "agree") and m.max_ulp < 4, (name, m.max_ulp)


def test_a_flip_whose_projection_shift_hides_the_own_one_is_still_found():
    # torch's pow is off at frequency 2 of D = 14 (fuzz's minimal case: 122 ulp of dx against 89,
    # judged at the correctly rounded frequencies); flipping every frequency at once moves dx by
    # frequency 1's ~2200 ulp everywhere, so no per-frequency comparison with it finds frequency 2
    choice = np.zeros(7, dtype=bool)
    choice[2] = True
    judged = _gradients_judged(_exact_gradients(choice), "qk_norm_rope@qwen3/fp32/3x8x14/normal/w=ones/dy=normal")
    assert all(m.max_ulp <= 0.5 for m in judged.values()), {n: m.max_ulp for n, m in judged.items()}
