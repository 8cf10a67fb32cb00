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
from normdiff.harness.data.errors import UsageError, unknown
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


CONVENTIONS: dict[str, Convention] = {
    c.name: c
    for c in (
        define("qwen3", "plain gamma, Llama cast; QK-Norm per head before RoPE (HF Qwen3RMSNorm)",
               Contract("rms_norm", cast="llama"),
               Contract("qk_norm", cast="llama"),
               Contract("qk_norm_rope", cast="llama", rope_theta=1e6),
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
        # Not a model family: the framework built-ins' documented semantics, so that they can be
        # declared against a contract they really implement and measured beside the models'.
        define("torch", "framework built-ins: torch.nn.RMSNorm / F.rms_norm (plain gamma, one "
                        "rounding) and F.normalize (x / max(norm, eps), eps 1e-12)",
               Contract("rms_norm"),
               Contract("l2_norm", statistic="sum_square", eps_placement="clamp", eps=1e-12),
               eps_source="F.normalize's default eps=1e-12; the RMSNorm built-ins are given 1e-6 explicitly "
                          "(their eps=None means finfo(dtype).eps, which depends on the dtype)"),
    )
}


def get_convention(name: str) -> Convention:
    if name not in CONVENTIONS:
        raise UsageError(unknown("convention", name, CONVENTIONS))
    return CONVENTIONS[name]


def get_contract(op: str, convention: str) -> Contract:
    return get_convention(convention).contract(op)


def op_conventions() -> list[tuple[str, str]]:
    """Every (op, convention) pair some convention defines."""
    return [(op, c.name) for c in CONVENTIONS.values() for op in c.contracts]
