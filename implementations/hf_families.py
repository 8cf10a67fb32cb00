"""The HF family table: which transformers classes implement which op for each model family, and
how each is called. Pure data (no torch, no transformers), so that listing the registry
(catalog.py) never imports either; implementations/hf.py loads a family's classes inside the torch
worker and calls them by the `how` each part names.
"""
from __future__ import annotations

from dataclasses import dataclass

from normdiff.harness.data.ops import OPS  # pure data too
from normdiff.text import general

# how a part is called (hf.py has one method per way)
MODULE = "module"  # a norm class built from its `init` (Cls(width, eps=eps)), forward(*the op's module_call)
FLOAT32_FUNCTION = "float32_function"  # f(x.float(), dim=-1, eps=eps), as the gated delta rule calls l2norm
ATTENTION = "attention"  # q_norm / k_norm hooked inside the family's attention class
ROTARY_ATTENTION = "rotary_attention"  # the attention path, then the family's RoPE on q_norm's output

# what a MODULE class's constructor receives, in this order: "width" positionally (x's last axis),
# the rest by keyword: "group_size" (width // the case's groups, on its head axis), "eps"
INIT_ARGS = ("width", "group_size", "eps")
# the op's per-case float operands a class can hold as parameters of the same name
PARAMETERS = ("weight", "bias")
# A parameter a class lacks must hold the identity: the regime (cases/regimes.py) that draws it, and
# what it is said to be otherwise. Decided from the case's regimes, before anything is drawn or run.
IDENTITY_REGIMES = {"weight": ("ones", "not all ones (offset + w)"), "bias": ("zeros", "nonzero")}
CONSTANT_REGIMES = {"zeros": 0.0, "ones": 1.0}  # the regimes that draw one constant, and it
# transformers' RoPE validation (modeling_rope_utils) refuses an attention config whose RoPE rotates
# the whole of an odd head_dim above this (it lets its tiny test fixtures, head_dim <= 4, through)
ODD_HEAD_DIM_ALLOWED = 4


@dataclass(frozen=True)
class Part:
    """One class or function of a family, and how it is called.

    init    (MODULE) the constructor's arguments, from INIT_ARGS: Cls(width, eps=eps) by default,
            Cls(width, group_size=..., eps=eps) for a grouped norm, Cls(eps=eps) for a weightless
            one, Cls(width) for a class that hard-codes its eps.
    params  (MODULE) which of the op's parameter operands (weight, bias) the class holds; None: all
            the op has. Each held one gets the case's bits copied in. One the class lacks must be the
            identity (offset + weight all ones, bias all zeros), which the adapter applies after the
            class (exact, so the output keeps the class's bits, and autograd gives its gradient);
            a case with any other value is refused, naming the class and the operand.
    eps     the eps a class without an "eps" argument hard-codes; a case with another is refused.
    """

    name: str  # the name in the modeling module
    how: str
    init: tuple[str, ...] = ("width", "eps")
    params: tuple[str, ...] | None = None
    eps: float | None = None

    def __post_init__(self) -> None:
        if any(arg not in INIT_ARGS for arg in self.init):
            raise ValueError(f"{self.name}: init {self.init} names arguments outside {INIT_ARGS}")
        if self.params is not None and any(p not in PARAMETERS for p in self.params):
            raise ValueError(f"{self.name}: params {self.params} names operands outside {PARAMETERS}")
        if ("eps" in self.init) == (self.eps is not None):
            raise ValueError(f"{self.name}: give eps exactly when the class takes no eps argument")

    def holds(self, operands: tuple[str, ...]) -> tuple[str, ...]:
        """The op's parameter operands (of `operands`) that this class holds as parameters."""
        present = tuple(o for o in operands if o in PARAMETERS)
        return present if self.params is None else tuple(o for o in present if o in self.params)

    def lacks(self, operands: tuple[str, ...]) -> tuple[str, ...]:
        """The op's parameter operands the class has no parameter for (applied as identities)."""
        held = self.holds(operands)
        return tuple(o for o in operands if o in PARAMETERS and o not in held)

    def refusal(self, op: str, case) -> str | None:
        """(MODULE) Why the class cannot take `case`, or None: an operand it has no parameter for
        that is not the identity, or an eps other than the one it hard-codes."""
        for name in self.lacks(OPS[op].inputs):
            if not is_identity(name, case):
                identity, otherwise = IDENTITY_REGIMES[name]
                return (f"{self.name} has no {name} parameter, so it cannot apply this case's {name}, "
                        f"which is {otherwise}; run it with {name}={identity}")
        if self.eps is not None and case.contract.eps != self.eps:
            return (f"{self.name} hard-codes eps={general(self.eps)}; this case asks for "
                    f"eps={general(case.contract.eps)}")
        return None


def is_identity(name: str, case) -> bool:
    """Whether the case's `name` operand (weight or bias) is drawn as its identity: offset + w = 1,
    b = 0 (only a constant regime can be)."""
    value = CONSTANT_REGIMES.get(case.choice(name))
    if value is None:
        return False
    return value + case.contract.weight_offset == 1.0 if name == "weight" else value == 0.0


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
    # the share of each head its attention config's RoPE rotates (partial_rotary_factor: 0.25 for
    # Qwen3.5 and Qwen3-Next), which decides whether transformers builds it at an odd head_dim
    rotary_fraction: float = 1.0
    heads_first: bool = False  # q_norm sees (batch, heads, tokens, head_dim) (Gemma3)
    # (op, Part) for the ops the fields above do not cover, or where their default way does not fit
    # (a LayerNorm without a bias, a grouped norm's constructor, a weightless L2 norm class); these
    # override the fields' parts for the same op
    parts: tuple[tuple[str, Part], ...] = ()
    # the implementation is hf-<name>; "" : hf-<convention> (a second family on one convention needs
    # its own name)
    name: str = ""

    @property
    def label(self) -> str:
        return self.name or self.convention

    def ops(self) -> dict[str, Part]:
        """op -> the part that implements it, for the ops this family has."""
        parts = {"rms_norm": Part(self.norm, MODULE), "gated_rms_norm": Part(self.gated, MODULE),
                 "l2_norm": Part(self.l2norm, FLOAT32_FUNCTION), "qk_norm": Part(self.attention, ATTENTION),
                 "qk_norm_rope": Part(self.rotary if self.attention else "", ROTARY_ATTENTION),
                 **dict(self.parts)}
        return {op: part for op, part in parts.items() if part.name}

    def refusal(self, op: str, case) -> str | None:
        """Why this family's layer cannot take `case` of `op` (one it implements), or None: declared
        before any call, so the case is `unsupported` with this reason rather than an error."""
        part = self.ops()[op]
        if part.how == MODULE:
            return part.refusal(op, case)
        if part.how in (ATTENTION, ROTARY_ATTENTION):
            return self.head_dim_refusal(case.head_dim)
        return None

    def head_dim_refusal(self, head_dim: int) -> str | None:
        """transformers builds no attention whose RoPE rotates the whole of an odd head_dim (> 4)."""
        if head_dim % 2 and head_dim > ODD_HEAD_DIM_ALLOWED and int(head_dim * self.rotary_fraction) == head_dim:
            return (f"transformers refuses a {self.attention} config with an odd head_dim ({head_dim}): its RoPE "
                    f"rotates the whole head, in pairs, so the attention that holds q_norm cannot be built")
        return None

    def names(self) -> list[str]:
        """Every name the family needs from its modeling module."""
        ways = {part.how for part in self.ops().values()}
        return list(dict.fromkeys(
            [part.name for part in self.ops().values()]
            + ([self.config] if self.attention else [])
            + ([self.attention, self.apply_rope] if ROTARY_ATTENTION in ways else [])))

    def description(self) -> str:
        names = []
        for op, p in self.ops().items():
            if p.how == ROTARY_ATTENTION:
                continue
            if p.how == ATTENTION:
                names.append(f"q_norm through {p.name}")
                continue
            lacks = p.lacks(OPS[op].inputs) if p.how == MODULE else ()
            notes = [f"no {' or '.join(lacks)}"] if lacks else []
            notes += [f"eps {general(p.eps)} fixed"] if p.eps is not None else []
            names.append(p.name + (f" ({', '.join(notes)})" if notes else ""))
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
                      gated_query=True, rotary_fraction=0.25),
    "qwen3_next": Family("qwen3-next", _MODELS + "qwen3_next.modeling_qwen3_next", "Qwen3NextConfig",
                         "Qwen3NextRMSNorm", "Qwen3NextRMSNormGated", "l2norm", "Qwen3NextAttention",
                         gated_query=True, rotary_fraction=0.25),
    "olmo2": Family("olmo2", _MODELS + "olmo2.modeling_olmo2", "Olmo2Config", "Olmo2RMSNorm",
                    attention="Olmo2Attention"),
    "gemma3": Family("gemma3", _MODELS + "gemma3.modeling_gemma3", "Gemma3TextConfig",
                     "Gemma3RMSNorm", attention="Gemma3Attention", heads_first=True),
    "llama": Family("llama", _MODELS + "llama.modeling_llama", norm="LlamaRMSNorm"),
    # Gemma3nRMSNorm(dim, eps, with_scale=True): plain gamma, all float32 (torch.pow(ms, -0.5), not
    # rsqrt); its q_norm / k_norm see (batch, tokens, heads, head_dim)
    "gemma3n": Family("gemma3n", _MODELS + "gemma3n.modeling_gemma3n", "Gemma3nTextConfig", "Gemma3nRMSNorm",
                      attention="Gemma3nTextAttention"),
    "deepseek_v3": Family("deepseek-v3", _MODELS + "deepseek_v3.modeling_deepseek_v3", norm="DeepseekV3RMSNorm"),
    # CohereLayerNorm(hidden_size, eps): a weight, no bias (its `bias` argument is ignored)
    "cohere": Family("cohere", _MODELS + "cohere.modeling_cohere",
                     parts=(("layer_norm", Part("CohereLayerNorm", MODULE, params=("weight",))),)),
    # OlmoLayerNorm(hidden_size): F.layer_norm in float32 with no weight, no bias and eps=1e-5 written in
    "olmo": Family("olmo", _MODELS + "olmo.modeling_olmo",
                   parts=(("layer_norm", Part("OlmoLayerNorm", MODULE, init=("width",), params=(), eps=1e-5)),)),
    # MambaRMSNormGated(hidden_size, group_size, eps), forward(hidden_states, gate)
    "mamba2": Family("mamba2", _MODELS + "mamba2.modeling_mamba2", parts=(
        ("group_gated_rms_norm", Part("MambaRMSNormGated", MODULE, init=("width", "group_size", "eps"))),)),
    # Llama4TextL2Norm(eps): weightless, x.float() normalised, .type_as(x)
    "llama4": Family("llama4", _MODELS + "llama4.modeling_llama4",
                     parts=(("l2_norm", Part("Llama4TextL2Norm", MODULE, init=("eps",))),)),
}

# Further families on a convention that a family above already names: other classes, the same
# contract (their code is line for line MambaRMSNormGated's; Zamba2 builds its norm with eps=1e-5,
# the convention's). Each is the implementation hf-<name>.
FAMILIES.update({
    attr: Family("mamba2", _MODELS + module, name=name, parts=(
        ("group_gated_rms_norm", Part(cls, MODULE, init=("width", "group_size", "eps"))),))
    for attr, name, module, cls in (
        ("bamba", "bamba", "bamba.modeling_bamba", "BambaRMSNormGated"),
        ("zamba2", "zamba2", "zamba2.modeling_zamba2", "Zamba2RMSNormGated"),
        ("nemotron_h", "nemotron-h", "nemotron_h.modeling_nemotron_h", "NemotronHRMSNormGated"),
    )
})
