"""A quantizing norm judged in its format's units (engine/quant_judge.py): every correct pipeline
inside the brackets, each way of being wrong outside them, in the measure that says so."""
import numpy as np
import pytest

from normdiff.cases.model import Case
from normdiff.harness.data.conventions import defining
from normdiff.harness.engine import quant_judge, runner
from normdiff.implementations import numpy_own

QUANT_OPS = ("rms_norm_quant", "add_rms_norm_quant", "rms_norm_quant_static", "add_rms_norm_quant_static")
QUANT_CONVENTIONS = [(op, c) for op in QUANT_OPS for c in defining(op)]
TENSOR_SCALES = ("fp8-amax4", "fp8-amax1", "nvfp4-amax4", "nvfp4-amax64")


def case(op="rms_norm_quant", convention="sglang-fp8", dtype="bfloat16", regime="normal", weight="trained",
         tensor_scale="fp8-amax4"):
    choices = {"weight": weight} | ({"residual": "large"} if op.startswith("add_") else {})
    choices |= {"tensor_scale": tensor_scale} if op.endswith("_static") else {}
    return Case.of(op, convention, dtype, "8x1024", regime, **choices)


def judged(c: Case, out):
    """(q's measurement, scale's) of `out`, a call's (q, scale[, residual_out])."""
    p = runner.prepare(c)
    ref = p.expected["q"].ref
    return quant_judge.judge_q(out[0], out[1], ref), quant_judge.judge_scale(out[1], ref)


def own(c: Case, **knobs):
    """NumPy's own (q, scale, ...) of the case, under its contract with `knobs` turned."""
    return numpy_own.run(c.op, c.contract.replace(**knobs), c.inputs())


@pytest.mark.parametrize("op,convention", QUANT_CONVENTIONS)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_numpys_own_is_inside_every_bracket(op, convention, dtype):
    scales = TENSOR_SCALES if op.endswith("_static") else TENSOR_SCALES[:1]
    for regime, scale in ((r, s) for r in ("normal", "outliers", "zero_rows", "tiny_rms:1e-3") for s in scales):
        c = case(op, convention, dtype, regime, tensor_scale=scale)
        q, s = judged(c, own(c))
        assert q.outcome in ("identical", "agree") and s.outcome in ("identical", "agree"), (regime, q.detail, s.detail)
        assert q.off_chain == 0.0 and q.max_ulp <= q.tolerance_ulp
        if c.contract.quant_input == "float32" or dtype == "float32":  # float32 y: within one code
            assert q.tolerance_ulp <= 1.0, (regime, q.tolerance_ulp)


def test_a_reciprocal_multiply_is_legal_and_an_extra_bf16_rounding_is_not_under_a_float32_contract():
    c = case(convention="sglang-fp8")  # y kept in float32
    inputs = c.inputs()
    y32 = numpy_own._norm(c.contract, inputs, inputs.arrays["x"], np.float32)  # the float32 y
    q, s = own(c)
    by_reciprocal = np.clip(y32 * (np.float32(1.0) / s), -448, 448).astype(q.dtype)  # x * (1 / s), SGLang's way
    assert all(m.outcome in ("identical", "agree") for m in judged(c, (by_reciprocal, s)))
    q2, s2 = judged(c, own(c, quant_input="input"))  # the bug: y rounded to bf16 first
    assert q2.outcome == "disagree" and 0.005 < q2.off_chain < 0.2, q2.detail
    assert s2.outcome == "disagree"
    # under vLLM's contract, which rounds y to bf16 itself, that code is right
    v = case(convention="vllm-fp8")
    assert all(m.outcome in ("identical", "agree") for m in judged(v, own(v)))


def test_a_scale_off_by_a_constant_is_the_scales_failure_and_q_is_judged_with_it():
    c = case()
    inputs = c.inputs()
    q, s = own(c)
    doubled = (s * 2).astype(np.float32)
    y32 = numpy_own._norm(c.contract, inputs, inputs.arrays["x"], np.float32)
    requantized = np.clip(y32 / doubled, -448, 448).astype(q.dtype)  # y quantized with the wrong scale
    mq, ms = judged(c, (requantized, doubled))
    assert ms.outcome == "disagree" and ms.scale_ratio == pytest.approx(2.0) and "median 2 x" in ms.detail
    assert mq.outcome in ("identical", "agree"), mq.detail  # consistent with its own scale: not counted twice


def test_nan_where_the_format_has_a_value_is_a_nan_mismatch_and_saturation_is_checked():
    c = case(convention="ocp-mxfp8", dtype="float32")
    q, s = own(c, saturate=False)  # block maxima past 464 become NaN in E4M3FN
    mq, _ = judged(c, (q, s))
    assert mq.outcome == "nan_mismatch" and mq.nan_count > 0 and "float8_e4m3fn max 448" in mq.detail


def test_scales_come_as_float32_e8m0_or_its_byte_in_any_row_layout():
    c = case(convention="mxfp8")
    q, s = own(c)
    as_e8m0 = s.astype(np.float32).astype(quant_judge.quant.E8M0)
    byte = (np.log2(s).astype(np.int64) + 127).astype(np.uint8)
    for given in (s, as_e8m0, byte, s.reshape(-1)):
        mq, ms = judged(c, (q, given))
        assert ms.outcome in ("identical", "agree") and mq.outcome in ("identical", "agree"), str(given.dtype)
    with pytest.raises(ValueError, match="one scale per block: shape"):
        quant_judge.judge_scale(s[:, :3], runner.prepare(c).expected["q"].ref)


def test_the_own_implementations_emax_table_is_the_exact_maths():
    # numpy_own keeps its own table (a repro script runs it alone); torch_own and jax_own read it
    from normdiff.harness.data import quant
    from normdiff.harness.data.ops import quantize

    assert numpy_own.EMAX == {name: quantize.emax(fmt) for name, fmt in quant.FORMATS.items()}


def test_a_given_scale_is_exact_and_nvfp4s_block_scale_is_judged_in_e4m3_steps():
    """A static scale is the case's own: any other value is the scale's failure. NVFP4's E4M3 block
    scales come as float8_e4m3fn, as their bytes or as numbers; one E4M3 step up on a block is out
    of the bracket (the legal float32 roundings of g * amax / 6 move it only at a tie)."""
    import ml_dtypes

    c = case("rms_norm_quant_static", "vllm-fp8-static")
    q, s = own(c)
    assert all(m.outcome in ("identical", "agree") for m in judged(c, (q, s[:1, :1])))  # one value for the tensor
    _, wrong = judged(c, (q, s * np.float32(1.01)))
    assert wrong.outcome == "disagree" and wrong.off_chain == 1.0
    n = case("rms_norm_quant_static", "nvfp4", tensor_scale="nvfp4-amax4")
    q, s = own(n)
    as_bytes = s.astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    for given in (s.astype(ml_dtypes.float8_e4m3fn), as_bytes, s):
        assert all(m.outcome in ("identical", "agree") for m in judged(n, (q, given)))
    bumped = as_bytes.copy()
    bumped[0, 0] += 1  # the next E4M3 value up
    q_m, s_m = judged(n, (q, bumped))
    assert s_m.outcome == "disagree" and s_m.max_ulp == 1.0, s_m.detail


def test_under_a_zero_scale_any_finite_code_is_legal_and_nan_is_not():
    """Each code of a block whose scale is 0 dequantizes to 0 (Transformer Engine's NVFP4 writes
    +-6 there, TensorRT-LLM's 0): the judge takes any finite one, and still flags NaN."""
    c = case("rms_norm_quant", "sglang-fp8", regime="zero_rows")
    q, s = own(c)
    zero = (s.reshape(-1) == 0)
    assert zero.any()
    saturated = q.astype(np.float32)
    saturated[zero] = 448.0
    m, _ = judged(c, (saturated.astype(q.dtype), s))
    assert m.outcome in ("identical", "agree") and m.off_chain == 0.0 and m.max_ulp <= m.tolerance_ulp <= 1.0
    saturated[zero] = np.nan
    m, _ = judged(c, (saturated.astype(q.dtype), s))
    assert m.outcome == "nan_mismatch"
