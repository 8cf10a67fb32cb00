"""The named conventions: what each model family means by each op it defines.

A convention is a name, a one-line summary, one contract per op it defines (`contracts.py`) and
where its config eps comes from: each contract's eps is the family's real configuration value, the
eps a case runs at unless it names another (`Case.eps`; the default suite runs other real values
too, so an implementation that ignores its eps argument shows). Every implementation declares which
op@conventions it implements. Pure data.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from normdiff.harness.data.contracts import Contract
from normdiff.harness.data.errors import UsageError
from normdiff.harness.data.names import unknown
from normdiff.harness.data.ops import OPS


@dataclass(frozen=True)
class Convention:
    name: str
    summary: str
    contracts: dict[str, Contract] = field(default_factory=dict)  # op -> contract
    eps_source: str = ""  # where the contracts' eps comes from (a config file, a library default)

    def contract(self, op: str) -> Contract:
        if op not in OPS:
            raise UsageError(unknown("op", op, OPS))
        if op not in self.contracts:
            raise UsageError(f"convention {self.name!r} does not define {op!r}; it defines: "
                             f"{', '.join(self.contracts)}")
        return self.contracts[op]


def define(name: str, summary: str, *contracts: Contract, eps_source: str = "") -> Convention:
    """A convention from its contracts, keyed by their op."""
    return Convention(name, summary, {c.op: c for c in contracts}, eps_source)


def _qwen35_like(name: str, summary: str, eps_source: str) -> Convention:
    # Qwen3.5 and Qwen3-Next share the zero-centred norm, the gated norm (plain gamma, weight
    # multiplied after a Llama-style cast, gate in float32) and the eps-inside L2 norm.
    return define(name, summary,
                  Contract("rms_norm", weight_offset=1.0),
                  Contract("gated_rms_norm", cast="llama"),
                  Contract("l2_norm", statistic="sum_square"),
                  Contract("qk_norm", weight_offset=1.0), eps_source=eps_source)


def layer_norm(**knobs) -> Contract:
    """LayerNorm as torch's F.layer_norm computes it: the biased variance of x - mean(x), eps inside
    the square root, then w and b (torch's default eps 1e-5 unless the family's config says otherwise)."""
    return Contract("layer_norm", **{"statistic": "variance", "centre": True, "eps": 1e-5, **knobs})


CONVENTIONS: dict[str, Convention] = {
    c.name: c
    for c in (
        define("qwen3", "plain gamma, Llama cast; QK-Norm per head before RoPE (HF Qwen3RMSNorm)",
               Contract("rms_norm", cast="llama"),
               Contract("qk_norm", cast="llama"),
               Contract("qk_norm_rope", cast="llama", rope_theta=1e6),
               # the decoder layer's unfused order: residual + hidden in the input dtype, then the norm
               Contract("add_rms_norm", cast="llama"),
               eps_source="rms_norm_eps 1e-06 in the Qwen3 configs (Qwen/Qwen3-8B config.json)"),
        _qwen35_like("qwen3.5", "zero-centred 1 + gamma, one rounding; gated norm plain gamma; "
                                "L2 norm x * rsqrt(sum + eps) (HF Qwen3_5RMSNorm)",
                     "rms_norm_eps 1e-06 in the Qwen3.5 configs; l2norm's own eps=1e-6 in modeling_qwen3_5"),
        _qwen35_like("qwen3-next", "as qwen3.5 (HF Qwen3NextRMSNorm)",
                     "rms_norm_eps 1e-06 (Qwen/Qwen3-Next-80B-A3B config.json); l2norm eps=1e-6"),
        define("olmo2", "plain gamma, one rounding; QK-Norm over the full H*D vector (HF Olmo2RMSNorm)",
               Contract("rms_norm"),
               Contract("qk_norm", scope="full", weight_span="full"),
               eps_source="rms_norm_eps 1e-06 (allenai/OLMo-2-1124-7B config.json)"),
        define("llama", "plain gamma, Llama cast (HF LlamaRMSNorm)",
               Contract("rms_norm", cast="llama", eps=1e-5),
               eps_source="rms_norm_eps 1e-05 in the Llama 2 and Llama 3 configs (meta-llama/Llama-2-7b-hf, "
                          "Meta-Llama-3-8B); llama.cpp #2373 is what 1e-6 there costs"),
        define("gemma3", "zero-centred 1 + gamma, one rounding; QK-Norm per head (HF Gemma3RMSNorm)",
               Contract("rms_norm", weight_offset=1.0),
               Contract("qk_norm", weight_offset=1.0),
               eps_source="rms_norm_eps 1e-06 (google/gemma-3-4b-it text_config)"),
        define("gemma3n", "plain gamma, all in float32, one rounding (HF Gemma3nRMSNorm: the "
                          "'Gemma means 1 + gamma' rule breaks here)",
               Contract("rms_norm"),
               Contract("qk_norm"),
               eps_source="rms_norm_eps 1e-06 (google/gemma-3n-E4B-it text_config)"),
        define("deepseek-v3", "plain gamma, Llama cast; MLA's q_a / kv_a norms on latent widths 1536 and "
                              "512 (HF DeepseekV3RMSNorm)",
               Contract("rms_norm", cast="llama"),
               eps_source="rms_norm_eps 1e-06 (deepseek-ai/DeepSeek-V3 config.json)"),
        define("vllm", "vLLM's native RMSNorm: Llama cast; fused_add_rms_norm keeps x + residual in float32 "
                       "for the variance and returns it rounded (RMSNorm.forward_native)",
               Contract("rms_norm", cast="llama"),
               Contract("add_rms_norm", cast="llama", residual_dtype="float32"),
               eps_source="rms_norm_eps 1e-06 of the Qwen3 models vLLM serves; the kernel takes the model's eps"),
        define("cohere", "LayerNorm without a bias, in float32, one rounding (HF CohereLayerNorm)",
               layer_norm(),
               eps_source="layer_norm_eps 1e-05 (CohereForAI/c4ai-command-r-v01 config.json)"),
        define("olmo", "non-parametric LayerNorm: no weight, no bias, in float32 (HF OlmoLayerNorm, OLMo-1)",
               layer_norm(),
               eps_source="OlmoLayerNorm hard-codes eps=1e-5 in F.layer_norm"),
        define("mamba2", "grouped gated RMSNorm: x * silu(gate) first, then each group of channels "
                         "normalised, Llama cast (HF MambaRMSNormGated; Bamba, Zamba2, NemotronH alike)",
               Contract("group_gated_rms_norm", gate_order="gate_then_norm", cast="llama", weight_span="full",
                        eps=1e-5),
               eps_source="layer_norm_epsilon 1e-05 (Mamba2Config default, state-spaces/mamba2-2.7b)"),
        define("llama4", "weightless QK norm: x * rsqrt(mean(x^2) + eps) per head, in float32 "
                         "(HF Llama4TextL2Norm, applied to q and k after RoPE)",
               Contract("l2_norm", statistic="mean_square", eps=1e-5),
               eps_source="rms_norm_eps 1e-05 (meta-llama/Llama-4-Scout-17B-16E config.json)"),
        # Not a model family: the framework built-ins' documented semantics, so that they can be
        # declared against a contract they really implement and measured beside the models'.
        define("torch", "framework built-ins: torch.nn.RMSNorm / F.rms_norm (plain gamma, one "
                        "rounding), F.normalize (x / max(norm, eps), eps 1e-12) and nn.LayerNorm / "
                        "F.layer_norm (biased variance, eps 1e-5: the LayerNorm of GPT-2, GPT-NeoX, Phi, "
                        "Falcon, StableLM)",
               Contract("rms_norm"),
               Contract("l2_norm", statistic="sum_square", eps_placement="clamp", eps=1e-12),
               layer_norm(),
               eps_source="F.normalize's default eps=1e-12; nn.LayerNorm's default 1e-5 (layer_norm_eps 1e-05 in "
                          "the GPT-NeoX / Pythia and Phi configs); the RMSNorm built-ins are given 1e-6 explicitly "
                          "(their eps=None means finfo(dtype).eps, which depends on the dtype)"),
    )
}



def _with_op_contracts(conventions: dict[str, Convention]) -> dict[str, Convention]:
    """The conventions with the contracts op modules declare (an op's record `conventions`: an op
    that the families above do not define, added by its module alone)."""
    for op in OPS.values():
        for name, summary, knobs in op.conventions:
            old = conventions.get(name) or Convention(name, summary)
            conventions[name] = Convention(name, old.summary, {**old.contracts, op.name: Contract(op.name, **knobs)},
                                           old.eps_source)
    return conventions


CONVENTIONS = _with_op_contracts(CONVENTIONS)


def get_convention(name: str) -> Convention:
    if name not in CONVENTIONS:
        raise UsageError(unknown("convention", name, CONVENTIONS))
    return CONVENTIONS[name]


def get_contract(op: str, convention: str) -> Contract:
    return get_convention(convention).contract(op)


def defining(op: str) -> list[str]:
    """The conventions that define a contract for `op`, in their listed order (an unknown op raises)."""
    if op not in OPS:
        raise UsageError(unknown("op", op, OPS))
    return [c.name for c in CONVENTIONS.values() if op in c.contracts]


def op_conventions() -> list[tuple[str, str]]:
    """Every (op, convention) pair some convention defines."""
    return [(op, c.name) for c in CONVENTIONS.values() for op in c.contracts]


def float_op_conventions() -> list[tuple[str, str]]:
    """The pairs whose op returns floats in the case dtype and has a backward pass: every op but the
    quantizing ones (their q and scale are judged in the format's units, engine/quant_judge.py)."""
    return [(op, name) for op, name in op_conventions() if not OPS[op].quantizes]
