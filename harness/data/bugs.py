"""The catalogue of real normalization bugs, as points in the contracts' knob space.

Each bug is a convention's contract with one knob turned the wrong way (`changes`), plus what a
person needs to recognise it: the right and the wrong formula, the input regime that exposes it,
and where it was seen (issue and PR numbers from ../shared/CATALOGUE.md). The mutants
(implementations/mutants.py) run these contracts in PyTorch; diagnosis searches the same space.
Pure data: imports no framework.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from normdiff.harness.data.contracts import Contract
from normdiff.harness.data.conventions import get_contract
from normdiff.harness.data.errors import UsageError
from normdiff.harness.data.names import unknown


@dataclass(frozen=True)
class Bug:
    id: str
    op: str
    convention: str  # the convention whose contract it corrupts
    changes: dict  # knob -> wrong value
    right: str
    wrong: str
    symptom: str  # one line: what it looks like
    exposes: str  # the input regime that shows it
    exposing_regimes: tuple[str, ...]  # regime names (prefixes) of the cases meant to catch it
    seen_in: tuple[str, ...] = field(default_factory=tuple)

    @property
    def contract(self) -> Contract:
        """The wrong contract this bug computes."""
        return get_contract(self.op, self.convention).replace(**self.changes)

    def as_dict(self) -> dict:
        return {"id": self.id, "op": self.op, "convention": self.convention, "changes": dict(self.changes),
                "right": self.right, "wrong": self.wrong, "symptom": self.symptom, "exposes": self.exposes,
                "exposing_regimes": list(self.exposing_regimes), "seen_in": list(self.seen_in)}


_XH = "x * rsqrt(mean(x^2) + eps)"
_LN = "(x - mean x) * rsqrt(var(x) + eps)"

BUGS: dict[str, Bug] = {
    b.id: b
    for b in (
        Bug("eps-outside-sqrt", "rms_norm", "qwen3", {"eps_placement": "outside"},
            f"{_XH} * w", "x / (sqrt(mean(x^2)) + eps) * w",
            "classic 1: invisible at rms(x) = 1, ~0.4 relative error at rms 1e-3, ~9 at 1e-4",
            "rms(x) <~ 10 * sqrt(eps): tiny activations", ("tiny_rms",),
            ("fla PR #508 (reverted)", "fla decode kernels Apr-Jul 2025", "original RMSNorm torch code",
             "tilelang #1243")),
        Bug("gamma-plus-one", "rms_norm", "qwen3", {"weight_offset": 1.0},
            f"{_XH} * w", f"{_XH} * (1 + w)",
            "classic 2: a plain-gamma model scaled by 1 + gamma; on all-ones weights a pure x2 (cosine 1.0)",
            "any weights; all-ones weights make it a pure rescale", ("normal",),
            ("Liger-Kernel #74", "mlx-vlm #1548 (logit diff 17.1)", "mold #1074",
             "GGUF double fold in llama.cpp / vLLM / MLX ports")),
        Bug("gamma-missing-one", "rms_norm", "qwen3.5", {"weight_offset": 0.0},
            f"{_XH} * (1 + w)", f"{_XH} * w",
            "classic 2 reversed: zero-centred weights used as the scale itself; output rms ~0.1 not ~1",
            "trained zero-centred weights (mean 0.24, range [-0.11, 1.0])", ("normal",),
            ("shainet #176 (rms 0.116 vs 1.090)", "kekzl/imp #1289 (perplexity 65 vs 7.5)")),
        Bug("double-offset", "rms_norm", "qwen3.5", {"weight_offset": 2.0},
            f"{_XH} * (1 + w)", f"{_XH} * (2 + w)",
            "the +1 folded into stored weights and added again at run time",
            "any weights", ("normal",), ("GGUF double fold in llama.cpp / vLLM / MLX ports",)),
        Bug("qk-norm-full-vector", "qk_norm", "qwen3", {"scope": "full"},
            "RMSNorm over each head's head_dim", "RMSNorm over the whole H*D q/k vector",
            "classic 3: global RMS right, per-head RMS wrong; nearly invisible when heads share a scale",
            "heads at different scales", ("head_scales",),
            ("vLLM PR #16311 (Llama4, MMLU-Pro 0.686 -> 0.715)", "vllm-metal #691 / #767")),
        Bug("qk-norm-per-head", "qk_norm", "olmo2", {"scope": "head"},
            "RMSNorm over the full H*D vector (OLMo2 on purpose)", "RMSNorm over each head",
            "classic 3 reversed: OLMo2's full-vector norm done per head", "heads at different scales",
            ("head_scales",), ("vllm-metal #691 / #767 (OLMo)",)),
        Bug("qk-norm-after-rope", "qk_norm_rope", "qwen3", {"rope_order": "rope_then_norm"},
            "rope(rms_norm_per_head(q) * w)", "rms_norm_per_head(rope(q)) * w",
            "RoPE applied before the weighted QK-Norm: a rotation keeps each head's RMS, so only the "
            "per-channel weight sees the order; identical maths when gamma is uniform",
            "non-uniform gamma (trained q_norm / k_norm weights); all-ones weights hide it",
            ("normal", "head_scales"),
            ("seed 004 ordering note (section 3.5: QK-Norm first, then RoPE)",
             "Llama4 L2Norm is unweighted and after RoPE on purpose")),
        Bug("eps-wrong-value", "rms_norm", "qwen3", {"eps": 1e-5},
            f"{_XH} * w, eps = 1e-6", f"{_XH} * w, eps = 1e-5",
            "the config's eps replaced by another model's default; shows below rms ~0.03",
            "rms(x) <~ 0.03", ("tiny_rms",),
            ("llama.cpp #2373 / #2374", "meta-llama #771", "aprender #1606")),
        Bug("eps-hardcoded", "rms_norm", "llama", {"eps": 1e-6},
            f"{_XH} * w, eps from the config (1e-5 in Llama 2 and 3)", f"{_XH} * w, eps = 1e-6 whatever the config says",
            "the eps argument ignored: a constant where the model's config gives another value",
            "rms(x) <~ 0.03 at a config eps other than the constant", ("tiny_rms",),
            ("keras-hub PR #1472 (Gemma)", "llama.cpp #2373 / PR #2374 (Llama 2 needs 1e-5)",
             "candle's quantized LLaMA at 1e-5 whatever the GGUF says (https://github.com/huggingface/candle/blob/"
             "0f4ff8a739facafd4b3bc9a003d4a581202b62f8/candle-examples/examples/quantized/main.rs#L22-L39)")),
        Bug("eps-library-default", "rms_norm", "qwen3", {"eps": 1e-7},
            f"{_XH} * w, eps = 1e-6 (the config)", f"{_XH} * w, eps = 1e-7 (keras ops.rms_normalization(epsilon=None))",
            "a library's default eps where the model's config gives another (LIBRARY_EPS below): invisible until "
            "the statistic comes within ~100x of the larger eps (rms(x) ~1e-2 for 1e-7 against 1e-6, ~0.3 for "
            "Keras' LayerNormalization 1e-3)",
            "rms(x) <~ 10 * sqrt(the larger eps)", ("tiny_rms",),
            ("keras 3 ops.rms_normalization: epsilon=None -> 1e-7 (keras/src/ops/nn.py)", "axlearn PR #21 (1e-8)",
             "keras-hub TransformerEncoder LayerNorms at Keras' 1e-3 (https://github.com/keras-team/keras-hub/blob/"
             "a6a365699e286546c4060cda232075f2f08ed429/keras_nlp/layers/transformer_encoder.py#L77-L108)")),
        Bug("eps-ignored", "rms_norm", "qwen3", {"eps_placement": "none"},
            f"{_XH} * w", "x * rsqrt(mean(x^2)) * w",
            "NaN on an all-zero row (padding, masked tokens)", "an all-zero row", ("zero_rows",),
            ("keras-hub #1472",)),
        Bug("eps-rescaled-by-max", "rms_norm", "qwen3", {"eps_scale": "max_square"},
            f"{_XH} * w", "x / (sqrt(mean((x / m)^2) + eps) * m) * w, m = max|x|: eps becomes eps * m^2",
            "an anti-overflow rescale around the statistic: eps vanishes on tiny rows and swells on spiky ones",
            "tiny rows (eps ~ 12 rms^2 eps: gone) and rows with one large element", ("tiny_rms", "spike"),
            ("coremltools #2821 (fix PR #2822)",)),
        Bug("stats-low-precision", "rms_norm", "qwen3", {"stats_dtype": "input"},
            "mean(x.float()^2)", "mean(x^2) in the input dtype",
            "fp16 x^2 overflows above |x| = 256: the whole row comes out as zeros, finite",
            "fp16 with |x| > 256; fp16 tiny inputs", ("large", "spike", "tiny_rms"),
            ("pytorch #133085", "transformers #36822", "sglang #27540 (cosine 0.51 at layer 58)")),
        Bug("offset-low-precision", "rms_norm", "qwen3.5", {"offset_dtype": "input"},
            "xh * (1 + w.float())", "xh * bf16(1 + w)",
            "a fixed per-channel scale error (same in every row), elementwise within ~1.5 bf16 ulp",
            "trained or large weights in bf16 (look at the per-channel bias)", ("normal",),
            ("vLLM #3653", "vLLM #55311")),
        Bug("variance-not-mean-square", "rms_norm", "qwen3", {"statistic": "variance"},
            f"{_XH} * w", "x * rsqrt(var(x) + eps) * w",
            "LayerNorm's statistic without its centring: right at mean 0, wrong at mean 1",
            "inputs with a non-zero mean", ("mean_shift",),
            ("keras LayerNormalization(rms_scaling=True)", "keras #21234")),
        Bug("rms-norm-centred", "rms_norm", "qwen3", {"centre": True, "statistic": "variance"},
            f"{_XH} * w", f"{_LN} * w",
            "a LayerNorm where the RMSNorm is meant: the mean subtracted, so every row loses its mean; "
            "close only when rows have mean ~0",
            "inputs with a non-zero mean; short spans (a head's mean is noisy)", ("mean_shift", "normal"),
            ("second held-out round, 2026-12-04 (../shared/CATALOGUE.md): a LayerNorm used where an RMSNorm "
             "is meant", "keras LayerNormalization(rms_scaling=False) in an RMSNorm port")),
        Bug("qk-norm-centred", "qk_norm", "qwen3", {"centre": True, "statistic": "variance"},
            "RMSNorm over each head's head_dim", "LayerNorm (mean subtracted) over each head's head_dim",
            "a LayerNorm in the QK-norm where an RMSNorm is meant: each head loses its mean (nn.LayerNorm for "
            "q_norm / k_norm in a port)",
            "any q/k: a head_dim slice's mean is never exactly 0", ("normal", "head_scales"),
            ("second held-out round, 2026-12-04 (../shared/CATALOGUE.md): a LayerNorm used where an RMSNorm "
             "is meant, mean subtracted",)),
        Bug("rsqrt-inverted", "rms_norm", "qwen3", {"inverted": True},
            f"{_XH} * w", "x / rsqrt(mean(x^2) + eps) * w",
            "multiplies by the RMS instead of dividing: right only at rms(x) = 1",
            "rms(x) != 1", ("tiny_rms", "large", "mean_shift"), ("LN3Diff dit/norm.py",)),
        Bug("gate-before-norm", "gated_rms_norm", "qwen3.5", {"gate_order": "gate_then_norm"},
            "rms_norm(x) * w * silu(z)", "rms_norm(x * silu(z)) * w",
            "Mamba2's gate order in a Qwen3.5 port; worst with mostly closed gates",
            "any; mostly closed gates z ~ N(-4, 1)", ("normal", "tiny_rms", "zero_rows"),
            ("Mamba2 vs Qwen3-Next ports", "mamba #547")),
        Bug("gate-sigmoid", "gated_rms_norm", "qwen3.5", {"gate_activation": "sigmoid"},
            "rms_norm(x) * w * silu(z)", "rms_norm(x) * w * sigmoid(z)",
            "the gate's activation swapped", "any gate", ("normal",), ("fla #1182", "Kimi / Bailing ports")),
        Bug("gated-norm-offset", "gated_rms_norm", "qwen3.5", {"weight_offset": 1.0},
            "rms_norm(x) * w * silu(z)", "rms_norm(x) * (1 + w) * silu(z)",
            "the zero-centred +1 applied to the gated norm, whose weight is plain",
            "any weights", ("normal",),
            ("llama.cpp converter excludes linear_attn.norm.weight from +1",)),
        Bug("l2-eps-scaled-by-width", "l2_norm", "qwen3.5", {"eps_scale": "span"},
            "x * rsqrt(sum(x^2) + eps)", "x * rsqrt(sum(x^2) + n * eps)",
            "an L2 norm built from rms_norm: eps lands on the mean, so the sum sees n times eps; shows once "
            "norm(x)^2 <~ 100 n eps", "norm(x) ~ 1e-3 to 1e-2 at n = 128", ("tiny_rms",),
            ("mlx-lm PR #1624 (kimi_linear)", "the same lines in mlx-lm qwen3_next / qwen3_5 and mlx-vlm qwen3_5")),
        Bug("l2-eps-clamp", "l2_norm", "qwen3.5", {"eps_placement": "clamp"},
            "x * rsqrt(sum(x^2) + eps)", "x / max(sqrt(sum(x^2)), eps)",
            "F.normalize semantics where the eps-inside form is meant: shows once norm(x) <~ 1e-2",
            "norm(x) <~ 1e-2", ("tiny_rms",), ("mlx-lm #1624 (up to 87 %)", "axlearn #21")),
        Bug("l2-eps-outside", "l2_norm", "qwen3.5", {"eps_placement": "outside"},
            "x * rsqrt(sum(x^2) + eps)", "x / (sqrt(sum(x^2)) + eps)",
            "eps added to the norm instead of its square", "norm(x) <~ 1e-2", ("tiny_rms",),
            ("mlx-lm #1624", "axlearn #21")),
        # LayerNorm (layer_norm@torch: F.layer_norm's contract)
        Bug("ln-one-pass-variance", "layer_norm", "torch", {"variance_form": "one_pass"},
            f"{_LN} * w + b, var = mean((x - m)^2)", f"{_LN} * w + b, var = E[x^2] - E[x]^2 in float32",
            "the one-pass variance: exact in exact arithmetic, catastrophic in float32 once |mean| >> std "
            "(negative variance, NaN or zeros at mean 1000, std 0.1)",
            "rows at mean 1000 with std 1 or 0.1 (float32, float16)", ("narrow",),
            ("burn #5607 (error 1.03 at mean 100)", "TVM #19592 / PR #19643", "tt-metal #45968",
             "openvino PR #36587", "MLX #2238 / PR #2246")),
        Bug("ln-unbiased-variance", "layer_norm", "torch", {"correction": 1},
            f"{_LN} * w + b, var over n", f"{_LN} * w + b, var over n - 1 (torch.var's default)",
            "the unbiased variance: y shrinks by sqrt((n - 1) / n), 0.8 % at n = 64, 0.05 % at n = 1024",
            "any input; small widths show it most", ("normal", "mean_shift"),
            ("a common slip: torch.var(x, -1) defaults to correction=1; LayerNorm divides by n",)),
        Bug("ln-mean-not-subtracted", "layer_norm", "torch", {"centre": False},
            f"{_LN} * w + b", "x * rsqrt(var(x) + eps) * w + b",
            "the mean subtracted in the variance but not from x: right only for mean-zero rows",
            "inputs with a non-zero mean", ("mean_shift", "narrow"),
            ("keras LayerNormalization(rms_scaling=True) (variance without centring)", "keras #21234")),
        Bug("ln-bias-before-scale", "layer_norm", "torch", {"bias_order": "before_scale"},
            f"{_LN} * w + b", f"({_LN} + b) * w",
            "the bias added before the weight: the bias scaled by w; invisible with all-ones weights or zero biases",
            "trained weights and a non-zero bias", ("normal",),
            ("LayerNorm ports that fold the bias into the normalised value before the affine weight",)),
        # fused residual add + RMSNorm (vLLM / SGLang fused_add_rms_norm)
        Bug("add-residual-after-norm", "add_rms_norm", "qwen3", {"residual_order": "after_norm"},
            "h = x + residual; y = rms_norm(h) * w", "y = rms_norm(x) * w + residual",
            "the residual added after the norm instead of before it (a post-norm block where a pre-norm one is meant)",
            "any input", ("normal",),
            ("pre-norm vs post-norm confusion in ports; CATALOGUE fused-add row",)),
        Bug("add-residual-truncated", "add_rms_norm", "vllm", {"residual_rounding": "truncate"},
            "residual_out = round_to_nearest(x + residual)", "residual_out = truncate(x + residual) toward zero",
            "residual_out truncated fp32 -> bf16 instead of rounded: within an ulp, but always toward zero, "
            "so the residual stream's bias compounds over layers; y is unaffected",
            "any input, bf16 / fp16 (half of the elements are off by up to an ulp)", ("normal",),
            ("ROCm/aiter #5151",)),
        Bug("add-sum-rounded-first", "add_rms_norm", "vllm", {"residual_dtype": "input"},
            "h = x.float() + residual.float(); y = rms_norm(h) (the sum kept in float32)",
            "h = bf16(x + residual); y = rms_norm(h) (the sum rounded before the variance)",
            "the fused kernel rounds x + residual to the input dtype before the norm where the native path keeps "
            "it in float32: one more rounding, 1-2 ulp per element, -2.6 pp GSM8K over 60 layers",
            "bf16 / fp16 on many elements (residuals larger than x)", ("normal", "outliers"),
            ("vLLM #52104", "vllm-omni PR #6878", "aiter PR #2586")),
        # the grouped gated norm (Mamba2's MambaRMSNormGated)
        Bug("group-norm-whole-row", "group_gated_rms_norm", "mamba2", {"scope": "full"},
            "rms_norm over each group of group_size channels", "rms_norm over the whole row (n_groups = 1)",
            "the group size ignored: every group scaled by the row's RMS; invisible when groups share a scale",
            "groups at different scales", ("group_scales",),
            ("mamba_ssm rms_norm_ref group_size=None vs the model's ngroups", "Mamba2 ports with ngroups > 1")),
        Bug("group-norm-gate-after", "group_gated_rms_norm", "mamba2", {"gate_order": "norm_then_gate"},
            "rms_norm_per_group(x * silu(z)) * w", "rms_norm_per_group(x) * w * silu(z)",
            "Qwen3-Next's gate order in a Mamba2 port (norm_before_gate=True where False is meant)",
            "any gate; mostly closed gates most", ("normal", "group_scales"),
            ("mamba_ssm RMSNormGated norm_before_gate", "mamba #547")),
        # quantizing norms (ops/quantize.py; CATALOGUE.md, "Quantizing norms")
        Bug("quant-scale-before-weight", "rms_norm_quant", "sglang-fp8", {"scale_from": "normalised"},
            "scale = amax|rms_norm(x) * w| / 448", "scale = amax|rms_norm(x)| / 448, then q = y / scale",
            "the scale taken from the normalised value before the weight: a gain > 1 saturates the row's "
            "largest values at 448, a gain < 1 wastes range",
            "trained or large weights (any gain far from 1)", ("normal", "outliers"),
            ("issue 34's bug list (no filed upstream bug found: every fused kernel read takes the amax "
             "after the weight)",)),
        Bug("quant-no-saturation", "rms_norm_quant", "ocp-mxfp8", {"saturate": False},
            "q = e4m3(clamp(y / scale, -448, 448))", "q = e4m3(y / scale) unclamped",
            "E4M3FN has no inf: a quotient past 464 becomes NaN where the clamp would give 448; the OCP "
            "floor rule puts block maxima at up to 512",
            "blocks whose amax lies in (448, 512) x 2^k (half of them)", ("normal", "outliers"),
            ("NVIDIA Model-Optimizer PR #1397 (unclamped e4m3 cast of a block scale: NaN byte 0x7F)",
             "ml_dtypes #400 (the float32 -> e4m3fn cast is not saturating)")),
        Bug("quant-fnuz-max-448", "rms_norm_quant", "aiter-fp8", {"quant_max": 448.0},
            "scale = amax / 240 (E4M3FNUZ's max)", "scale = amax / 448 (E4M3FN's max) on an FNUZ output",
            "the FN format's 448 used for ROCm's FNUZ, which saturates at 240: each row's values past 248 "
            "become NaN in the FNUZ cast", "any row (its amax lands at 448)", ("normal",),
            ("vLLM csrc/quantization/utils.cuh (quant_type_max for Float8_e4m3fnuz)",
             "SGLang PR #30900 (the reverse: 224 hardcoded on gfx950)")),
        Bug("quant-fnuz-max-for-fn", "rms_norm_quant", "sglang-fp8", {"quant_max": 224.0},
            "scale = amax / 448 (E4M3FN's max)", "scale = amax / 224 (ROCm's FNUZ max) on an E4M3FN output",
            "a ROCm FNUZ max kept on a platform whose FP8 is E4M3FN: half the format's range unused, every "
            "scale 2x the contract's", "any row", ("normal",),
            ("SGLang PR #30900 (bit8_max = 224.0 hardcoded on every ROCm, gfx950's E4M3FN included)",)),
        Bug("quant-fnuz-max-240", "rms_norm_quant", "vllm-fp8-rocm", {"quant_max": 240.0},
            "scale = amax / 224 (vLLM's ROCm max)", "scale = amax / 240 (torch.finfo(float8_e4m3fnuz).max)",
            "torch's FNUZ max where vLLM's ROCm kernels divide by 224 ('Using the default max value from "
            "pytorch (240.0 0x7F) will cause accuracy issues')", "any row", ("normal",),
            ("vLLM csrc/quantization/utils.cuh, the comment on quant_type_max",)),
        Bug("quant-e8m0-rounded-down", "rms_norm_quant", "mxfp8", {"scale_rounding": "floor_pow2"},
            "scale = 2^ceil(log2(amax / 448))", "scale = 2^floor(log2(amax / 448)) (the exponent bits truncated)",
            "an E8M0 scale one binade too small: the block's largest values saturate at 448",
            "blocks whose amax / 448 is not a power of two (almost all)", ("normal",),
            ("vLLM PR #43557 (MXFP4 MoE E8M0 scale by >> 23)", "FBGEMM's copy of the TRT-LLM UE8M0 path")),
        Bug("quant-e8m0-nearest", "rms_norm_quant", "mxfp8", {"scale_rounding": "nearest_pow2"},
            "scale = 2^ceil(log2(amax / 448))", "scale = 2^round(log2(amax / 448))",
            "E8M0 rounded to the nearest power of two: about half the blocks saturate their maxima "
            "(up to 29 % lost)", "blocks with log2(amax / 448) in (k, k + 0.5)", ("normal",),
            ("MLX PR #4353 (CPU / Metal to_fp8_e8m0 rounded to nearest)", "lablup/mlxcel #1769")),
        Bug("quant-zero-row-nan", "rms_norm_quant", "sglang-fp8", {"zero_guard": False},
            "q = 0 where the scale is 0", "q = y / scale: 0 / 0 = NaN on a zero row",
            "a zero row (padding, a masked token) quantized to NaN, which survives the zero descale",
            "zero rows", ("zero_rows",),
            ("aiter #4289 (V quant of a zero channel: NaN)", "kernels-community #681 (act_quant without eps)")),
        Bug("quant-y-rounded-first", "rms_norm_quant", "sglang-fp8", {"quant_input": "input"},
            "y kept in float32 until it is quantized", "y rounded to bf16 / fp16, then quantized",
            "one rounding more than the contract: 1-2 % of FP8 codes one step off (1.4 % measured on bf16 rows of 4096), every scale a bf16 "
            "rounding away", "bf16 / fp16 inputs", ("normal",),
            ("FlashInfer PR #4167 (fp8 conversion double-rounded through bf16)", "Triton #2583",
             "SGLang tests/test_fused_add_rmsnorm_quant_fp8.py ('sequential rounds normalization to BF16')")),
        Bug("quant-int8-truncated", "rms_norm_quant", "vllm-int8", {"quant_rounding": "truncate"},
            "q = rint(y / scale)", "q = (int8)(y / scale): truncated toward zero",
            "every code biased toward zero by half a step on average", "any row", ("normal",),
            ("vLLM int8_utils._per_token_group_quant_int8 (Triton .to(int8) truncates; a downstream patch)",
             "aiter pertoken_quant's .to(int8)")),
        Bug("quant-amax-cap", "rms_norm_quant", "deepseek-v3-fp8", {"amax_bound": "cap"},
            "amax = max(amax, 1e-4)", "amax = min(amax, 1e-4)",
            "the amax floor written as a cap: every block's scale 1e-4 / 448, every value saturated",
            "any block with amax > 1e-4", ("normal",),
            ("DeepSeek-V3 PR #964 (tl.min where tl.maximum was meant), fixed in #969",)),
        Bug("quant-static-scale-multiplied", "rms_norm_quant_static", "vllm-fp8-static", {"tensor_scale": "multiplier"},
            "q = y * (1 / scale)", "q = y * scale",
            "a static scale applied as its own inverse (the two conventions of a per-tensor scale: vLLM and "
            "FlashInfer divide by it, TensorRT-LLM's smooth-quant reference multiplies): every quotient off by "
            "scale^2, an FP8 scale of 0.009 sends every code to zero", "any scale but 1", ("normal",),
            ("TensorRT-LLM tests/unittest/trt/quantization/test_smooth_quant_rms_norm.py (static: q = ref * scale)",
             "vLLM csrc/layernorm_quant_kernels.cu (scale_inv = 1 / *scale)")),
        Bug("quant-nvfp4-scale-unclamped", "rms_norm_quant_static", "nvfp4", {"scale_rounding": "e4m3_unsaturated"},
            "scale = e4m3(min(g * amax / 6, 448))", "scale = e4m3(g * amax / 6) unclamped",
            "NVFP4's block scale cast to E4M3FN without saturating: a block whose amax passes the tensor amax "
            "the global scale was calibrated on gets scale NaN (0x7F) past 464, and its 16 values NaN",
            "blocks above the calibrated amax (outliers)", ("outliers",),
            ("NVIDIA Model-Optimizer PR #1397 (NVFP4 export: per-block scale past 448 cast to NaN)",
             "vLLM tests/kernels/quantization/nvfp4_utils.py ref_nvfp4_quant (the cast without a clamp)")),
    )
}


# Constants that are a library's default eps, never a model family's config value: code that runs at
# one of these forgot to pass the model's eps (keras-hub's encoder LayerNorms at Keras' 1e-3, corpus
# keras-hub-encoder-layernorm-default-eps; keras ops.rms_normalization(epsilon=None) at 1e-7).
LIBRARY_EPS = {1e-3: "keras layers.LayerNormalization's default",
               1e-7: "keras ops.rms_normalization's default (epsilon=None)",
               1.1920928955078125e-07: "torch's finfo(float32).eps (nn.RMSNorm / F.rms_norm with eps=None)",
               1e-8: "axlearn's l2 normalize default", 1e-12: "F.normalize's default"}


def constant_eps_bug(value: float, own_eps: float) -> Bug | None:
    """The catalogued bug a constant eps is, by where the constant comes from: a library's default
    (eps-library-default); the convention's own config value, so the code is right for its family
    and ignores the eps it is handed for another model (eps-hardcoded: candle's GGUF LLaMA at 1e-5,
    corpus candle-quantized-llama-rmsnorm-eps-hardcoded); else the bug filed for that very constant
    (another family's value: eps-wrong-value's 1e-5, eps-hardcoded's 1e-6), or None."""
    if value in LIBRARY_EPS:
        return BUGS["eps-library-default"]
    if value == own_eps:
        return BUGS["eps-hardcoded"]
    return next((b for b in BUGS.values() if b.changes == {"eps": value}), None)


def get_bug(bug_id: str) -> Bug:
    if bug_id not in BUGS:
        raise UsageError(unknown("bug", bug_id, BUGS, "normdiff list bugs"))
    return BUGS[bug_id]
