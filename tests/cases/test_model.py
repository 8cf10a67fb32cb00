"""Case identity, determinism and the exact bits handed to implementations."""
import ml_dtypes
import numpy as np
import pytest

from normdiff.cases import suites
from normdiff.cases.model import Case


def test_every_default_case_id_round_trips():
    for case in suites.load("default").cases:
        assert Case.from_id(case.id) == case


def test_id_and_seed_are_stable_across_releases():
    # a replayed report row must rebuild the same inputs: pin one id, seed and input bits
    case = Case.of("rms_norm", "qwen3", "bfloat16", "8x1024", regime="tiny_rms:1e-3", weight="trained")
    assert case.id == "rms_norm@qwen3/bf16/8x1024/tiny_rms:1e-3/w=trained"
    assert case.seed == 2890309760
    inputs = case.inputs().arrays
    assert inputs["x"].dtype == np.dtype(ml_dtypes.bfloat16) and inputs["x"].shape == (8, 1024)
    assert inputs["x"].view(np.uint16)[0, :4].tolist() == [15029, 47706, 15039, 47559]
    assert inputs["weight"].view(np.uint16)[:3].tolist() == [15886, 16034, 16110]


def test_same_inputs_across_ops_conventions_and_dtypes():
    a = Case.of("rms_norm", "qwen3", "float32", "4x64", regime="mean_shift:3", weight="trained")
    b = Case.of("rms_norm", "olmo2", "bfloat16", "4x64", regime="mean_shift:3", weight="trained")
    xa, xb = a.inputs().arrays["x"], b.inputs().arrays["x"]
    np.testing.assert_array_equal(xa.astype(ml_dtypes.bfloat16), xb)  # one draw, two casts
    np.testing.assert_array_equal(a.inputs().arrays["weight"].astype(ml_dtypes.bfloat16), b.inputs().arrays["weight"])


def test_weights_do_not_depend_on_the_input_regime():
    a = Case.of("rms_norm", "qwen3", "float32", "4x64", regime="normal", weight="trained")
    b = Case.of("rms_norm", "qwen3", "float32", "4x64", regime="outliers", weight="trained")
    np.testing.assert_array_equal(a.inputs().arrays["weight"], b.inputs().arrays["weight"])
    assert not np.array_equal(a.inputs().arrays["x"], b.inputs().arrays["x"])


def test_regimes_do_what_they_say():
    x = Case.of("rms_norm", "qwen3", "float32", "8x1024", regime="tiny_rms:1e-4").draw_float64()["x"]
    assert np.sqrt(np.mean(x**2)) == pytest.approx(1e-4, rel=0.05)
    x = Case.of("rms_norm", "qwen3", "float32", "8x64", regime="zero_rows").draw_float64()["x"]
    assert (x[::2] == 0).all() and (x[1::2] != 0).any()
    x = Case.of("rms_norm", "qwen3", "float16", "8x64", regime="large").draw_float64()["x"]
    assert np.abs(x).min() >= 300 and np.abs(x).max() <= 1000
    x = Case.of("rms_norm", "qwen3", "float32", "64x64", regime="mean_shift:3").draw_float64()["x"]
    assert x.mean() == pytest.approx(3, abs=0.1)
    w = Case.of("rms_norm", "qwen3.5", "float32", "4x4096", weight="trained").draw_float64()["weight"]
    assert w.mean() == pytest.approx(0.24, abs=0.02) and -0.11 <= w.min() and w.max() <= 1.0
    heads = Case.of("qk_norm", "qwen3", "float32", "64x8x64", regime="head_scales:logspace").draw_float64()["x"]
    rms = np.sqrt(np.mean(heads.reshape(64, 8, 64) ** 2, axis=(0, 2)))
    assert rms[-1] / rms[0] == pytest.approx(100, rel=0.1)
    z = Case.of("gated_rms_norm", "qwen3.5", "float32", "64x64", gate="closed").draw_float64()["gate"]
    assert z.mean() == pytest.approx(-4, abs=0.1)


def test_olmo2_qk_weight_spans_the_full_vector():
    per_head = Case.of("qk_norm", "qwen3", "float32", "2x4x16").inputs().arrays["weight"]
    full = Case.of("qk_norm", "olmo2", "float32", "2x4x16").inputs().arrays["weight"]
    assert per_head.shape == (16,) and full.shape == (64,)


@pytest.mark.parametrize("bad, message", [
    (dict(op="batch_norm"), "unknown op 'batch_norm'"),
    (dict(convention="mistral"), "unknown convention 'mistral'"),
    (dict(op="gated_rms_norm", convention="qwen3", gate="open"), "does not define 'gated_rms_norm'"),
    (dict(regime="head_scales"), "needs an op with heads"),
    (dict(regime="tiny"), "unknown input regime 'tiny'"),
    (dict(regime="normal:3"), "takes no parameter"),
    (dict(weight="huge"), "unknown weight regime 'huge'"),
    (dict(dtype="int8"), "unknown dtype 'int8'"),
    (dict(gate="open"), "rms_norm draws no gate"),
    (dict(shape="2x2x8"), "rms_norm shapes are rows x width"),
])
def test_bad_cases_name_the_problem(bad, message):
    args = dict(op="rms_norm", convention="qwen3", dtype="float32", shape="2x8") | bad
    with pytest.raises(ValueError, match=message):
        Case.of(**args)


def test_malformed_id():
    with pytest.raises(ValueError, match="malformed case id"):
        Case.from_id("rms_norm/qwen3")


def test_rope_positions_are_int64_deterministic_and_round_trip():
    case = Case.of("qk_norm_rope", "qwen3", "bfloat16", "8x8x128", regime="head_scales:lognormal", weight="trained")
    assert case.id == "qk_norm_rope@qwen3/bf16/8x8x128/head_scales:lognormal/w=trained"
    assert Case.from_id(case.id) == case
    arrays = case.inputs().arrays
    assert list(arrays) == ["x", "weight", "positions"]  # the op's call order
    positions = arrays["positions"]
    assert positions.dtype == np.int64 and positions.shape == (8,)  # one per row (token), not cast
    assert (np.diff(positions) > 0).all() and 0 <= positions.min() and positions.max() < 8192
    # pinned: a replayed report row must rebuild the same positions
    assert positions.tolist() == Case.from_id(case.id).inputs().arrays["positions"].tolist()
    assert positions.tolist() == [205, 482, 785, 875, 5597, 6504, 6855, 6947]
    assert arrays["weight"].shape == (128,)  # per head, shared by the heads
    # the same positions in every dtype (they come from the input configuration's seed), other
    # positions for another sample
    fp32 = Case.of("qk_norm_rope", "qwen3", "float32", "8x8x128", "head_scales:lognormal", weight="trained").inputs()
    np.testing.assert_array_equal(fp32.arrays["positions"], positions)
    other = Case.of("qk_norm_rope", "qwen3", "bfloat16", "8x8x128", "head_scales:lognormal", sample=1, weight="trained")
    assert not np.array_equal(other.inputs().arrays["positions"], positions)
    # as_float64 converts the floats only
    as64 = case.inputs().as_float64()
    assert as64["x"].dtype == np.float64 and as64["positions"].dtype == np.int64
    # ops without positions get none
    assert "positions" not in Case.of("qk_norm", "qwen3", "float32", "2x4x16").inputs().arrays


def test_rope_cases_need_an_even_head_dim():
    with pytest.raises(ValueError, match="head_dim must be even"):
        Case.of("qk_norm_rope", "qwen3", "float32", "2x4x15")
    with pytest.raises(ValueError, match="does not define 'qk_norm_rope'"):
        Case.of("qk_norm_rope", "olmo2", "float32", "2x4x16")
