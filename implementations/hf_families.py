"""The HF family table: which transformers classes implement which op for each model family, and
how each is called. Pure data (no torch, no transformers), so that listing the registry
(catalog.py) never imports either; implementations/hf.py loads a family's classes inside the torch
worker and calls them by the `how` each part names.
"""
from __future__ import annotations

from dataclasses import dataclass

# how a part is called (hf.py has one method per way)
MODULE = "module"  # a norm class built as Cls(width, eps=eps), forward(*the op's module_call)
FLOAT32_FUNCTION = "float32_function"  # f(x.float(), dim=-1, eps=eps), as the gated delta rule calls l2norm
ATTENTION = "attention"  # q_norm / k_norm hooked inside the family's attention class
ROTARY_ATTENTION = "rotary_attention"  # the attention path, then the family's RoPE on q_norm's output


@dataclass(frozen=True)
class Part:
    name: str  # the name in the modeling module
    how: str


@dataclass(frozen=True)
class Family:
    """Where one model family's layers live in transformers, and how its attention lays out q."""

    convention: str
    module: str  # the modeling module, imported only when this family's adapter is loaded
    config: str = ""  # config class as imported into the modeling module (for the attention)
    norm: str = ""  # the RMSNorm class
    gated: str = ""  # the gated RMSNorm class
    l2norm: str = ""  # the l2norm function
    attention: str = ""  # the attention class whose q_norm / k_norm is measured
    rotary: str = ""  # the rotary embedding class (with the attention above)
    apply_rope: str = "apply_rotary_pos_emb"  # the modeling module's RoPE function
    gated_query: bool = False  # q_proj emits (query, gate) per head (Qwen3.5, Qwen3-Next)
    heads_first: bool = False  # q_norm sees (batch, heads, tokens, head_dim) (Gemma3)

    def ops(self) -> dict[str, Part]:
        """op -> the part that implements it, for the ops this family has."""
        parts = {"rms_norm": Part(self.norm, MODULE), "gated_rms_norm": Part(self.gated, MODULE),
                 "l2_norm": Part(self.l2norm, FLOAT32_FUNCTION), "qk_norm": Part(self.attention, ATTENTION),
                 "qk_norm_rope": Part(self.rotary if self.attention else "", ROTARY_ATTENTION)}
        return {op: part for op, part in parts.items() if part.name}

    def names(self) -> list[str]:
        """Every name the family needs from its modeling module."""
        ways = {part.how for part in self.ops().values()}
        return ([part.name for part in self.ops().values()]
                + ([self.config] if self.attention else [])
                + ([self.attention, self.apply_rope] if ROTARY_ATTENTION in ways else []))

    def description(self) -> str:
        names = [p.name if p.how != ATTENTION else f"q_norm through {p.name}" for p in self.ops().values()
                 if p.how != ROTARY_ATTENTION]
        if any(p.how == ROTARY_ATTENTION for p in self.ops().values()):
            names.append(f"q_norm then {self.apply_rope} with {self.rotary}")
        return "transformers " + ", ".join(names)


_MODELS = "transformers.models."
# registry attribute (`normdiff.implementations.hf:<key>`) -> family
FAMILIES: dict[str, Family] = {
    "qwen3": Family("qwen3", _MODELS + "qwen3.modeling_qwen3", "Qwen3Config", "Qwen3RMSNorm",
                    attention="Qwen3Attention", rotary="Qwen3RotaryEmbedding"),
    "qwen3_5": Family("qwen3.5", _MODELS + "qwen3_5.modeling_qwen3_5", "Qwen3_5TextConfig",
                      "Qwen3_5RMSNorm", "Qwen3_5RMSNormGated", "l2norm", "Qwen3_5Attention",
                      gated_query=True),
    "qwen3_next": Family("qwen3-next", _MODELS + "qwen3_next.modeling_qwen3_next", "Qwen3NextConfig",
                         "Qwen3NextRMSNorm", "Qwen3NextRMSNormGated", "l2norm", "Qwen3NextAttention",
                         gated_query=True),
    "olmo2": Family("olmo2", _MODELS + "olmo2.modeling_olmo2", "Olmo2Config", "Olmo2RMSNorm",
                    attention="Olmo2Attention"),
    "gemma3": Family("gemma3", _MODELS + "gemma3.modeling_gemma3", "Gemma3TextConfig",
                     "Gemma3RMSNorm", attention="Gemma3Attention", heads_first=True),
    "llama": Family("llama", _MODELS + "llama.modeling_llama", norm="LlamaRMSNorm"),
}
