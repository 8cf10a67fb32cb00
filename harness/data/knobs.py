"""The knobs of a contract: every choice that changes an op's numbers, with its legal values.

A knob is data: its name, its legal values (the first is the usual one), the values diagnosis tries
when the knob is continuous, and the group it belongs to. An op record (`ops.py`) says which groups
apply to it, so no other module has to know which op has a weight, a gate, heads or a rotation.
Pure data: imports nothing from normdiff but its number format.
"""
from __future__ import annotations

from dataclasses import dataclass

from normdiff.text import general


@dataclass(frozen=True)
class Knob:
    name: str
    group: str
    values: tuple = ()  # the legal values of a discrete knob; () for a continuous one
    tried: tuple = ()  # what diagnosis tries (discrete knobs: every legal value)
    summary: str = ""
    says: dict = None  # value -> what code with that value does, in words (diagnosis' messages)

    @property
    def candidates(self) -> tuple:
        return self.tried or self.values

    def text(self, value) -> str:
        """What code with this knob at `value` does, as a person would say it."""
        said = (self.says or {}).get(value)
        if said:
            return said
        if self.name == "eps":
            return f"eps = {general(value)}, whatever the model's eps is"
        if self.name == "weight_offset":
            return f"({general(value)} + w) as the scale"
        if self.name == "rope_theta":
            return f"RoPE's base theta = {general(value)}"
        if self.name == "quant_max":
            return f"scale = amax / {general(value)}, q clamped to +-{general(value)}"
        if self.name == "scale_floor":
            return f"the scale floored at {general(value)}" if value else "no floor under the scale"
        if self.name == "amax_floor":
            return f"amax floored at {general(value)}" if value else "no floor under the amax"
        return f"{self.name} = {value!r}"


# Groups: which part of an op a knob belongs to. An op record lists the groups that apply to it.
STATISTIC = "statistic"  # every norm: what is averaged, where eps goes, in which dtype
WEIGHT = "weight"  # ops with a gain: offset, cast order, offset dtype
GATE = "gate"  # gated ops: the gate's activation and order
SCOPE = "scope"  # ops over heads: per head or the full vector, and the weight's span
ROPE = "rope"  # ops that rotate: order and base
CENTRE = "centre"  # LayerNorm: the mean subtracted, the variance's divisor and how it is summed
BIAS = "bias"  # ops with a bias: where it is added
RESIDUAL = "residual"  # fused residual adds: where the sum is rounded, how, and where it goes
QUANT = "quant"  # quantizing norms: the format, the scale's blocks and rounding, the clamp
TENSOR_SCALE = "tensor_scale"  # quantizing norms given a per-tensor scale: what that scale means

# Declaration order is the order diagnosis tries them in (ties between equally good candidates keep it).
KNOBS: dict[str, Knob] = {
    k.name: k
    for k in (
        Knob("weight_offset", WEIGHT, tried=(0.0, 1.0, 2.0), summary="y * (offset + w)",
             says={0.0: "w itself as the scale (plain gamma)", 1.0: "(1 + w) as the scale (zero-centred storage)",
                   2.0: "(2 + w) as the scale (the +1 applied twice)"}),
        Knob("eps_placement", STATISTIC, ("inside", "outside", "clamp", "none"),
             summary="sqrt(stat + eps) | sqrt(stat) + eps | max(sqrt(stat), eps) | no eps",
             says={"inside": "eps inside the square root, x * rsqrt(stat + eps)",
                   "outside": "eps outside the square root, x / (sqrt(stat) + eps)",
                   "clamp": "the norm clamped at eps, x / max(sqrt(stat), eps)", "none": "no eps at all"}),
        Knob("eps", STATISTIC, tried=(1e-5, 1e-6, 1e-7, 1e-8, 1e-12, 1e-3), summary="the epsilon's value"),
        Knob("eps_scale", STATISTIC, ("one", "span", "max_square"),
             summary="eps as given | eps * n (added to the mean where the sum is meant) | eps * max|x|^2",
             says={"one": "eps as the model gives it",
                   "span": "eps times the normalised width (eps added to the mean where the sum is meant)",
                   "max_square": "eps times max|x|^2 (an anti-overflow rescale by max|x| around the statistic)"}),
        Knob("statistic", STATISTIC, ("mean_square", "sum_square", "variance"),
             summary="mean(x^2) | sum(x^2) | mean((x - mean x)^2)",
             says={"mean_square": "the mean of x^2", "sum_square": "the sum of x^2",
                   "variance": "the variance (the mean subtracted first)"}),
        Knob("scope", SCOPE, ("head", "full"), summary="normalise each head's slice or the full H*D vector",
             says={"head": "each head's head_dim slice normalised on its own",
                   "full": "the whole H*D vector normalised at once"}),
        Knob("gate_activation", GATE, ("silu", "sigmoid"), says={"silu": "silu(z) as the gate",
                                                                 "sigmoid": "sigmoid(z) as the gate"}),
        Knob("gate_order", GATE, ("norm_then_gate", "gate_then_norm"),
             says={"norm_then_gate": "normalise x, then multiply by the gate",
                   "gate_then_norm": "multiply x by the gate, then normalise"}),
        Knob("cast", WEIGHT, ("one_rounding", "llama"),
             summary="(y * w).to(dtype) | w * y.to(dtype) (the Llama cast rounds before the weight)",
             says={"llama": "the normalised value rounded to the input dtype before the weight multiply (Llama cast)",
                   "one_rounding": "the weight multiplied in float32 and the result rounded once"}),
        Knob("stats_dtype", STATISTIC, ("float32", "input"), summary="the dtype the statistic is computed in",
             says={"float32": "the statistic computed in float32", "input": "the statistic computed in the input dtype"}),
        Knob("offset_dtype", WEIGHT, ("float32", "input"), summary="the dtype offset + w is computed in",
             says={"float32": "offset + w computed in float32",
                   "input": "offset + w rounded to the input dtype (e.g. stored that way at load)"}),
        Knob("inverted", STATISTIC, (False, True), summary="multiply by the denominator instead of dividing",
             says={False: "x divided by the RMS", True: "x multiplied by the RMS (the rsqrt inverted)"}),
        Knob("rope_order", ROPE, ("norm_then_rope", "rope_then_norm"),
             says={"norm_then_rope": "the norm before RoPE", "rope_then_norm": "RoPE before the norm"}),
        Knob("centre", CENTRE, (False, True), summary="x - mean(x) normalised (LayerNorm) or x itself",
             says={True: "x - mean(x) normalised (the mean subtracted)",
                   False: "x itself normalised: the mean not subtracted from x"}),
        Knob("correction", CENTRE, (0, 1), summary="the variance divided by n - correction",
             says={0: "the biased variance, divided by n (torch's LayerNorm)",
                   1: "the unbiased variance, divided by n - 1 (torch.var's default)"}),
        Knob("variance_form", CENTRE, ("two_pass", "one_pass"),
             summary="mean((x - m)^2) | mean(x^2) - m^2 (one pass: cancels catastrophically when |m| >> std)",
             says={"two_pass": "the variance as mean((x - mean)^2)",
                   "one_pass": "the variance as E[x^2] - E[x]^2 in float32 (one pass)"}),
        Knob("bias_order", BIAS, ("after_scale", "before_scale"), summary="x_hat * w + b | (x_hat + b) * w",
             says={"after_scale": "the bias added after the weight, x_hat * w + b",
                   "before_scale": "the bias added before the weight, (x_hat + b) * w"}),
        Knob("residual_dtype", RESIDUAL, ("input", "float32"),
             summary="h = x + residual rounded to the input dtype before the norm | kept in float32",
             says={"input": "the sum x + residual rounded to the input dtype before the variance (HF's decoder)",
                   "float32": "the sum x + residual kept in float32 for the variance (vLLM's native path)"}),
        Knob("residual_rounding", RESIDUAL, ("nearest", "truncate"),
             summary="residual_out rounded to nearest | truncated toward zero",
             says={"nearest": "residual_out rounded to nearest even",
                   "truncate": "residual_out truncated toward zero instead of rounded (a bias that compounds over layers)"}),
        Knob("residual_order", RESIDUAL, ("before_norm", "after_norm"),
             summary="y = norm(x + residual) | y = norm(x) + residual",
             says={"before_norm": "the residual added before the norm, y = norm(x + residual)",
                   "after_norm": "the residual added after the norm, y = norm(x) + residual"}),
        Knob("weight_span", SCOPE, ("head", "full"), summary="the weight is (head_dim,) or (H*D,)",
             says={"head": "one (head_dim,) weight shared by every head",
                   "full": "a (H*D,) weight over the whole q/k vector"}),
        Knob("rope_theta", ROPE, summary="RoPE's base"),
        Knob("quant_dtype", QUANT, ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "int8", "float4_e2m1fn"),
             summary="the format q is stored in",
             says={"float8_e4m3fn": "q in FP8 E4M3FN (max 448)", "float8_e4m3fnuz": "q in FP8 E4M3FNUZ (ROCm, max 240)",
                   "float8_e5m2": "q in FP8 E5M2", "int8": "q in INT8", "float4_e2m1fn": "q in FP4 E2M1 (max 6)"}),
        Knob("quant_max", QUANT, tried=(448.0, 240.0, 224.0, 127.0, 6.0, 57344.0),
             summary="scale = amax / quant_max, and q clamped to +-quant_max",
             says={448.0: "scale = amax / 448 (E4M3FN's max)", 240.0: "scale = amax / 240 (E4M3FNUZ's max)",
                   224.0: "scale = amax / 224 (vLLM's ROCm max for FNUZ)", 127.0: "scale = amax / 127",
                   6.0: "scale = amax / 6 (E2M1's max)", 57344.0: "scale = amax / 57344 (E5M2's max)"}),
        Knob("quant_group", QUANT, (0, 16, 32, 64, 128), summary="0: one scale per row | one per block of n columns",
             says={0: "one scale per row (per token)", 16: "one scale per block of 16 columns",
                   32: "one scale per block of 32 columns", 64: "one scale per group of 64 columns",
                   128: "one scale per group of 128 columns"}),
        Knob("scale_rounding", QUANT, ("none", "ceil_pow2", "ocp_floor", "floor_pow2", "nearest_pow2", "e4m3",
                                               "e4m3_unsaturated"),
             summary="the scale as computed | rounded up to a power of two (UE8M0, RCEIL) | OCP MX's "
                     "2^(floor(log2 amax) - emax) | rounded down | to the nearest power of two | rounded "
                     "to FP8 E4M3 (NVFP4's block scale)",
             says={"none": "the scale kept as computed (float32)",
                   "ceil_pow2": "the scale rounded up to a power of two (UE8M0 / E8M0 round-up)",
                   "ocp_floor": "the scale 2^(floor(log2 amax) - emax of the format) (OCP MX v1.0)",
                   "floor_pow2": "the scale rounded down to a power of two (the exponent truncated)",
                   "nearest_pow2": "the scale rounded to the nearest power of two in log2",
                   "e4m3": "the block scale rounded to FP8 E4M3, nearest even, saturating at 448 (NVFP4)",
                   "e4m3_unsaturated": "the block scale cast to FP8 E4M3 without a clamp (past 464 the cast "
                                       "is NaN)"}),
        Knob("amax_floor", QUANT, tried=(0.0, 1e-4, 1e-10), summary="amax = max(amax, amax_floor) before the scale",
             says={0.0: "no floor under the amax", 1e-4: "amax floored at 1e-4 (DeepSeek-V3's act_quant)",
                   1e-10: "amax floored at 1e-10"}),
        Knob("scale_floor", QUANT, tried=(0.0, 1.0 / (448.0 * 512.0), 2.0 ** -23),
             summary="scale = max(scale, scale_floor)",
             says={0.0: "no floor under the scale (a zero row has scale 0 and q = 0)",
                   1.0 / (448.0 * 512.0): "the scale floored at 1 / (448 * 512) (vLLM's FP8 minimum)",
                   2.0 ** -23: "the scale floored at FLT_EPSILON (vLLM's INT8 minimum)"}),
        Knob("quant_input", QUANT, ("float32", "input"), summary="y kept in float32 for the scale and q | "
                                                                 "rounded to the input dtype first",
             says={"float32": "y kept in float32 until it is quantized",
                   "input": "y rounded to the input dtype (bf16 / fp16) before it is quantized"}),
        Knob("saturate", QUANT, (True, False), summary="q clamped to +-max before the cast | cast unclamped",
             says={True: "q clamped to the format's range before the cast",
                   False: "q cast without a clamp (E4M3FN has no inf: past 464 the cast is NaN)"}),
        Knob("amax_bound", QUANT, ("floor", "cap"), summary="amax_floor as a floor | as a cap (min for max)",
             says={"floor": "amax = max(amax, amax_floor): a floor under it",
                   "cap": "amax = min(amax, amax_floor): the floor written as a cap (min for max)"}),
        Knob("zero_guard", QUANT, (True, False), summary="q = 0 where the scale is 0 | y / 0",
             says={True: "q = 0 where the scale is 0 (a zero row)",
                   False: "y divided by a zero scale (0 / 0 = NaN on a zero row)"}),
        Knob("quant_rounding", QUANT, ("nearest", "truncate", "half_away"),
             summary="y / scale rounded to nearest even | truncated toward zero | half away from zero",
             says={"nearest": "y / scale rounded to nearest, ties to even",
                   "truncate": "y / scale truncated toward zero (a float-to-int cast without rounding)",
                   "half_away": "y / scale rounded half away from zero (C's roundf)"}),
        Knob("scale_from", QUANT, ("y", "normalised"), summary="amax of y | of the value before the weight",
             says={"y": "the amax taken of y, after the weight multiply",
                   "normalised": "the amax taken of the normalised value before the weight multiply"}),
        Knob("tensor_scale", TENSOR_SCALE, ("divisor", "multiplier", "global"),
             summary="the given per-tensor scale s divides y (q = y / s) | multiplies it (q = y * s) | is "
                     "NVFP4's global encode scale g (block scales e4m3(g * amax / max), q = y * g / scale)",
             says={"divisor": "the per-tensor scale divides y: q = y / scale (vLLM, FlashInfer)",
                   "multiplier": "the per-tensor scale multiplies y: q = y * scale (the inverse scale's "
                                 "convention)",
                   "global": "the per-tensor scale is NVFP4's global encode scale g: each block's scale is "
                             "e4m3(g * amax / 6) and q = y * g / scale"}),
    )
}

# Knobs that only say how a low-precision implementation rounds: the float64 oracle ignores them.
ROUNDING_KNOBS = ("cast", "stats_dtype", "offset_dtype", "variance_form", "residual_dtype", "residual_rounding",
                  "quant_input")
# Knobs that follow from the inputs rather than being tried by diagnosis (the weight's shape)
DERIVED_KNOBS = ("weight_span",)


def in_groups(groups) -> tuple[str, ...]:
    """The names of the knobs in `groups`, in declaration order."""
    return tuple(name for name, k in KNOBS.items() if k.group in groups)
