"""Own PyTorch implementation: nn.Module norms in the style of the seed's qwen/norm.py.

Weights are parameters stored in the case dtype (as in a HF model loaded in bf16), statistics are
computed in float32, and every rounding step is the one `numpy_own.py` takes, so that in bf16 the
two agree bit for bit on nearly every element (they differ only where float32 sums, exp or sqrt
are ordered or approximated differently). Every contract knob is honoured, so mutants run too.

qk_norm_rope is the Qwen3 attention's order written the way HF writes it: QKNorm per head, then a
RotaryEmbedding (inv_freq = 1 / theta ** (arange(0, D, 2) / D) in float32 with torch's own pow,
float32 angles, cos / sin cast to the input dtype) and apply_rope (q * cos + rotate_half(q) * sin in
the input dtype). torch's float32 pow is not correctly rounded, so the frequencies can differ from
the contract's (and numpy_own's) by an ulp at a few indices, exactly as HF's do.

Only ever imported inside the torch worker, so importing torch at module level is fine.

The backward pass (`backward`) is torch's autograd through the very modules and calls `run` makes
(`prepare` and `forward` are shared; `run` calls them under inference_mode): the gradients are
those a model built of these modules would train with, weight gradients in the weight's dtype.

Why it imports nothing from normdiff at run time but the exact-bits conversion and the autograd
helper: `normdiff repro --script` inlines this file's source into a standalone script (for the own
torch implementation and every mutant) that must run with NumPy, ml_dtypes and torch alone; the
inliner inlines those functions too (the helper needs nothing but them and torch). It reads the
contract's knobs and the arrays it is given, never the op records. RoPE's frequencies use torch's
own float32 pow on purpose, as HF does, rather than the correctly rounded ones of
harness/data/rope.py.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn as nn

from normdiff.implementations.frameworks.torch import autograd_vjp, from_numpy as to_torch

if TYPE_CHECKING:
    from normdiff.cases.model import CaseInputs
    from normdiff.harness.data.contracts import Contract


def normalise(xf: torch.Tensor, eps: float, placement: str = "inside",
              statistic: str = "mean_square", stats_dtype: torch.dtype | None = None,
              inverted: bool = False, eps_scale: str = "one") -> torch.Tensor:
    """xf / denominator over the last dim, in float32 (the statistic in `stats_dtype` if given);
    eps scaled by the span's width or its max x^2 when `eps_scale` says so (two real bugs)."""
    if eps_scale == "span":
        eps = torch.tensor(eps, dtype=torch.float32) * xf.shape[-1]
    elif eps_scale == "max_square":
        peak = xf.abs().amax(-1, keepdim=True)
        eps = torch.tensor(eps, dtype=torch.float32) * peak * peak
    xs = xf if stats_dtype is None else xf.to(stats_dtype)
    if statistic == "variance":
        xs = xs - xs.mean(-1, keepdim=True)
    stat = (xs * xs).sum(-1, keepdim=True)
    if statistic != "sum_square":
        stat = stat / xs.shape[-1]  # sum then divide, as numpy_own rounds it
    stat = stat.float()
    # eps is a Python float: torch rounds it to float32 for a float32 tensor, as numpy_own does.
    # The reciprocal is taken before multiplying (numpy_own's order): x / d would round differently.
    if placement == "inside":
        inverse = torch.rsqrt(stat + eps)  # on CPU exactly 1 / sqrt, one rounding each
    elif placement == "outside":
        inverse = 1.0 / (stat.sqrt() + eps)
    elif placement == "clamp":
        inverse = 1.0 / stat.sqrt().clamp_min(eps)
    else:  # "none": 0 / 0 gives NaN, as the buggy code does
        inverse = torch.rsqrt(stat)
    return xf / inverse if inverted else xf * inverse  # inverted: the rsqrt-inverted bug


def l2norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """x * rsqrt(sum(x^2) + eps) over the last dim, float32 statistics, output in x's dtype."""
    return normalise(x.float(), eps, statistic="sum_square").to(x.dtype)


class Normaliser(nn.Module):
    """The weightless part every norm shares: x / denominator, with the statistic knobs."""

    def __init__(self, eps: float = 1e-6, eps_placement: str = "inside",
                 statistic: str = "mean_square", stats_dtype: str = "float32", inverted: bool = False,
                 eps_scale: str = "one"):
        super().__init__()
        self.eps, self.eps_placement, self.statistic = eps, eps_placement, statistic
        self.stats_dtype, self.inverted, self.eps_scale = stats_dtype, inverted, eps_scale

    def normalise(self, xf: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """xf (float32) normalised, float32; `dtype` is the input's, for low-precision statistics."""
        stats = dtype if self.stats_dtype == "input" else None
        return normalise(xf, self.eps, self.eps_placement, self.statistic, stats, self.inverted, self.eps_scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.normalise(x.float(), x.dtype).to(x.dtype)


class L2Norm(Normaliser):
    """l2norm with every contract knob (the mutants change statistic and eps placement)."""

    def __init__(self, eps: float = 1e-6, eps_placement: str = "inside",
                 statistic: str = "sum_square", stats_dtype: str = "float32", inverted: bool = False,
                 eps_scale: str = "one"):
        super().__init__(eps, eps_placement, statistic, stats_dtype, inverted, eps_scale)


class RMSNorm(Normaliser):
    """y = x / rms(x) * (weight_offset + weight).

    weight_offset=1 is the zero-centred Qwen3.5 / Gemma form (the parameter stores w - 1, so it
    starts at 0). cast="llama" rounds the normalised value to the input dtype and multiplies in it
    (HF Llama / Qwen3); "one_rounding" multiplies in float32 and rounds once (Qwen3.5, Gemma, OLMo2).
    """

    def __init__(self, dim: int, eps: float = 1e-6, weight_offset: float = 0.0, cast: str = "llama",
                 eps_placement: str = "inside", statistic: str = "mean_square",
                 stats_dtype: str = "float32", offset_dtype: str = "float32", dtype=None,
                 inverted: bool = False, eps_scale: str = "one"):
        super().__init__(eps, eps_placement, statistic, stats_dtype, inverted, eps_scale)
        # initialised to the identity scale: 1 for plain gamma, 0 for zero-centred
        self.weight = nn.Parameter(torch.full((dim,), 1.0 - weight_offset, dtype=dtype))
        self.weight_offset, self.cast, self.offset_dtype = weight_offset, cast, offset_dtype

    def scale(self) -> torch.Tensor:
        """offset + weight: float32, or (the offset_dtype mutant) in the weight's own dtype."""
        if self.offset_dtype == "input":
            return self.weight + self.weight_offset
        return self.weight.float() + self.weight_offset

    def weigh(self, y: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """Multiply float32 y by the scale: "llama" returns `dtype`, "one_rounding" float32."""
        if self.cast == "llama":
            return self.scale().to(dtype) * y.to(dtype)
        return y * self.scale().float()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weigh(self.normalise(x.float(), x.dtype), x.dtype).to(x.dtype)


class GatedRMSNorm(RMSNorm):
    """RMSNorm times act(gate) (Qwen3.5 linear attention): plain gamma, Llama cast, gate in
    float32, one rounding at the end. "gate_then_norm" gates x before normalising instead."""

    def __init__(self, dim: int, eps: float = 1e-6, gate_activation: str = "silu",
                 gate_order: str = "norm_then_gate", **norm_knobs):
        norm_knobs.setdefault("weight_offset", 0.0)
        super().__init__(dim, eps, **norm_knobs)
        self.gate_activation, self.gate_order = gate_activation, gate_order

    def activation(self, z: torch.Tensor) -> torch.Tensor:
        # z * sigmoid(z) rather than F.silu, which divides by 1 + exp(-z): numpy_own multiplies
        sig = torch.sigmoid(z)
        return z * sig if self.gate_activation == "silu" else sig

    def forward(self, x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        g = self.activation(gate.float())
        xf = x.float() * g if self.gate_order == "gate_then_norm" else x.float()
        y = self.weigh(self.normalise(xf, x.dtype), x.dtype)
        if self.gate_order == "norm_then_gate":
            y = y.float() * g
        return y.to(x.dtype)


class QKNorm(nn.Module):
    """RMSNorm of q or k, x shaped (..., H * D).

    scope "head" normalises each D-slice (Qwen3, Gemma3), "full" the whole H*D vector (OLMo2).
    weight_span "head" is a (D,) weight shared by every head, "full" a (H*D,) weight; a (D,)
    weight on a full-scope norm is tiled over the heads (numpy_own's rule).
    """

    def __init__(self, num_heads: int, head_dim: int, scope: str = "head",
                 weight_span: str = "head", **norm_knobs):
        super().__init__()
        width = num_heads * head_dim
        self.span = head_dim if scope == "head" else width
        self.norm = RMSNorm(head_dim if weight_span == "head" else width, **norm_knobs)

    @property
    def weight(self) -> nn.Parameter:
        return self.norm.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-1]
        y = self.norm.normalise(x.float().reshape(*lead, -1, self.span), x.dtype)
        # view as (..., spans of the weight, weight length): broadcasting tiles a (D,) weight
        y = y.reshape(*lead, -1, self.weight.shape[0])
        return self.norm.weigh(y, x.dtype).to(x.dtype).reshape(x.shape)


class RotaryEmbedding(nn.Module):
    """cos and sin of float32 angles position * inv_freq, cast to the input dtype (HF's form)."""

    def __init__(self, head_dim: int, theta: float = 10000.0):
        super().__init__()
        if head_dim % 2:
            raise ValueError(f"RoPE needs an even head_dim, got {head_dim}")
        inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float) / head_dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = positions.reshape(-1, 1).float() * self.inv_freq  # (tokens, D/2), float32
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rope(q: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """q (tokens, H, D) rotated by cos / sin (tokens, D), all in q's dtype."""
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return q * cos + rotate_half(q) * sin


class QKNormRoPE(nn.Module):
    """Per-head QKNorm, then RoPE (rope_order "norm_then_rope", Qwen3); "rope_then_norm" rotates
    x first and normalises the rotated vector (the qk-norm-after-rope bug). x is (..., H * D), one
    position per row."""

    def __init__(self, num_heads: int, head_dim: int, rope_theta: float = 10000.0,
                 rope_order: str = "norm_then_rope", **qk_knobs):
        super().__init__()
        self.num_heads, self.head_dim, self.rope_order = num_heads, head_dim, rope_order
        self.qk = QKNorm(num_heads, head_dim, **qk_knobs)
        self.rotary = RotaryEmbedding(head_dim, rope_theta)

    @property
    def weight(self) -> nn.Parameter:
        return self.qk.weight

    def rope(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        q = x.reshape(-1, self.num_heads, self.head_dim)
        if positions.numel() != q.shape[0]:
            raise ValueError(f"{positions.numel()} positions for {q.shape[0]} rows")
        cos, sin = self.rotary(x, positions)
        return apply_rope(q, cos, sin).reshape(x.shape)

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        if self.rope_order == "rope_then_norm":
            return self.qk(self.rope(x, positions))
        return self.rope(self.qk(x), positions)


# ---------------------------------------------------------------------------------------------
# The adapter the torch worker calls


def build(op: str, c: Contract, width: int, num_heads: int, dtype: torch.dtype) -> nn.Module:
    """The module for `op` with every knob of contract `c`, weights in `dtype`."""
    stats = dict(eps=c.eps, eps_placement=c.eps_placement, statistic=c.statistic,
                 stats_dtype=c.stats_dtype, inverted=c.inverted, eps_scale=c.eps_scale)
    if op == "l2_norm":
        return L2Norm(**stats)
    knobs = dict(stats, weight_offset=c.weight_offset, cast=c.cast, offset_dtype=c.offset_dtype,
                 dtype=dtype)
    if op == "rms_norm":
        return RMSNorm(width, **knobs)
    if op == "gated_rms_norm":
        return GatedRMSNorm(width, gate_activation=c.gate_activation, gate_order=c.gate_order,
                            **knobs)
    if op == "qk_norm":
        return QKNorm(num_heads, width // num_heads, c.scope, c.weight_span, **knobs)
    if op == "qk_norm_rope":
        return QKNormRoPE(num_heads, width // num_heads, c.rope_theta, c.rope_order, scope=c.scope,
                          weight_span=c.weight_span, **knobs)
    raise ValueError(f"torch_own does not implement op {op!r}")


# (op, contract, width, num_heads, dtype) -> module; the dtype and heads are in the key because the
# weight parameter's dtype and shape depend on them.
_MODULES: dict[tuple, nn.Module] = {}


def prepare(op: str, contract: Contract, inputs: CaseInputs) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    """The (cached) module for the case, holding the case's weight, and the case's arrays as tensors
    with exactly their bits: what `run` and `backward` both call `forward` with."""
    if contract.op != op:
        raise ValueError(f"contract is for {contract.op!r}, not {op!r}")
    arrays = {name: to_torch(a) for name, a in inputs.arrays.items()}
    x = arrays["x"]
    if op in ("qk_norm", "qk_norm_rope"):
        # the weight given decides its span (numpy_own's rule), so a mutant contract run on inputs
        # drawn for its convention still gets a parameter of the right size
        span = "full" if arrays["weight"].shape[-1] == x.shape[-1] else "head"
        contract = contract.replace(weight_span=span)
    key = (op, contract, x.shape[-1], inputs.num_heads, x.dtype)
    if key not in _MODULES:
        _MODULES[key] = build(op, contract, x.shape[-1], inputs.num_heads, x.dtype)
    module = _MODULES[key]
    if "weight" in arrays:
        with torch.no_grad():  # same dtype on both sides, so the copy keeps the case's bits
            module.weight.copy_(arrays["weight"])
    return module, arrays


def forward(op: str, module: nn.Module, arrays: dict[str, torch.Tensor]) -> torch.Tensor:
    """The module called on the op's operands (its weight is the module's own parameter)."""
    if op == "gated_rms_norm":
        return module(arrays["x"], arrays["gate"])
    if op == "qk_norm_rope":
        return module(arrays["x"], arrays["positions"])
    return module(arrays["x"])


def run(op: str, contract: Contract, inputs: CaseInputs) -> torch.Tensor:
    module, arrays = prepare(op, contract, inputs)
    with torch.inference_mode():
        return forward(op, module, arrays)


def backward(op: str, contract: Contract, inputs: CaseInputs, dy) -> dict[str, torch.Tensor]:
    """J^T dy of `run`'s very computation, through torch's autograd: {"x", "weight", "gate"} for
    those the op takes (never "positions"). x and gate are fresh leaves with the case's bits; the
    weight's gradient is the parameter's (in its dtype, the case's; a per-head weight shared by the
    heads, or tiled over a full-vector norm by broadcasting, gets the sum over them from autograd)."""
    module, arrays = prepare(op, contract, inputs)
    leaves = {name: module.weight if name == "weight" else t.clone().requires_grad_(True)
              for name, t in arrays.items() if t.is_floating_point()}  # in the operands' order
    return autograd_vjp(lambda: forward(op, module, {**arrays, **leaves}), leaves, dy)
