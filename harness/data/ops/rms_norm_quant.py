"""rms_norm_quant: RMSNorm fused with the quantization of its output for the next matmul, as vLLM,
SGLang, ROCm's aiter, FlashInfer and TensorRT-LLM fuse it for FP8 / INT8 / MX inference: y =
rms_norm(x) * w, then q = y / scale rounded once to the format, with one scale per row or per block of
columns; returns (q, scale). Its maths is ops/quantize.py; the conventions below are the real
contracts, each with the file it was read from (CATALOGUE.md, "Quantizing norms"). Forward only."""
from normdiff.harness.data import knobs as K
from normdiff.harness.data.ops import quantize
from normdiff.harness.data.ops.record import ROUNDS_ONCE, WEIGHT, WEIGHTED_KNOBS, X, Op

FP8_MIN_SCALE = 1.0 / (448.0 * 512.0)  # vLLM's min_scaling_factor for FP8 (csrc/quantization/utils.cuh)
FLT_EPSILON = 2.0 ** -23  # its min_scaling_factor for INT8

# (convention, summary with its source, knobs): the norm's knobs, then the quantizer's
VLLM = {"cast": "llama", "quant_input": "input"}  # bf16(bf16(x * rms) * w), then quantized
CONVENTIONS = (
    ("vllm-fp8", "vLLM rms_norm_dynamic_per_token_quant: y = bf16(bf16(x*rms)*w), per-token FP8 E4M3FN, "
                 "scale = max(amax/448, 1/(448*512)), q = y / scale (csrc/quantization/fused_kernels/"
                 "layernorm_utils.cuh)", {**VLLM, "scale_floor": FP8_MIN_SCALE}),
    ("vllm-fp8-rocm", "vLLM's ROCm build of it: FP8 E4M3FNUZ with 224 as the max, not the format's 240 "
                      "(quant_type_max for Float8_e4m3fnuz, csrc/quantization/utils.cuh)",
     {**VLLM, "quant_dtype": "float8_e4m3fnuz", "quant_max": 224.0, "scale_floor": 1.0 / (224.0 * 512.0)}),
    ("vllm-int8", "vLLM rms_norm_dynamic_per_token_quant to INT8: scale = max(amax/127, FLT_EPSILON), "
                  "q = rint(y * (1/scale)) saturated to [-128, 127] (layernorm_utils.cuh)",
     {**VLLM, "quant_dtype": "int8", "quant_max": 127.0, "scale_floor": FLT_EPSILON}),
    ("vllm-fp8-group", "vLLM rms_norm_per_block_quant: the per-token kernel with one FP8 scale per group "
                       "of 128 columns (layernorm_utils.cuh, group_size 128)",
     {**VLLM, "quant_group": 128, "scale_floor": FP8_MIN_SCALE}),
    ("aiter-fp8", "ROCm aiter rmsnorm_quant: y in float32, per-token FP8 E4M3FNUZ, amax floored at 1e-10, "
                  "scale = amax/240 (csrc/kernels/rmsnorm_quant_kernels.cu)",
     {"quant_dtype": "float8_e4m3fnuz", "quant_max": 240.0, "amax_floor": 1e-10}),
    ("sglang-fp8", "SGLang fused_add_rmsnorm_quant_fp8: y in float32, per-token FP8 E4M3FN, scale = amax/448, "
                   "a zero row's scale 0 and q 0 (sgl-kernel tests/test_fused_add_rmsnorm_quant_fp8.py)", {}),
    ("deepseek-v3-fp8", "DeepSeek-V3 act_quant on the bf16 norm output: blocks of 128, amax floored at 1e-4, "
                        "float32 scale = amax/448 (inference/kernel.py)",
     {"quant_input": "input", "quant_group": 128, "amax_floor": 1e-4}),
    ("deepseek-v3.1-ue8m0", "DeepSeek-V3.1's scale_fmt ue8m0: act_quant's scale rounded up to a power of two "
                            "(inference/kernel.py, config_v3.1.json)",
     {"quant_input": "input", "quant_group": 128, "amax_floor": 1e-4, "scale_rounding": "ceil_pow2"}),
    ("mxfp8", "OCP MXFP8 as NVIDIA, FlashInfer, aiter and MLX (after #4353) compute it: blocks of 32, E4M3 "
              "values, an E8M0 scale 2^ceil(log2(amax/448)) (mlx/backend/cpu/quantized.cpp)",
     {"quant_group": 32, "scale_rounding": "ceil_pow2"}),
    ("ocp-mxfp8", "OCP MX v1.0's own scale rule for MXFP8: 2^(floor(log2 amax) - 8), E4M3 blocks of 32, the "
                  "block's values past 448 clamped (torchao to_mx FLOOR mode)",
     {"quant_group": 32, "scale_rounding": "ocp_floor"}),
    ("mxfp4", "OCP MXFP4 with the round-up E8M0 scale: blocks of 32, E2M1 values, 2^ceil(log2(amax/6)) "
              "(aiter f32_to_mx_e8m0_scale RoundUp, MLX mxfp4)",
     {"quant_dtype": "float4_e2m1fn", "quant_max": 6.0, "quant_group": 32, "scale_rounding": "ceil_pow2"}),
    ("ocp-mxfp4", "OCP MX v1.0's own scale rule: 2^(floor(log2 amax) - 2) for E2M1 blocks of 32, the block's "
                  "largest values saturating at 6 (llama.cpp quantize_row_mxfp4_ref)",
     {"quant_dtype": "float4_e2m1fn", "quant_max": 6.0, "quant_group": 32, "scale_rounding": "ocp_floor"}),
)

OP = Op("rms_norm_quant", "y = rms_norm(x) * w quantized: q = y / scale in FP8 / INT8 / FP4, one scale per row "
        "or block; returns (q, scale)  (vLLM, SGLang, aiter, FlashInfer)",
        (X, WEIGHT), ("x", "weight", "eps"), WEIGHTED_KNOBS + (K.QUANT,), relaxed=ROUNDS_ONCE,
        results=("q", "scale"), exact=quantize.evaluate, exact_results=quantize.results, vjp=quantize.no_vjp, describe=quantize.describe,
        conventions=CONVENTIONS, backward=False, order=8)
