"""The whole-model table: for each family `normdiff model` runs, the transformers config and model
classes, a small config (a few layers, small widths: nothing is downloaded), and the norm sites,
each matched by the end of its module path and tied to the op and convention it computes.

Pure data (no torch, no transformers), like hf_families.py: the CLI validates --family and the
kinds against it before any worker starts; implementations/hf_model.py builds and runs the model
inside the torch worker.

A site's *kind* is what the user swaps with one option: `norm` (--norm: the family's main norm, an
RMSNorm or, for GPT-NeoX, a LayerNorm), `qk` (--qk: q_norm / k_norm), `gated` (--gated: the linear
attention's or the Mamba2 mixer's gated norm), `l2` (--l2: the gated delta rule's l2norm of q and
k, a module-level function rather than a module) and `add` (--add: each norm after a branch and
the residual add before it as one fused call, vLLM's fused_add_rms_norm: x is the attention's or
the MLP's output, residual the running sum; those norm modules are `norm` sites unless --add is
given, and layer 0's input_layernorm always is) and `rope`
(--rope: q_norm / k_norm and the RoPE after them as one call, qk_norm_rope; the norms alone are `qk`
sites unless --rope is given); `quant` and `add_quant` (a quantizing norm, rms_norm_quant and
add_rms_norm_quant, at the norms vLLM's FP8 serving fuses with the quantization of their output:
QUANTIZED below), each at a quantizing convention the run picks among those whose norm part is the
family's (`fits`).
"""
from __future__ import annotations

from dataclasses import dataclass

from normdiff.harness.data import knobs as K
from normdiff.harness.data.contracts import Contract
from normdiff.harness.data.conventions import defining, get_contract
from normdiff.harness.data.errors import UsageError
from normdiff.harness.data.ops.record import WEIGHTED_KNOBS

# kind -> what its option swaps in (the CLI's --KIND help)
KINDS = {
    "norm": "the main norm (RMSNorm; GPT-NeoX's LayerNorm)",
    "qk": "q_norm and k_norm",
    "gated": "the gated norm (Qwen3.5's linear attention, the Mamba2 mixer's)",
    "l2": "Qwen3.5's l2norm of q and k",
    "add": "each residual add and the norm after it as one fused call, as vLLM's decoder runs them (fused_add_rms_norm)",
    "rope": "q_norm / k_norm and the RoPE after them as one call (qk_norm_rope)",
    "quant": "the norms before a quantized linear (input_layernorm, post_attention_layernorm) fused with the FP8 / "
             "INT8 / MX quantization of their output (rms_norm_quant); the model goes on with q * scale",
    "add_quant": "those norms with the residual add before them too, as vLLM's FP8 decoder runs them "
                 "(add_rms_norm_quant)",
}

# how a site's input maps onto the op's x of shape (rows, width):
ROWS = "rows"  # (..., width): every leading axis is a row
HEADS = "heads"  # (batch, tokens, heads, head_dim) -> (batch * tokens, heads * head_dim)
HEADS_FIRST = "heads_first"  # (batch, heads, tokens, head_dim), as Gemma3's attention lays q out
FULL_VECTOR = "full_vector"  # (batch, tokens, heads * head_dim): OLMo2's q_norm over the whole projection


@dataclass(frozen=True)
class SiteRule:
    suffix: str  # the module path ends with it ("input_layernorm", "self_attn.q_norm"); a function's name
    kind: str
    op: str
    convention: str
    layout: str = ROWS
    heads: str = ""  # the config field that gives the site's heads (num_attention_heads, n_groups)
    function: str = ""  # a module-level function of the modeling module (l2norm), not a module
    caller: str = ""  # (function) the module whose forward calls it, named in the site's path
    # (add) the decoder layer's branch modules, whose outputs are added to the residual stream (the
    # fused call's x); `first_plain`: the first module matched stays a plain norm (layer 0's
    # input_layernorm: nothing has been added to the stream yet)
    fuses: tuple[str, ...] = ()
    first_plain: bool = False
    rotary: str = ""  # (rope) the modeling module's RoPE function the attention applies after the norm
    # (quant, add_quant) the op@convention the model's own class computes there: the plain norm the
    # quantizing op fuses, at the family's convention (the unswapped run is judged at it, and a
    # quantizing convention stands at the site only when its norm part fits it); `convention` is
    # the quantizing convention a run uses when it names none
    own: tuple[str, str] = ()

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"{self.suffix}: kind {self.kind!r} is not one of {tuple(KINDS)}")

    @property
    def swapped_only(self) -> bool:
        """A rule that takes its module only when its kind is swapped (a fused, rotary or quantizing
        site); else the module is its plain rule's."""
        return bool(self.fuses or self.rotary or self.own)

    @property
    def own_pair(self) -> tuple[str, str]:
        """The (op, convention) the model's own class computes at the site."""
        return self.own or (self.op, self.convention)

    def conventions(self) -> list[str]:
        """The conventions the site may run at: its own, or (a quantizing site) every convention of
        its op whose norm part fits the family's norm, the default first."""
        if not self.own:
            return [self.convention]
        norm = get_contract(*self.own)
        fitting = [c for c in defining(self.op) if fits(get_contract(self.op, c), norm)]
        return sorted(fitting, key=lambda c: c != self.convention)


# A quantizing convention stands at a family's norm site when the y it quantizes is the family's y:
# every knob of the plain norm (rms_norm's) agrees with the family's norm contract, but eps (each
# site runs at its module's eps) and, where the contract keeps y in float32 until it is quantized
# (quant_input "float32"), the cast: y is never rounded to the model's dtype there, so where the
# cast would round it does not apply. A convention that rounds y to the input dtype first must
# round it where the family does: vllm-fp8's y = bf16(bf16(x * rms) * w) is the Llama cast, that of
# Llama's, Qwen3's and vLLM's own RMSNorm. DeepSeek-V3's act_quant quantizes the output of
# DeepSeek's own norm (one rounding), which HF's DeepseekV3RMSNorm (the Llama cast) is not: no
# family built here fits deepseek-v3-fp8, and `normdiff model` says so rather than mixing them.
_FREE = ("eps", "cast")
NORM_KNOBS = K.in_groups(WEIGHTED_KNOBS)  # a weighted norm's knobs: the statistic and the gain (no residual's)


def fits(quantizing: Contract, norm: Contract) -> bool:
    """Whether a quantizing contract's norm part is the family norm's (the comment above)."""
    free = _FREE if quantizing.quant_input == "float32" else _FREE[:1]
    return all(getattr(quantizing, k) == getattr(norm, k) for k in NORM_KNOBS if k not in free)


@dataclass(frozen=True)
class ModelFamily:
    name: str  # as --family takes it
    config: str  # transformers config class
    model: str  # transformers causal-LM class
    settings: tuple[tuple[str, object], ...]  # the small config
    sites: tuple[SiteRule, ...]
    modeling: str = ""  # the modeling module, where a function site's function lives
    final: str = "model.norm"  # the final norm's path (its weights are drawn as a final norm's)
    embedding: str = "model.embed_tokens"
    # the config field of the norms' eps, set to the norm convention's (Llama's 1e-5, not
    # LlamaConfig's default 1e-6: a hard-coded 1e-6 must be caught); "" where the class writes it in
    eps_field: str = "rms_norm_eps"

    def norm_eps(self) -> float:
        ((op, convention),) = self.ops("norm")
        return get_contract(op, convention).eps

    def kinds(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(rule.kind for rule in self.sites))

    def plain_kinds(self) -> tuple[str, ...]:
        """The kinds of the model's own modules, each computing its op alone (not the fused, rotary or
        quantizing kinds, whose sites are there only when swapped)."""
        return tuple(dict.fromkeys(rule.kind for rule in self.sites if not rule.swapped_only))

    def rule_for(self, path: str, kinds=()) -> SiteRule | None:
        """The rule of the module at `path`, if it is a norm site: the longest suffix that matches
        ("linear_attn.norm" before "norm"); of two on the same module, a fused one only when its
        kind is among `kinds` (those swapped)."""
        matches = [r for r in self.sites if not r.function and (path == r.suffix or path.endswith("." + r.suffix))]
        if not matches:
            return None
        longest = max(len(r.suffix) for r in matches)
        best = [r for r in matches if len(r.suffix) == longest]
        # of several swapped on one module: a quantizing kind first (with --add, add_quant takes the norms
        # before the linears and --add keeps the final norm, which is not quantized), then the one that
        # also fuses the add (add_quant before quant)
        swapped = sorted((r for r in best if r.swapped_only and r.kind in kinds),
                         key=lambda r: (not r.own, not r.fuses))
        return swapped[0] if swapped else next(r for r in best if not r.swapped_only)

    def first_rule(self, path: str, kinds=()) -> SiteRule | None:
        """The rule of the first module a `first_plain` rule matches (layer 0's input_layernorm:
        nothing has been added to the stream yet): the next swapped kind's there, else the plain one."""
        rule = self.rule_for(path, kinds)
        if rule is None or not rule.first_plain:
            return rule
        return self.first_rule(path, tuple(k for k in kinds if k != rule.kind))

    def shadowed(self, kinds) -> dict[str, tuple[str, ...]]:
        """kind -> the kinds that take every one of its modules when they are swapped with it (--qk
        with --rope: every q_norm and k_norm becomes a rope site, and --qk has nothing left)."""
        out = {}
        for kind in kinds:
            suffixes = dict.fromkeys(r.suffix for r in self.sites if r.kind == kind and not r.function)
            taking = [{self.rule_for(s, kinds).kind, self.first_rule(s, kinds).kind} for s in suffixes]
            if suffixes and all(kind not in t for t in taking):
                out[kind] = tuple(dict.fromkeys(k for t in taking for k in sorted(t)))
        return out

    def unfused(self, kinds) -> str | None:
        """A swapped kind that takes a norm the swapped fused kinds need fused: their running sum
        passes every norm after a branch (ResidualStream), so --add with --quant alone would leave
        the adds before quant's sites to the model and feed the final norm's fused add a stale sum."""
        for suffix in dict.fromkeys(r.suffix for r in self.sites if r.fuses and r.kind in kinds):
            rule = self.rule_for(suffix, kinds)
            if not rule.fuses:
                return rule.kind
        return None

    def ops(self, kind: str) -> list[tuple[str, str]]:
        """The (op, convention) pairs this family's sites of `kind` may compute (a quantizing kind's:
        each fitting convention, the default first)."""
        return list(dict.fromkeys((r.op, c) for r in self.sites if r.kind == kind for c in r.conventions()))


_SMALL = (("vocab_size", 256), ("hidden_size", 256), ("intermediate_size", 512), ("num_hidden_layers", 4),
          ("num_attention_heads", 4), ("num_key_value_heads", 2), ("head_dim", 64), ("max_position_embeddings", 256),
          ("tie_word_embeddings", False))
_MODELS = "transformers.models."


def _norms(suffixes: str, convention: str, op: str = "rms_norm", kind: str = "norm") -> tuple[SiteRule, ...]:
    """One rule per module suffix (space-separated), all of one op: RMSNorms, or LayerNorms."""
    return tuple(SiteRule(s, kind, op, convention) for s in suffixes.split())


def _qk(convention: str, layout: str) -> tuple[SiteRule, ...]:
    return (SiteRule("self_attn.q_norm", "qk", "qk_norm", convention, layout, "num_attention_heads"),
            SiteRule("self_attn.k_norm", "qk", "qk_norm", convention, layout, "num_key_value_heads"))


def _add(convention: str) -> tuple[SiteRule, ...]:
    """vLLM's decoder: every norm after a branch is fused with the residual add before it."""
    branches = ("self_attn", "mlp")
    return (SiteRule("input_layernorm", "add", "add_rms_norm", convention, fuses=branches, first_plain=True),
            SiteRule("post_attention_layernorm", "add", "add_rms_norm", convention, fuses=branches),
            SiteRule("norm", "add", "add_rms_norm", convention, fuses=branches))


QUANT_DEFAULT = "vllm-fp8"  # vLLM's dynamic per-token FP8: what a quantizing site runs at unless told


def _quant(norm: str, add: str = "") -> tuple[SiteRule, ...]:
    """QUANTIZED: vLLM's FP8 serving fuses the norm before each quantized linear with the
    quantization of its output (input_layernorm before qkv_proj, post_attention_layernorm before
    gate_up_proj), and the residual add before it too where the decoder adds then normalises
    (add_quant: every one of them but layer 0's input_layernorm, as `add`). The linear computes with
    q * scale. Not here: q_norm / k_norm (they act on the projection's output, inside the attention)
    and the final norm (lm_head stays unquantized in FP8 checkpoints: vLLM runs it as a plain fused add).
    `add`: the family's add_rms_norm convention (none: no add_quant sites). The families with them
    are the dense pre-norm decoders whose norm vllm-fp8 fits (Llama, Qwen3, vLLM's Qwen3); OLMo2's
    are post-norms (no linear reads them), Gemma3's and Qwen3.5's (1 + w) fit no quantizing
    convention, and DeepSeek-V3's post-attention norm feeds its MoE router, which reads it unquantized."""
    branches = ("self_attn", "mlp")
    suffixes = ("input_layernorm", "post_attention_layernorm")
    fused = tuple(SiteRule(s, "add_quant", "add_rms_norm_quant", QUANT_DEFAULT, fuses=branches,
                           first_plain=s == "input_layernorm", own=("add_rms_norm", add)) for s in suffixes)
    plain = tuple(SiteRule(s, "quant", "rms_norm_quant", QUANT_DEFAULT, own=("rms_norm", norm)) for s in suffixes)
    return plain + (fused if add else ())


def _rope(convention: str) -> tuple[SiteRule, ...]:
    return tuple(SiteRule(f"self_attn.{which}_norm", "rope", "qk_norm_rope", convention, HEADS, heads,
                          rotary="apply_rotary_pos_emb")
                 for which, heads in (("q", "num_attention_heads"), ("k", "num_key_value_heads")))


# Qwen3's RoPE base (transformers' Qwen3Config defaults to 1e4; the qwen3 convention's is Qwen3's 1e6)
_QWEN3 = _SMALL + (("rope_parameters", {"rope_type": "default", "rope_theta": 1e6}),)


FAMILIES: dict[str, ModelFamily] = {f.name: f for f in (
    ModelFamily("qwen3", "Qwen3Config", "Qwen3ForCausalLM", _QWEN3,
                _norms("input_layernorm post_attention_layernorm norm", "qwen3") + _qk("qwen3", HEADS)
                + _add("qwen3") + _rope("qwen3") + _quant("qwen3", "qwen3"), modeling=_MODELS + "qwen3.modeling_qwen3"),
    # the same model judged as vLLM serves it: its native RMSNorm, and fused_add_rms_norm keeping
    # x + residual in float32 for the variance (transformers' unfused code rounds it first: vLLM #52104)
    ModelFamily("vllm-qwen3", "Qwen3Config", "Qwen3ForCausalLM", _QWEN3,
                _norms("input_layernorm post_attention_layernorm norm", "vllm") + _qk("qwen3", HEADS)
                + _add("vllm") + _quant("vllm", "vllm")),
    # three linear-attention layers (gated norm, l2norm of q and k), then one full-attention layer
    ModelFamily("qwen3.5", "Qwen3_5TextConfig", "Qwen3_5ForCausalLM", _SMALL + (
        ("linear_num_value_heads", 4), ("linear_num_key_heads", 2), ("linear_key_head_dim", 64),
        ("linear_value_head_dim", 64), ("linear_conv_kernel_dim", 4)),
        _norms("input_layernorm post_attention_layernorm norm", "qwen3.5") + _qk("qwen3.5", HEADS)
        + (SiteRule("linear_attn.norm", "gated", "gated_rms_norm", "qwen3.5"),
           SiteRule("l2norm", "l2", "l2_norm", "qwen3.5", function="l2norm", caller="linear_attn")),
        modeling=_MODELS + "qwen3_5.modeling_qwen3_5"),
    ModelFamily("olmo2", "Olmo2Config", "Olmo2ForCausalLM", _SMALL + (("eos_token_id", 2), ("pad_token_id", 1)),
                _norms("post_attention_layernorm post_feedforward_layernorm norm", "olmo2")
                + _qk("olmo2", FULL_VECTOR)),
    ModelFamily("gemma3", "Gemma3TextConfig", "Gemma3ForCausalLM", _SMALL + (("sliding_window", 16),),
                _norms("input_layernorm post_attention_layernorm pre_feedforward_layernorm post_feedforward_layernorm "
                     "norm", "gemma3") + _qk("gemma3", HEADS_FIRST)),
    ModelFamily("llama", "LlamaConfig", "LlamaForCausalLM", _SMALL,
                _norms("input_layernorm post_attention_layernorm norm", "llama") + _quant("llama")),
    # nn.LayerNorm with a bias: the LayerNorm of GPT-NeoX / Pythia (convention torch = F.layer_norm)
    ModelFamily("gpt-neox", "GPTNeoXConfig", "GPTNeoXForCausalLM",
                tuple((k, v) for k, v in _SMALL if k not in ("num_key_value_heads", "head_dim")),
                _norms("input_layernorm post_attention_layernorm final_layer_norm", "torch", op="layer_norm"),
                final="gpt_neox.final_layer_norm", embedding="gpt_neox.embed_in", eps_field="layer_norm_eps"),
    # MLA: besides the block norms, RMSNorms on the latent q (q_lora_rank) and kv (kv_lora_rank) widths
    ModelFamily("deepseek-v3", "DeepseekV3Config", "DeepseekV3ForCausalLM", (
        ("vocab_size", 256), ("hidden_size", 256), ("intermediate_size", 512), ("moe_intermediate_size", 128),
        ("num_hidden_layers", 4), ("num_attention_heads", 4), ("num_key_value_heads", 4), ("q_lora_rank", 96),
        ("kv_lora_rank", 64), ("qk_rope_head_dim", 16), ("qk_nope_head_dim", 32), ("v_head_dim", 32),
        ("n_routed_experts", 4), ("num_experts_per_tok", 2), ("n_group", 1), ("topk_group", 1),
        ("first_k_dense_replace", 1), ("tie_word_embeddings", False)),
        _norms("input_layernorm post_attention_layernorm norm self_attn.q_a_layernorm self_attn.kv_a_layernorm",
             "deepseek-v3")),
    # CohereLayerNorm: a weight and no bias (the bias operand is the identity, zeros), parallel blocks
    ModelFamily("cohere", "CohereConfig", "CohereForCausalLM",
                tuple((k, v) for k, v in _SMALL if k != "head_dim") + (("eos_token_id", 2), ("pad_token_id", 1)),
                _norms("input_layernorm norm", "cohere", op="layer_norm"), eps_field="layer_norm_eps"),
    # OLMo-1: OlmoLayerNorm holds neither weight nor bias and writes eps=1e-5 in (no config field)
    ModelFamily("olmo", "OlmoConfig", "OlmoForCausalLM", _SMALL + (("eos_token_id", 2), ("pad_token_id", 1)),
                _norms("input_layernorm post_attention_layernorm norm", "olmo", op="layer_norm"), eps_field=""),
    # the mixer's grouped gated norm (MambaRMSNormGated, 2 groups); the block norms are Llama's code
    ModelFamily("mamba2", "Mamba2Config", "Mamba2ForCausalLM", (
        ("vocab_size", 256), ("hidden_size", 256), ("num_hidden_layers", 4), ("num_heads", 8), ("head_dim", 64),
        ("state_size", 16), ("n_groups", 2), ("expand", 2), ("chunk_size", 16), ("tie_word_embeddings", False)),
        _norms("norm norm_f", "llama")
        + (SiteRule("mixer.norm", "gated", "group_gated_rms_norm", "mamba2", heads="n_groups"),),
        final="backbone.norm_f", embedding="backbone.embeddings", eps_field="layer_norm_epsilon"),
)}


def get_family(name: str) -> ModelFamily:
    if name not in FAMILIES:
        raise UsageError(f"unknown --family {name!r}; the families normdiff model builds: {', '.join(FAMILIES)}")
    return FAMILIES[name]
