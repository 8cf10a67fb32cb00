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
