"""rms_norm_quant_static: RMSNorm fused with quantization under a per-tensor scale the caller gives
(one float32 per tensor, `tensor_scale`): vLLM's rms_norm_static_fp8_quant and FlashInfer's
rmsnorm_quant divide y by a calibrated FP8 scale; NVFP4 (vLLM's scaled_fp4_quant, TensorRT-LLM's
cvt_warp_fp16_to_fp4) takes the tensor's global encode scale g = 448 * 6 / amax(tensor) and computes a
block scale e4m3(g * amax / 6) per 16 values. The scale is an input, which is why this is an op of its
own beside rms_norm_quant (whose scales come from each row): a user's function takes it. Returns (q,
scale): the given scale, or NVFP4's E4M3 block scales. The maths is ops/quantize.py; forward only."""
import numpy as np

from normdiff.harness.data import knobs as K
from normdiff.harness.data.ops import quantize
from normdiff.harness.data.ops.record import CASE, ROUNDS_ONCE, WEIGHT, WEIGHTED_KNOBS, X, Op, Operand


def _constant(value: float):
    """A per-tensor scale's draw: one calibrated value (the same for every case, so that cases of a
    shape batch together: a caller's static scale does not change from call to call)."""
    return lambda rng, shape: np.full(shape, value)


# The scales a case gives, named by the tensor amax they were calibrated for (a norm's output with
# trained weights reaches |y| ~ 4; rows past the calibration saturate, as a static scale's do)
TENSOR_SCALE = Operand(
    "tensor_scale", per=CASE, dtype="float32", length=1, table="tensor_scale", id_key="s",
    suite_key="tensor_scales", column="tensor_scale", default="fp8-amax4", stream=7,
    draws=(("fp8-amax4", _constant(4.0 / 448.0)),      # an FP8 scale for |y| <= 4 (not a power of two)
           ("fp8-amax1", _constant(1.0 / 448.0)),      # calibrated too low: much of each row saturates
           ("nvfp4-amax4", _constant(448.0 * 6.0 / 4.0)),  # NVFP4's global scale for a tensor amax of 4
           ("nvfp4-amax64", _constant(448.0 * 6.0 / 64.0))))  # a loose one: small blocks' scales subnormal

VLLM = {"cast": "llama", "quant_input": "input"}  # bf16(bf16(x * rms) * w), then quantized
CONVENTIONS = (
    ("vllm-fp8-static", "vLLM rms_norm_static_fp8_quant: y = bf16(bf16(x*rms)*w), q = y * (1/scale) saturated "
                        "to FP8 E4M3FN, scale the caller's per-tensor FP8 scale (csrc/layernorm_quant_kernels.cu)",
     {**VLLM, "tensor_scale": "divisor"}),
    ("flashinfer-fp8-static", "FlashInfer rmsnorm_quant: y in float32 (one chained product), q = y * (1/scale) "
                              "saturated to FP8 E4M3FN, scale the caller's (include/flashinfer/norm.cuh)",
     {"tensor_scale": "divisor"}),
    ("nvfp4", "NVFP4 as vLLM's scaled_fp4_quant and TensorRT-LLM's cvt_warp_fp16_to_fp4 quantize the bf16 norm "
              "output: blocks of 16 E2M1 values, block scale e4m3(g * amax / 6) saturating, g the caller's global "
              "scale 448*6/amax(tensor), q = y * g / scale (vLLM tests/kernels/quantization/test_nvfp4_quant.py)",
     {**VLLM, "quant_dtype": "float4_e2m1fn", "quant_max": 6.0, "quant_group": 16, "scale_rounding": "e4m3",
      "tensor_scale": "global"}),
)

OP = Op("rms_norm_quant_static", "y = rms_norm(x) * w quantized under the caller's per-tensor scale: static FP8 "
        "(q = y / scale) or NVFP4's global scale (E4M3 block scales); returns (q, scale)  (vLLM, FlashInfer)",
        (X, WEIGHT, TENSOR_SCALE), ("x", "weight", "tensor_scale", "eps"), WEIGHTED_KNOBS + (K.QUANT, K.TENSOR_SCALE),
        module_call=None, relaxed=ROUNDS_ONCE, results=("q", "scale"), exact=quantize.evaluate,
        exact_results=quantize.results,
        vjp=quantize.no_vjp, describe=quantize.describe, conventions=CONVENTIONS, backward=False, order=8)
