"""The real HuggingFace `transformers` layers, built from small configs in code: nothing downloads.

One adapter per model family, named by the attribute the registry entry points at
("normdiff.implementations.hf:qwen3"). The attribute is resolved by this module's `__getattr__`,
which imports only that family's modeling module (the first costs ~1.6 s of shared transformers
machinery after torch, each further one 5-20 ms) and checks that every class the family needs is
there. A missing class raises ImportError naming it and the installed transformers version, which
the worker reports as `unavailable` with that reason: nothing is skipped silently.

How each op reaches the real code (weights are parameters in the case dtype, as in a model loaded
in that dtype, and receive the case's exact bits):
  rms_norm        the family's RMSNorm class (Qwen3RMSNorm, Qwen3_5RMSNorm, Olmo2RMSNorm,
                  Gemma3nRMSNorm, DeepseekV3RMSNorm, ...).
  gated_rms_norm  the RMSNormGated class (Qwen3.5, Qwen3-Next linear attention).
  group_gated_rms_norm  the Mamba2 mixer's grouped gated norm (MambaRMSNormGated, and Bamba's,
                  Zamba2's and NemotronH's copies of it), built as Cls(width, group_size=width //
                  groups, eps=eps) (the case's heads are the groups) and called forward(x, gate).
  layer_norm      the family's LayerNorm class: CohereLayerNorm(width, eps=eps) holds a weight and
                  no bias; OlmoLayerNorm(width) holds neither and hard-codes eps=1e-5 (a case with
                  another eps is refused). An operand the class has no parameter for must hold the
                  identity (weight all ones, bias all zeros), else the call is refused with a
                  ValueError naming the class and the operand; it is then applied after the class
                  (y * w + b, exact on the identity, so the output keeps the class's bits), which
                  gives autograd its gradient (`Identity`).
  l2_norm         the modeling module's `l2norm` function, called as the model calls it: the gated
                  delta rule upcasts q and k to float32 before `l2norm` (both the chunked and the
                  recurrent path), so x is upcast here too and the float32 result rounded to the
                  case dtype for comparison. (`l2norm` itself computes in its input's dtype.)
                  Llama4's weightless Llama4TextL2Norm(eps=eps) is a class, called on x.
  qk_norm         through the real attention module: an `XxxAttention` built from a small config
                  (hidden = heads * head_dim, as many key/value heads as query heads, no bias, eps
                  from the contract, eager attention), its four projections replaced by exact
                  identities (IdentityProjection) and the case weight copied into q_norm and k_norm. x goes in as hidden_states
                  (1, T, H*D): rows become tokens, which are independent up to the norms because the
                  projections are per token and nothing mixes tokens before q_norm (so batching
                  rows is safe). Forward hooks capture q_norm's and k_norm's input and output; the
                  input must equal x bit for bit (checked on every call) and k's output must equal q's (same weight); q's output is returned. This
                  exercises the real reshape to heads (per head for Qwen3/Qwen3.5/Qwen3-Next/Gemma3/
                  Gemma3n, the full H*D vector for OLMo2). Qwen3.5 and Qwen3-Next have a gated q_proj
                  that emits (query, gate) per head: its stand-in puts x in each head's query half and
                  zeros in the gate half, an exact selection, so these run through the attention
                  module too. Position embeddings are position 0 (cos 1, sin 0) and the
                  mask is causal; both act after the hooks, so neither changes the result.
  qk_norm_rope    the qk_norm path above, run with real position embeddings: the family's rotary
                  class (Qwen3RotaryEmbedding) built from a small config with the contract's
                  rope_theta (checked against its inv_freq, so a config that ignored the value cannot
                  pass unnoticed) gives (cos, sin) for position_ids = the case positions, which go
                  into the attention, and the modeling module's own `apply_rotary_pos_emb` is applied
                  to the hooked q_norm output in the attention's layout (batch, heads, tokens, D):
                  the same call, on the same tensors, that the attention makes next.
How a class is built and which operands it holds is the family table's `Part` (init, params, eps).
The projections are not what is measured, so they are not matmuls with an identity matrix (which
were most of a qk_norm call's time, whose bf16 GEMM flushes bf16 subnormals to zero on some CPUs,
and whose -0 * 1 + 0 turned a signed zero into +0): IdentityProjection passes x's exact values.

The backward pass (`FamilyAdapter.backward`, registry entries "normdiff.implementations.hf:qwen3.backward"
etc.) is torch's autograd through the same `forward` path: the norm's own derivative as the model
trains with it, the weight's gradient the real parameter's (in the case dtype). Through the
attention only the hooked q_norm output is differentiated, and x's gradient is taken at q_norm's
input (which is x bit for bit, checked on every call), laid back out as (tokens, H*D), rather than
back through the projections: the scaffolding must not add to what is measured (a matmul's
transpose would turn an overflowed fp16 gradient into inf * 0 = NaN across its row). A q_norm weight that `fit_weight` tiled over the heads gets its gradient summed back over
them. Under autograd the hooks hand the rest of the attention q_norm's and k_norm's outputs
detached (the same values), so no graph is kept beyond them. Modules are built outside inference
mode, so the cached ones serve both passes.

The RMSNorm classes carry `use_kernel_forward_from_hub`, which swaps in a hub kernel only when the
`kernels` package is installed and a model is explicitly kernelized; neither happens here, and
HF_HUB_OFFLINE is set in the worker so that nothing can try to download.
"""
from __future__ import annotations

import contextlib
import importlib
import os
from importlib import metadata

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers is imported: never reach a hub

import torch  # noqa: E402  (only ever imported inside the torch worker)

from normdiff.cases.model import CaseInputs  # noqa: E402
from normdiff.harness.data.contracts import Contract  # noqa: E402
from normdiff.harness.data.ops import OPS  # noqa: E402
from normdiff.implementations.frameworks.torch import autograd_vjp, fold  # noqa: E402
from normdiff.implementations.frameworks.torch import from_numpy as to_torch  # noqa: E402
from normdiff.text import general, number  # noqa: E402
from normdiff.implementations.hf_families import (  # noqa: E402
    ATTENTION, FAMILIES, FLOAT32_FUNCTION, IDENTITY_REGIMES, MODULE, ROTARY_ATTENTION, Family, Part)

# every family the adapters serve, by registry attribute (hf_families.py says why two tables)
_ALL = FAMILIES


def transformers_version() -> str:
    try:
        return metadata.version("transformers")
    except metadata.PackageNotFoundError:
        return "(not installed)"


def load(family: Family) -> "FamilyAdapter":
    """Import the family's modeling module and resolve its names; ImportError says what is missing."""
    try:
        module = importlib.import_module(family.module)
    except ImportError as exc:
        raise ImportError(f"transformers {transformers_version()} has no {family.module} "
                          f"({exc})") from exc
    missing = [name for name in family.names() if not hasattr(module, name)]
    if missing:
        raise ImportError(f"{', '.join(missing)} not found in {family.module} "
                          f"(transformers {transformers_version()})")
    return FamilyAdapter(family, {name: getattr(module, name) for name in family.names()})


_LOADED: dict[str, "FamilyAdapter"] = {}


def __getattr__(name: str):
    """`hf.qwen3` etc.: the family's adapter, imported on first access (PEP 562)."""
    if name not in _ALL:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if name not in _LOADED:
        _LOADED[name] = load(_ALL[name])
    return _LOADED[name]


# ---------------------------------------------------------------------------------------------
# Attention with identity projections


def identity_attention(attention_cls, config_cls, heads: int, head_dim: int, eps: float,
                       dtype: torch.dtype, gated_query: bool) -> torch.nn.Module:
    """The real attention module, sized for the case, its projections exact identities: q_norm and
    k_norm see x itself, whatever its values (subnormals included), with no matmul to pay for."""
    width = heads * head_dim
    config = config_cls(hidden_size=width, num_attention_heads=heads, num_key_value_heads=heads,
                        head_dim=head_dim, attention_bias=False, attention_dropout=0.0,
                        rms_norm_eps=eps)
    config._attn_implementation = "eager"  # the plain PyTorch path: no sdpa / flash dispatch
    # the projections are replaced below, so their random init would be thrown away (kaiming-
    # initialising four width^2 matrices was most of a build); the norms' weights come from
    # torch.ones / zeros in their __init__, which the switch does not touch
    with _no_init_weights():
        attention = attention_cls(config, layer_idx=0)
    linear = [name for name, layer in attention.named_modules() if isinstance(layer, torch.nn.Linear)]
    if sorted(linear) != sorted(PROJECTIONS):  # anything else would hold uninitialised weights
        raise RuntimeError(f"{attention_cls.__name__} has the projections {linear}, not {list(PROJECTIONS)}")
    for name in PROJECTIONS:
        setattr(attention, name, IdentityProjection())
    if gated_query:
        attention.q_proj = GatedQueryIdentity(heads)
    return attention.to(dtype).eval()


PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj")


class IdentityProjection(torch.nn.Module):
    """A projection's exact identity: x's values (signed zeros and subnormals included) in a fresh
    contiguous tensor, as a Linear hands on its output, so that q_norm meets the memory a model
    gives it whatever layout the case's x is in."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.clone(memory_format=torch.contiguous_format)


class GatedQueryIdentity(torch.nn.Module):
    """A gated q_proj's identity: per head, x as the query half and zeros as the gate half, the
    (tokens, H * 2D) layout `view(..., H, 2D).chunk(2, -1)` takes apart."""

    def __init__(self, heads: int):
        super().__init__()
        self.heads = heads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        per_head = x.view(*x.shape[:-1], self.heads, -1)
        return torch.cat([per_head, torch.zeros_like(per_head)], dim=-1).reshape(*x.shape[:-1], -1)


def _no_init_weights():
    """transformers' switch that makes torch.nn.init a no-op while a module is built (a context
    manager); a plain no-op context where this transformers version lacks it."""
    try:
        from transformers.initialization import no_init_weights
    except ImportError:
        try:
            from transformers.modeling_utils import no_init_weights
        except ImportError:
            return contextlib.nullcontext()
    return no_init_weights()


def position_zero(tokens: int, head_dim: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """RoPE (cos, sin) of position 0 for every token: the rotation is the identity."""
    return torch.ones(1, tokens, head_dim, dtype=dtype), torch.zeros(1, tokens, head_dim, dtype=dtype)


def causal_mask(tokens: int, dtype: torch.dtype) -> torch.Tensor:
    return torch.full((tokens, tokens), torch.finfo(dtype).min, dtype=dtype).triu(1)[None, None]


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal values, NaN where NaN (torch.equal treats NaN as unequal)."""
    return a.shape == b.shape and bool(((a == b) | (a.isnan() & b.isnan())).all())


# ---------------------------------------------------------------------------------------------
# Operands a class has no parameter for


class Identity:
    """A parameter operand that a MODULE class lacks (CohereLayerNorm's bias, OlmoLayerNorm's weight
    and bias): the case must hold the identity, which is then applied after the class, in the case
    dtype and in the contract's order (y * (offset + w), then + b). Both are exact on the identity
    (y * 1, y + 0; only a -0 output becomes +0), so the output keeps the class's bits, and autograd
    through them gives the operand's gradient (dw = sum over rows of dy * y, db = sum of dy) as a
    model that followed the class with that affine would train it."""

    def __init__(self, otherwise: str, identity: str, is_identity, apply):
        self.otherwise, self.identity, self.is_identity, self.apply = otherwise, identity, is_identity, apply


IDENTITIES = {  # the identity's regime and the words for its absence are the family table's
    "weight": Identity(IDENTITY_REGIMES["weight"][1], IDENTITY_REGIMES["weight"][0],
                       lambda w, c: bool((w.double() + c.weight_offset == 1).all()),
                       lambda y, w, c: y * (w + c.weight_offset if c.weight_offset else w)),
    "bias": Identity(IDENTITY_REGIMES["bias"][1], IDENTITY_REGIMES["bias"][0],
                     lambda b, c: bool((b == 0).all()), lambda y, b, c: y + b),
}


# ---------------------------------------------------------------------------------------------
# The adapter


class FamilyAdapter:
    """adapter(op, contract, inputs) for one family. Modules are cached per shape, eps and dtype;
    weights are copied in on every call."""

    def __init__(self, family: Family, parts: dict):
        self.family, self.parts = family, parts
        self.modules: dict[tuple, torch.nn.Module] = {}

    def __repr__(self) -> str:
        return f"<transformers {transformers_version()} {self.family.convention} adapter>"

    def part(self, op: str):
        return self.parts[self.family.ops()[op].name]

    def module(self, key: tuple, make) -> torch.nn.Module:
        if key not in self.modules:
            # built outside inference mode even when the forward's first call comes from inside it:
            # parameters made there would be inference tensors, which autograd cannot use
            with torch.inference_mode(False):
                self.modules[key] = make()
        return self.modules[key]

    def __call__(self, op: str, contract: Contract, inputs: CaseInputs) -> torch.Tensor:
        a = self.arrays(op, inputs)
        with torch.inference_mode():
            return self.forward(op, contract, a, inputs.num_heads)

    def backward(self, op: str, contract: Contract, inputs: CaseInputs, dy) -> dict[str, torch.Tensor]:
        """J^T dy of the very computation `__call__` makes, through torch's autograd:
        {"x", "weight", "gate"} for those the op takes (never "positions"), each in the dtype
        autograd gives (the case's). x (and the gate) are fresh leaves with the case's bits; the
        weight's gradient is the real parameter's (the norm's, or the attention's q_norm.weight: only
        q_norm's output is differentiated, so k_norm and the rest of the attention contribute
        nothing), summed back to the case weight's shape where `fit_weight` tiled it. Through the
        attention, x's gradient is q_norm's input's (which is x bit for bit, checked), mapped back to
        (tokens, H*D) by `by_token`."""
        a = self.arrays(op, inputs)
        tokens = a["x"].shape[0]
        attended = self.family.ops()[op].how in (ATTENTION, ROTARY_ATTENTION)
        q_input = {} if attended else None
        held = self.held(op)
        leaves = {}  # in the operands' order
        for name, t in a.items():
            if not t.is_floating_point():
                continue
            if name in held:  # the case's bits are copied into the real parameter: its gradient
                leaves[name] = self.parameter(op, name, contract, a["x"], inputs.num_heads)
            elif name == "x" and attended:
                leaves[name] = None  # q_norm's input, made a leaf during the forward
            else:
                leaves[name] = a[name] = t.clone().requires_grad_(True)

        def run() -> torch.Tensor:
            y = self.forward(op, contract, a, inputs.num_heads, q_input)
            if attended:
                leaves["x"] = q_input["leaf"]
            return y

        grads = autograd_vjp(run, leaves, dy)
        if attended:
            grads["x"] = self.by_token(grads["x"], tokens)
        if "weight" in grads:
            grads["weight"] = fold(grads["weight"], a["weight"].shape)
        return grads

    def arrays(self, op: str, inputs: CaseInputs) -> dict[str, torch.Tensor]:
        if op not in self.family.ops():
            raise ValueError(f"transformers' {self.family.convention} has no {op}")
        return {name: to_torch(array) for name, array in inputs.arrays.items()}

    def forward(self, op: str, contract: Contract, a: dict[str, torch.Tensor], heads: int,
                q_input: dict | None = None) -> torch.Tensor:
        """The op on the case's tensors, through the family's real code (the one path of both
        `__call__`, under inference_mode, and `backward`, under autograd; `q_input`: `qk_norm`'s)."""
        how = self.family.ops()[op].how
        if how == FLOAT32_FUNCTION:  # as the delta rule calls l2norm: on float32 q / k
            return self.part(op)(a["x"].float(), dim=-1, eps=contract.eps).to(a["x"].dtype)
        if how == ATTENTION:
            return self.qk_norm(a["x"], a["weight"], heads, contract.eps, q_input=q_input)
        if how == ROTARY_ATTENTION:
            return self.qk_norm_rope(a["x"], a["weight"], a["positions"], heads, contract.eps,
                                     contract.rope_theta, q_input)
        if how != MODULE:
            raise ValueError(f"{self.family.convention}'s {op} is called as {how!r}, which hf.py does not know")
        return self.module_forward(op, contract, a, heads)

    def module_forward(self, op: str, contract: Contract, a: dict[str, torch.Tensor], heads: int) -> torch.Tensor:
        """A MODULE part: the class built from its `init`, the operands it holds copied into its
        parameters, forward(*the op's module_call), then the identities of those it lacks."""
        part = self.family.ops()[op]
        lacks = part.lacks(OPS[op].inputs)
        for name in lacks:  # refused before anything runs: the class cannot apply them
            if not IDENTITIES[name].is_identity(a[name], contract):
                raise ValueError(f"{part.name} has no {name} parameter, so it cannot apply this case's {name}, "
                                 f"which is {IDENTITIES[name].otherwise}; run it with {name} "
                                 f"{IDENTITIES[name].identity}")
        norm = self.norm(op, a["x"].shape[-1], heads, contract.eps, a["x"].dtype)
        with torch.no_grad():
            for name in part.holds(OPS[op].inputs):
                getattr(norm, name).copy_(a[name])
        y = norm(*(a[name] for name in OPS[op].module_call))
        for name in lacks:  # in operand order: the weight, then the bias (the contract's y * w + b)
            y = IDENTITIES[name].apply(y, a[name], contract)
        return y

    def held(self, op: str) -> tuple[str, ...]:
        """The operands whose bits go into a real parameter (whose gradient is that parameter's)."""
        part = self.family.ops()[op]
        if part.how == MODULE:
            return part.holds(OPS[op].inputs)
        return ("weight",) if part.how in (ATTENTION, ROTARY_ATTENTION) else ()

    def parameter(self, op: str, name: str, contract: Contract, x: torch.Tensor, heads: int) -> torch.nn.Parameter:
        """The parameter `forward` copies operand `name` into: the norm's, or q_norm's weight."""
        if self.family.ops()[op].how == MODULE:
            return getattr(self.norm(op, x.shape[-1], heads, contract.eps, x.dtype), name)
        return self.attention(heads, x.shape[-1] // heads, contract.eps, x.dtype).q_norm.weight

    def norm(self, op: str, width: int, heads: int, eps: float, dtype: torch.dtype) -> torch.nn.Module:
        part = self.family.ops()[op]
        return self.module((op, width, heads, eps, dtype), lambda: build(self.parts[part.name], part, width,
                                                                         heads, eps).to(dtype))

    def attention(self, heads: int, head_dim: int, eps: float, dtype: torch.dtype) -> torch.nn.Module:
        f = self.family
        return self.module(("attention", heads, head_dim, eps, dtype), lambda: identity_attention(
            self.parts[f.attention], self.parts[f.config], heads, head_dim, eps, dtype, f.gated_query))

    def rotary(self, head_dim: int, theta: float) -> torch.nn.Module:
        """The family's rotary embedding for (head_dim, theta), built from a small config."""
        def make():
            config = self.parts[self.family.config](
                hidden_size=head_dim, num_attention_heads=1, num_key_value_heads=1, head_dim=head_dim,
                rope_theta=theta)
            rotary = self.parts[self.family.rotary](config).eval()
            # the config spelling of theta changed across transformers versions (rope_theta,
            # rope_parameters): make sure this one took it, or refuse
            want = theta ** (-2.0 / head_dim)
            got = float(rotary.inv_freq[1]) if rotary.inv_freq.numel() > 1 else want
            if rotary.attention_scaling != 1.0 or abs(got / want - 1.0) > 1e-5:
                raise RuntimeError(f"{type(rotary).__name__} did not take rope_theta={general(theta)} "
                                   f"(inv_freq[1] = {number(got, 6)}, expected {number(want, 6)})")
            return rotary
        return self.module(("rotary", head_dim, theta), make)

    def qk_norm_rope(self, x: torch.Tensor, weight: torch.Tensor, positions: torch.Tensor, heads: int,
                     eps: float, theta: float, q_input: dict | None = None) -> torch.Tensor:
        tokens, width = x.shape
        dim = width // heads
        if positions.numel() != tokens:
            raise ValueError(f"{positions.numel()} positions for {tokens} rows (tokens)")
        cos, sin = self.rotary(dim, theta)(x, positions.reshape(1, tokens))  # (1, tokens, D), x's dtype
        q = self.qk_norm(x, weight, heads, eps, (cos, sin), q_input)
        # as the attention continues: q_norm's output transposed to (batch, heads, tokens, D)
        q = q.view(1, tokens, heads, dim).transpose(1, 2)
        q_embed, _ = self.parts[self.family.apply_rope](q, q, cos, sin)
        return q_embed.transpose(1, 2).reshape(tokens, width)

    def qk_norm(self, x: torch.Tensor, weight: torch.Tensor, heads: int, eps: float,
                position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
                q_input: dict | None = None) -> torch.Tensor:
        """q_norm's output, hooked in the real attention, as (tokens, H*D). With `q_input` (a dict,
        for the backward pass) q_norm's input is made a fresh leaf of the same values, stored there
        under "leaf": the gradient is taken from q_norm's input, not back through the projections
        and the reshapes before it, which are not the layer's doing."""
        tokens, width = x.shape
        attention = self.attention(heads, width // heads, eps, x.dtype)
        with torch.no_grad():
            for norm in (attention.q_norm, attention.k_norm):
                norm.weight.copy_(fit_weight(weight, norm.weight, heads))
        seen = {}

        def hook(name):
            def capture(_module, args, out):
                seen[name] = (args[0], out)
                # under autograd (backward) the rest of the attention gets the same values detached:
                # only q_norm's output is differentiated, so nothing after it needs to keep a graph
                return out.detach() if torch.is_grad_enabled() else None
            return capture

        def as_leaf(_module, args):
            q_input["leaf"] = args[0].detach().requires_grad_(True)
            return (q_input["leaf"], *args[1:])

        hooks = [getattr(attention, name).register_forward_hook(hook(name)) for name in ("q_norm", "k_norm")]
        if q_input is not None:
            hooks.append(attention.q_norm.register_forward_pre_hook(as_leaf))
        try:
            attention(hidden_states=x.view(1, tokens, width),
                      position_embeddings=position_embeddings or position_zero(tokens, width // heads, x.dtype),
                      attention_mask=causal_mask(tokens, x.dtype))
        finally:
            for hook in hooks:
                hook.remove()
        (q_in, q), (k_in, k) = ([self.by_token(t, tokens) for t in seen[n]] for n in ("q_norm", "k_norm"))
        if not (same(q_in, x) and same(k_in, x)):
            raise RuntimeError("q_norm / k_norm did not receive x exactly through the identity projections; "
                               "q_norm would be measured on different inputs")
        if not same(q, k):
            raise RuntimeError("q_norm and k_norm disagree although they hold the same weight")
        return q

    def by_token(self, t: torch.Tensor, tokens: int) -> torch.Tensor:
        """A hooked tensor as (tokens, H*D), whatever layout the family's q_norm sees."""
        if self.family.heads_first:
            t = t.transpose(1, 2)
        return t.reshape(tokens, -1)


def build(cls, part: Part, width: int, groups: int, eps: float) -> torch.nn.Module:
    """cls built from the part's `init`: width positionally, group_size and eps by keyword. A class
    that hard-codes its eps (no "eps" in init) is built only for a case with that eps."""
    if part.eps is not None and eps != part.eps:
        raise ValueError(f"{part.name} hard-codes eps={general(part.eps)}; this case asks for eps={general(eps)}")
    if "group_size" in part.init and width % groups:
        raise ValueError(f"{part.name}: width {width} does not split into {groups} groups")
    values = {"width": width, "group_size": width // groups, "eps": eps}
    args = [values["width"]] if "width" in part.init else []
    return cls(*args, **{name: values[name] for name in part.init if name != "width"})


def fit_weight(weight: torch.Tensor, param: torch.Tensor, heads: int) -> torch.Tensor:
    """The case weight in the parameter's shape. A (D,) weight for a full-vector (H*D,) q_norm is
    tiled over the heads (numpy_own's rule), so OLMo2's layer can run on per-head cases."""
    if weight.shape == param.shape:
        return weight
    if weight.numel() * heads == param.numel():
        return weight.repeat(heads)
    raise ValueError(f"weight of shape {tuple(weight.shape)} does not fit q_norm's "
                     f"{tuple(param.shape)} with {heads} heads")
