"""add_rms_norm_quant_static: the fused residual add, RMSNorm and quantization under a per-tensor
scale the caller gives (vLLM's fused_add_rms_norm_static_fp8_quant, FlashInfer's
fused_add_rmsnorm_quant): h = x + residual, q = quantized rms_norm(h) * w; returns (q, scale,
residual_out = h). vLLM's static kernel rounds h to the input dtype before the variance (z = input +
residual in scalar_t), FlashInfer keeps it in float32 for the norm. Forward only; ops/quantize.py."""
from normdiff.harness.data import knobs as K
from normdiff.harness.data.ops import quantize
from normdiff.harness.data.ops.record import RESIDUAL, RESIDUAL_SUM, SINGLE, WEIGHT, WEIGHTED_KNOBS, X, Op
from normdiff.harness.data.ops.rms_norm_quant_static import CONVENTIONS, TENSOR_SCALE

SUM = {"vllm-fp8-static": {"residual_dtype": "input"}, "flashinfer-fp8-static": {"residual_dtype": "float32"}}

OP = Op("add_rms_norm_quant_static", "h = x + residual; q = rms_norm(h) * w quantized under the caller's "
        "per-tensor scale; returns (q, scale, residual_out = h)  (vLLM, FlashInfer)",
        (X, RESIDUAL, WEIGHT, TENSOR_SCALE), ("x", "residual", "weight", "tensor_scale", "eps"),
        WEIGHTED_KNOBS + (K.RESIDUAL, K.QUANT, K.TENSOR_SCALE), module_call=None, rounding=RESIDUAL_SUM,
        relaxed=(("residual_dtype", "float32", SINGLE),), results=("q", "scale", "residual_out"),
        exact=quantize.evaluate, exact_results=quantize.results, vjp=quantize.no_vjp, describe=quantize.describe,
        backward=False, order=9,
        conventions=tuple((name, summary, {**knobs, **SUM[name]}) for name, summary, knobs in CONVENTIONS
                          if name in SUM))
