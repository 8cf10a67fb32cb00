"""add_rms_norm_quant: the fused residual add, RMSNorm and quantization (vLLM's
fused_add_rms_norm with its quant epilogue, SGLang's fused_add_rmsnorm_quant_fp8, aiter's
add_rmsnorm_quant): h = x + residual, y = rms_norm(h) * w, q = y / scale in the format; returns (q,
scale, residual_out = h). Each kernel read keeps h in float32 for the variance and writes it back
rounded (residual_dtype "float32"). Forward only; the maths is ops/quantize.py."""
from normdiff.harness.data import knobs as K
from normdiff.harness.data.ops import quantize
from normdiff.harness.data.ops.record import RESIDUAL, RESIDUAL_SUM, SINGLE, WEIGHT, WEIGHTED_KNOBS, X, Op
from normdiff.harness.data.ops.rms_norm_quant import CONVENTIONS

FUSED_ADD = ("vllm-fp8", "vllm-int8", "aiter-fp8", "sglang-fp8")  # the kernels that fuse the add too
FLOAT32_SUM = {"residual_dtype": "float32"}

OP = Op("add_rms_norm_quant", "h = x + residual; q = quantized rms_norm(h) * w; returns (q, scale, residual_out = h)  "
        "(vLLM, SGLang, aiter)",
        (X, RESIDUAL, WEIGHT), ("x", "residual", "weight", "eps"), WEIGHTED_KNOBS + (K.RESIDUAL, K.QUANT),
        module_call=("x", "residual"), rounding=RESIDUAL_SUM, relaxed=(("residual_dtype", "float32", SINGLE),),
        results=("q", "scale", "residual_out"), exact=quantize.evaluate, exact_results=quantize.results, vjp=quantize.no_vjp,
        describe=quantize.describe, backward=False, order=9,
        conventions=tuple((name, summary, {**knobs, **FLOAT32_SUM}) for name, summary, knobs in CONVENTIONS
                          if name in FUSED_ADD))
