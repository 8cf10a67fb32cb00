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

layer_norm (`LayerNorm`, torch's F.layer_norm order) and group_gated_rms_norm (`GroupGatedRMSNorm`,
Mamba2's MambaRMSNormGated) take numpy_own's steps too: every mean (the centring's and the two-pass
variance's) is summed in float32, rounded to the statistics dtype and divided by n in it (not
torch's x.mean(), which divides before its one rounding); the one-pass variance, the n - correction
divisor and the bias before or after the weight are numpy_own's order of operations. In float32
they differ from numpy_own only in how the sums are ordered, which centring amplifies by
|mean| / std (rows at mean 1000 move by many float32 ULPs, all within the centring budget).

add_rms_norm (`AddRMSNorm`, vLLM's fused_add_rms_norm) returns (y, residual_out) and rounds the sum
where numpy_own.add_norm does: residual_out is the float64 sum rounded once to the input dtype (to
nearest, or truncated toward zero by `to_dtype`, differentiated as the identity), and the norm sees
that rounded sum or the float32 one by the contract's residual_dtype.

Only ever imported inside the torch worker, so importing torch at module level is fine.

The backward pass (`backward`) is torch's autograd through the very modules and calls `run` makes
(`prepare` and `forward` are shared; `run` calls them under inference_mode): the gradients are
those a model built of these modules would train with, weight (and bias) gradients in their dtype.

Why it imports nothing from normdiff at run time but the exact-bits conversion and the autograd
helper: `normdiff repro --script` inlines this file's source into a standalone script (for the own
torch implementation and every mutant) that must run with NumPy, ml_dtypes and torch alone; the
inliner inlines those functions too (the helper needs nothing but them and torch). It reads the
contract's knobs and the arrays it is given, never the op records. RoPE's frequencies use torch's
own float32 pow on purpose, as HF does, rather than the correctly rounded ones of
harness/data/rope.py.
"""
from __future__ import annotations

import inspect
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.nn as nn

from normdiff.implementations.frameworks.torch import autograd_vjp, from_numpy as to_torch
from normdiff.implementations.numpy_own import EMAX

if TYPE_CHECKING:
    from normdiff.cases.model import CaseInputs
    from normdiff.harness.data.contracts import Contract


def _in(value: float, dtype: torch.dtype) -> float:
    """A Python number rounded to `dtype` (numpy_own's `dtype.type(n)`: n itself for small n)."""
    return float(torch.tensor(float(value), dtype=torch.float64).to(dtype))


def span_mean(xs: torch.Tensor) -> torch.Tensor:
    """The span's mean as numpy_own takes it: summed in float32 (torch's CPU sum accumulates bf16
    and fp16 in float32 too), rounded to xs' dtype, then divided by n in it (not torch's mean,
    which divides before its one rounding)."""
    return xs.sum(-1, keepdim=True) / _in(xs.shape[-1], xs.dtype)


def denominator(xf: torch.Tensor, eps: float, placement: str = "inside",
                statistic: str = "mean_square", stats_dtype: torch.dtype | None = None,
                inverted: bool = False, eps_scale: str = "one", correction: int = 0,
                variance_form: str = "two_pass") -> torch.Tensor:
    """1 / (the denominator) of float32 xf's last dim, float32, one value per span (the denominator
    itself when `inverted`, as numpy_own's _inverse_scale takes it: 1 / the reciprocal). The
    statistic in `stats_dtype` if given; eps scaled by the span's width or its max x^2 when
    `eps_scale` says so (two real bugs); the variance over n - `correction`, two-pass
    mean((x - m)^2) or one-pass E[x^2] - E[x]^2 (`variance_form`), each step rounded as numpy_own
    rounds it."""
    if eps_scale == "span":
        eps = torch.tensor(eps, dtype=torch.float32) * xf.shape[-1]
    elif eps_scale == "max_square":
        peak = xf.abs().amax(-1, keepdim=True)
        eps = torch.tensor(eps, dtype=torch.float32) * peak * peak
    xs = xf if stats_dtype is None else xf.to(stats_dtype)
    one_pass = statistic == "variance" and variance_form == "one_pass"
    if statistic == "variance" and not one_pass:
        xs = xs - span_mean(xs)
    stat = (xs * xs).sum(-1, keepdim=True)
    n = xs.shape[-1]
    if statistic != "sum_square":
        divisor = n - (correction if statistic == "variance" else 0)
        stat = stat / _in(divisor, xs.dtype)  # sum then divide, as numpy_own rounds it
    if one_pass:  # E[x^2] - E[x]^2, numpy_own's order: ((m * m) * n) / (n - correction)
        mean = span_mean(xs)
        stat = stat - mean * mean * _in(n, xs.dtype) / _in(n - correction, xs.dtype)
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
    return 1.0 / inverse if inverted else inverse  # inverted: the rsqrt-inverted bug


def normalise(xf: torch.Tensor, eps: float, placement: str = "inside",
              statistic: str = "mean_square", stats_dtype: torch.dtype | None = None,
              inverted: bool = False, eps_scale: str = "one", correction: int = 0,
              variance_form: str = "two_pass", centre: bool = False) -> torch.Tensor:
    """xf / denominator over the last dim, in float32 (`denominator` says how each knob is
    computed); `centre`: LayerNorm's xf - mean(xf) (the float32 mean) over it instead."""
    inverse = denominator(xf, eps, placement, statistic, stats_dtype, inverted, eps_scale, correction,
                          variance_form)
    if centre:
        xf = xf - span_mean(xf)
    return xf * inverse


def l2norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """x * rsqrt(sum(x^2) + eps) over the last dim, float32 statistics, output in x's dtype."""
    return normalise(x.float(), eps, statistic="sum_square").to(x.dtype)


class Normaliser(nn.Module):
    """The weightless part every norm shares: x / denominator, with the statistic knobs (and
    LayerNorm's centring knobs, off for the RMS norms)."""

    def __init__(self, eps: float = 1e-6, eps_placement: str = "inside",
                 statistic: str = "mean_square", stats_dtype: str = "float32", inverted: bool = False,
                 eps_scale: str = "one", centre: bool = False, correction: int = 0,
                 variance_form: str = "two_pass"):
        super().__init__()
        self.eps, self.eps_placement, self.statistic = eps, eps_placement, statistic
        self.stats_dtype, self.inverted, self.eps_scale = stats_dtype, inverted, eps_scale
        self.centre, self.correction, self.variance_form = centre, correction, variance_form

    def normalise(self, xf: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """xf (float32) normalised, float32; `dtype` is the input's, for low-precision statistics."""
        stats = dtype if self.stats_dtype == "input" else None
        return normalise(xf, self.eps, self.eps_placement, self.statistic, stats, self.inverted, self.eps_scale,
                         self.correction, self.variance_form, self.centre)

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
                 inverted: bool = False, eps_scale: str = "one", **centring):
        super().__init__(eps, eps_placement, statistic, stats_dtype, inverted, eps_scale, **centring)
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


class LayerNorm(RMSNorm):
    """y = (x - mean x) / sqrt(var(x) + eps) * (weight_offset + weight) + bias: torch's F.layer_norm
    (GPT-2, GPT-NeoX, Phi, Cohere, OLMo-1), weight and bias parameters in the case dtype.

    The statistics and the centring in float32 (the mean summed in float32, then divided by n);
    cast "one_rounding" multiplies by the weight in float32, adds the float32 bias and rounds once.
    The contract's centring knobs are honoured: `centre` False normalises x itself (over the
    centred variance: the mean-not-subtracted bug), `correction` divides the variance by
    n - correction, `variance_form` "one_pass" takes E[x^2] - E[x]^2, and `bias_order`
    "before_scale" computes (x_hat + b) * w. x is (..., spans * span), each span normalised on its
    own (one span, the whole row, for a LayerNorm); a weight and bias shorter than the row are
    shared by its spans (broadcasting tiles them, numpy_own's rule).
    """

    def __init__(self, dim: int, eps: float = 1e-5, span: int | None = None, bias_order: str = "after_scale",
                 statistic: str = "variance", centre: bool = True, cast: str = "one_rounding", **norm_knobs):
        super().__init__(dim, eps, statistic=statistic, centre=centre, cast=cast, **norm_knobs)
        self.bias = nn.Parameter(torch.zeros((dim,), dtype=self.weight.dtype))
        self.span, self.bias_order = span or dim, bias_order

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-1]
        y = self.normalise(x.float().reshape(*lead, -1, self.span), x.dtype)
        y = y.reshape(*lead, -1, self.weight.shape[0])  # spans of the weight's length
        bias = self.bias.float()
        if self.bias_order == "before_scale":
            y = y + bias
        y = self.weigh(y, x.dtype)
        if self.bias_order == "after_scale":
            y = y.float() + bias
        return y.to(x.dtype).reshape(x.shape)


class GroupGatedRMSNorm(GatedRMSNorm):
    """Mamba2's MambaRMSNormGated (Bamba, Zamba2, NemotronH): x * silu(gate) in float32 first
    (gate_order "gate_then_norm"), then an RMSNorm over each group of `group_size` channels, then
    the (width,) weight times the normalised value rounded to the input dtype (the Llama cast).

    x and gate are (..., groups * group_size). `group_size` equal to the width is the whole row (the
    scope "full" bug); "norm_then_gate" gates the weighted output instead (in float32, one rounding).
    A weight shorter than the row (weight_span "head": one group's) is shared by every group.
    """

    def __init__(self, dim: int, group_size: int, eps: float = 1e-5, gate_order: str = "gate_then_norm",
                 cast: str = "llama", **norm_knobs):
        super().__init__(dim, eps, gate_order=gate_order, cast=cast, **norm_knobs)
        self.group_size = group_size

    def forward(self, x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        g = self.activation(gate.float())
        xf = x.float() * g if self.gate_order == "gate_then_norm" else x.float()
        lead = x.shape[:-1]
        y = self.normalise(xf.reshape(*lead, -1, self.group_size), x.dtype)
        y = self.weigh(y.reshape(*lead, -1, self.weight.shape[0]), x.dtype).reshape(x.shape)
        if self.gate_order == "norm_then_gate":
            y = y.float() * g
        return y.to(x.dtype)


class _StraightThrough(torch.autograd.Function):
    """`replacement` in the forward, the identity to `value` in the backward: a rounding whose
    derivative is taken as 1, as autograd takes a .to(dtype)."""

    @staticmethod
    def forward(ctx, value: torch.Tensor, replacement: torch.Tensor) -> torch.Tensor:
        return replacement.clone()

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return grad, None


def to_dtype(v: torch.Tensor, dtype: torch.dtype, rounding: str = "nearest") -> torch.Tensor:
    """v (float64) in `dtype`: rounded to nearest, or truncated toward zero (numpy_own._to_dtype:
    one step back toward zero wherever nearest rounded away from it: the magnitude's bits - 1 for
    bf16 / fp16, nextafter toward 0 for float32). The truncation is differentiated as the identity."""
    near = v.to(dtype)
    if rounding != "truncate":
        return near
    with torch.no_grad():
        away = near.double().abs() > v.detach().abs()  # NaN compares False: left as it is
        if near.element_size() == 2:
            bits = near.view(torch.int16)
            stepped = torch.where(near == 0, bits, bits - 1).view(dtype)  # -0 and 0 stay
        else:
            stepped = torch.nextafter(near, torch.zeros_like(near))
        truncated = torch.where(away, stepped, near)
    return _StraightThrough.apply(near, truncated)


class AddRMSNorm(RMSNorm):
    """vLLM / SGLang fused_add_rms_norm: h = x + residual, y = RMSNorm(h), returns (y, residual_out).

    residual_out is h in the input dtype: the exact (float64) sum rounded once, to nearest or
    (residual_rounding "truncate", a bug) toward zero. The norm sees h rounded to the input dtype
    (residual_dtype "input": HF's decoder, residual + hidden_states in bf16 then the norm) or the
    float32 sum x.float() + residual.float() (residual_dtype "float32": vLLM's forward_native), its
    cast points in the input dtype either way. residual_order "after_norm" (a bug): y =
    RMSNorm(x) + residual (in float32, one rounding), residual_out still x + residual.
    """

    def __init__(self, dim: int, eps: float = 1e-6, residual_dtype: str = "input",
                 residual_rounding: str = "nearest", residual_order: str = "before_norm", **norm_knobs):
        super().__init__(dim, eps, **norm_knobs)
        self.residual_dtype, self.residual_rounding, self.residual_order = \
            residual_dtype, residual_rounding, residual_order

    def norm(self, h: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """RMSNorm of h (the input dtype, or float32 holding the float32 sum), rounded at `dtype`'s
        cast points."""
        return self.weigh(self.normalise(h.float(), dtype), dtype).to(dtype)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        dtype = x.dtype
        out = to_dtype(x.double() + residual.double(), dtype, self.residual_rounding)
        if self.residual_order == "after_norm":
            return (self.norm(x, dtype).float() + residual.float()).to(dtype), out
        h = x.float() + residual.float() if self.residual_dtype == "float32" else out
        return self.norm(h, dtype), out


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
    if op == "rms_norm":  # centre: a LayerNorm where the RMSNorm is meant (a catalogued bug)
        return RMSNorm(width, centre=c.centre, **knobs)
    if op == "gated_rms_norm":
        return GatedRMSNorm(width, gate_activation=c.gate_activation, gate_order=c.gate_order,
                            **knobs)
    if op == "add_rms_norm":
        return AddRMSNorm(width, residual_dtype=c.residual_dtype, residual_rounding=c.residual_rounding,
                          residual_order=c.residual_order, **knobs)
    if op == "qk_norm":
        return QKNorm(num_heads, width // num_heads, c.scope, c.weight_span, centre=c.centre, **knobs)
    if op == "qk_norm_rope":
        return QKNormRoPE(num_heads, width // num_heads, c.rope_theta, c.rope_order, scope=c.scope,
                          weight_span=c.weight_span, **knobs)
    span = width // num_heads if c.scope == "head" else width  # one group / head, or the whole row
    # the weight's (and bias') length: the row, or (weight_span "head") one head's, shared by them all
    dim = width if c.weight_span == "full" else width // num_heads
    if op == "layer_norm":
        return LayerNorm(dim, span=span, bias_order=c.bias_order, centre=c.centre, correction=c.correction,
                         variance_form=c.variance_form, **knobs)
    if op == "group_gated_rms_norm":
        return GroupGatedRMSNorm(dim, span, gate_activation=c.gate_activation, gate_order=c.gate_order,
                                 **knobs)
    raise ValueError(f"torch_own does not implement op {op!r}")


# (op, contract, width, num_heads, dtype) -> module; the dtype and heads are in the key because the
# weight parameter's dtype and shape depend on them.
_MODULES: dict[tuple, nn.Module] = {}


def prepare(op: str, contract: Contract, inputs: CaseInputs) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    """The (cached) module for the case, holding the case's weight (and bias), and the case's arrays as tensors
    with exactly their bits: what `run` and `backward` both call `forward` with."""
    if contract.op != op:
        raise ValueError(f"contract is for {contract.op!r}, not {op!r}")
    arrays = {name: to_torch(a) for name, a in inputs.arrays.items()}
    x = arrays["x"]
    if "weight" in arrays:
        # the weight given decides its span (numpy_own's rule), so a mutant contract run on inputs
        # drawn for its convention still gets a parameter of the right size (a row op's is the row's)
        span = "full" if arrays["weight"].shape[-1] == x.shape[-1] else "head"
        contract = contract.replace(weight_span=span)
    key = (op, contract, x.shape[-1], inputs.num_heads, x.dtype)
    if key not in _MODULES:
        _MODULES[key] = build(op, contract, x.shape[-1], inputs.num_heads, x.dtype)
    module = _MODULES[key]
    with torch.no_grad():  # same dtype on both sides, so the copy keeps the case's bits
        for name in ("weight", "bias"):
            if name in arrays:
                getattr(module, name).copy_(arrays[name])
    return module, arrays


def forward(op: str, module: nn.Module, arrays: dict[str, torch.Tensor]) -> torch.Tensor:
    """The module called on the operands its forward names (x, and the gate, the residual or the
    positions: each module's parameters are named as the op's operands are); its weight and bias
    are the module's own parameters. A fused add returns (y, residual_out)."""
    return module(*(arrays[name] for name in _takes(type(module))))


_TAKES: dict[type, tuple[str, ...]] = {}


def _takes(cls: type) -> tuple[str, ...]:
    """The operand names a module class's forward takes, in order."""
    if cls not in _TAKES:
        _TAKES[cls] = tuple(inspect.signature(cls.forward).parameters)[1:]  # after self
    return _TAKES[cls]


def run(op: str, contract: Contract, inputs: CaseInputs) -> torch.Tensor | tuple[torch.Tensor, ...]:
    """The op's output: y, or for a fused add the tuple (y, residual_out); a quantizing op's (q, scale)."""
    if "_quant" in op:  # the quantizing ops, by name as numpy_own tells them (a repro script inlines this file)
        return quantizing(op, contract, inputs)
    module, arrays = prepare(op, contract, inputs)
    with torch.inference_mode():
        return forward(op, module, arrays)


def backward(op: str, contract: Contract, inputs: CaseInputs, dy) -> dict[str, torch.Tensor]:
    """J^T dy of `run`'s very computation, through torch's autograd: {"x", "residual", "weight",
    "gate", "bias"} for those the op takes (never "positions"). x, the residual and the gate are
    fresh leaves with the case's bits; the weight's and the bias' gradients are the parameters' (in
    their dtype, the case's; a per-head weight shared by the heads, or tiled over a full-vector norm
    by broadcasting, gets the sum over them from autograd). A fused add's dy is {"y": dy,
    "residual_out": dresidual_out}, one upstream gradient per result (dy alone: dresidual_out = 0,
    as the oracle's VJP takes it): autograd sums the two paths into h (in the input dtype where h
    is held in it), so dx = dresidual = dresidual_out + J^T dy."""
    module, arrays = prepare(op, contract, inputs)
    leaves = {name: getattr(module, name) if name in ("weight", "bias") else t.clone().requires_grad_(True)
              for name, t in arrays.items() if t.is_floating_point()}  # in the operands' order
    if "residual" in arrays and not isinstance(dy, dict):  # dy of y alone: residual_out's is 0 (the VJP's rule)
        dy = {"y": dy, "residual_out": np.zeros_like(np.asarray(dy))}
    return autograd_vjp(lambda: forward(op, module, {**arrays, **leaves}), leaves, dy)


# ---- quantizing norms: the plain norm's module, then the quantizer in torch (ops/quantize.py) ----

def quantizing(op: str, contract: Contract, inputs: CaseInputs) -> tuple:
    """(q, scale) of rms_norm_quant, (q, scale, residual_out) of add_rms_norm_quant: y from the
    plain op's module (run on float32 copies of the inputs where the contract keeps y in float32:
    every input dtype's values are exact in float32, and its statistics are float32 anyway), then
    the scale per row or block and q = y / scale clamped and cast with torch's own float8 / int8
    casts. FP4 has no torch cast on CPU (float4_e2m1fn_x2 converts to nothing here): its clamped
    float32 quotients are cast by ml_dtypes, which rounds to nearest even as a cast must."""
    base_op = "add_rms_norm" if op.startswith("add_") else "rms_norm"
    base = contract.replace(op=base_op)
    arrays = inputs.arrays
    if contract.quant_input == "float32":
        arrays = {name: a.astype(np.float32) for name, a in arrays.items()}
    module, tensors = prepare(base_op, base, type(inputs)(**{**vars(inputs), "arrays": arrays}))
    with torch.inference_mode():
        out = forward(base_op, module, tensors)
    y = (out[0] if isinstance(out, tuple) else out).float()
    if contract.scale_from == "normalised":  # the bug: the amax of the value before the weight
        bare = {name: a for name, a in arrays.items() if name != "weight"}
        plain, ptensors = prepare(base_op, base.replace(weight_offset=1.0), type(inputs)(**{**vars(inputs), "arrays": {
            **bare, "weight": np.zeros_like(arrays["weight"])}}))
        with torch.inference_mode():
            normed = plain(*(ptensors[n] for n in _takes(type(plain))))
        source = (normed[0] if isinstance(normed, tuple) else normed).float()
    else:
        source = y
    given = inputs.arrays.get("tensor_scale")  # rms_norm_quant_static's per-tensor scale (float32)
    q, scale = quantize_tensor(y, source, contract, None if given is None else float(given.reshape(-1)[0]))
    if op.startswith("add_"):
        residual_out = out[1]
        if contract.quant_input == "float32":  # the float32 run's sum, rounded as the input dtype holds it
            residual_out = to_torch((inputs.arrays["x"].astype(np.float64) + inputs.arrays["residual"]).astype(
                inputs.arrays["x"].dtype))
        return q, scale, residual_out
    return q, scale


_FLOAT8 = {"float8_e4m3fn": torch.float8_e4m3fn, "float8_e4m3fnuz": torch.float8_e4m3fnuz,
           "float8_e5m2": torch.float8_e5m2}


def quantize_tensor(y: torch.Tensor, source: torch.Tensor, c: Contract, given: float | None = None) -> tuple:
    """q and float32 scales of float32 y, per row or per block of c.quant_group columns; `given` the
    case's per-tensor scale (numpy_own.quantize_values says how each contract uses it)."""
    n = y.shape[-1] if not c.quant_group else c.quant_group
    blocks = y.reshape(*y.shape[:-1], y.shape[-1] // n, n)
    if given is not None and c.tensor_scale != "global":
        t_scale = torch.tensor(given, dtype=torch.float32)
        scale = t_scale.expand(blocks.shape[:-1]).clone()
        t = blocks * (1.0 / t_scale if c.tensor_scale == "divisor" else t_scale)
    else:
        scale, t = _block_scales(blocks, source.reshape(blocks.shape), c, given)
    integer = c.quant_dtype == "int8"
    if c.saturate or integer:
        low = -c.quant_max - 1.0 if integer and c.quant_max == 127.0 else -c.quant_max
        t = t.clamp(low, min(c.quant_max, 127.0) if integer else c.quant_max)
    t = t.reshape(y.shape)
    if integer:
        rounding = {"nearest": torch.round, "truncate": torch.trunc,
                    "half_away": lambda v: torch.sign(v) * torch.floor(v.abs() + 0.5)}[c.quant_rounding]
        return rounding(t).to(torch.int8), scale
    if c.quant_dtype in _FLOAT8:
        return t.to(_FLOAT8[c.quant_dtype]), scale
    import ml_dtypes  # FP4 (module docstring)

    return t.numpy().astype(getattr(ml_dtypes, c.quant_dtype)), scale


def _block_scales(blocks: torch.Tensor, source: torch.Tensor, c: Contract, given: float | None) -> tuple:
    """Each block's float32 scale from its amax and the quotients; NVFP4's (a global scale g) as
    TensorRT-LLM orders it: scale = e4m3(g * (amax * (1 / 6))), y * (1 / (scale * (1 / g)))."""
    amax = source.abs().amax(-1)
    if c.amax_floor:
        bound = torch.clamp_min if c.amax_bound == "floor" else torch.clamp_max
        amax = bound(amax, c.amax_floor)
    g = None if given is None else torch.tensor(given, dtype=torch.float32)
    raw = amax / c.quant_max if g is None else g * (amax * (1.0 / torch.tensor(c.quant_max)))
    scale = _pow2(raw, amax, c)
    if c.scale_floor:
        scale = torch.clamp_min(scale, c.scale_floor)
    if g is not None:
        s = (scale * (1.0 / g)).unsqueeze(-1)
        return scale, torch.where(s != 0, blocks * (1.0 / torch.where(s != 0, s, 1.0)), 0.0)
    s = scale.unsqueeze(-1)
    return scale, blocks / s if not c.zero_guard else torch.where(s != 0, blocks / torch.where(s != 0, s, 1.0), 0.0)


def _pow2(raw: torch.Tensor, amax: torch.Tensor, c: Contract) -> torch.Tensor:
    """The scale as the contract rounds it: to E4M3 with torch's own float8 cast (saturating at 448
    first: NVFP4's block scale), or to a power of two from torch.frexp's exact exponent (a zero
    block's is 1)."""
    if c.scale_rounding == "none":
        return raw
    if c.scale_rounding.startswith("e4m3"):
        return (raw.clamp_max(448.0) if c.scale_rounding == "e4m3" else raw).to(torch.float8_e4m3fn).float()
    value = amax if c.scale_rounding == "ocp_floor" else raw
    mantissa, exponent = torch.frexp(value)
    floor = exponent - 1
    if c.scale_rounding == "ceil_pow2":
        e = torch.where(mantissa == 0.5, floor, floor + 1)
    elif c.scale_rounding == "nearest_pow2":
        e = torch.round(torch.log2(torch.where(value > 0, value, 1.0))).to(torch.int32)
    else:
        e = floor
    if c.scale_rounding == "ocp_floor":
        e = e - EMAX[c.quant_dtype]
    e = e.clamp(-127, 127)
    return torch.where(value > 0, torch.ldexp(torch.ones_like(value), e.to(torch.float32)), 1.0)
