"""Ops, their knobs, and the named conventions that fix those knobs.

A *contract* is one op with every knob that changes its numbers set: what is multiplied by the
weight, where epsilon goes, which span is normalised, how the gate is applied and where results are
rounded to the output dtype. A *convention* (named after the model family that defines it) maps each
op it defines to a contract. Conventions and bugs live in the same space: a mutant is a contract
with one knob turned the wrong way, so diagnosis is a search over these fields.

This module is pure data and imports no framework.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

# ---------------------------------------------------------------------------------------------
# Ops


@dataclass(frozen=True)
class OpSpec:
    """What an op takes. `signature` is how user functions are called (see `normdiff check`)."""

    name: str
    inputs: tuple[str, ...]  # arrays handed to implementations, in call order
    signature: str
    has_weight: bool
    has_gate: bool
    has_heads: bool  # x is (..., num_heads * head_dim) and the op knows num_heads
    summary: str


OPS: dict[str, OpSpec] = {
    spec.name: spec
    for spec in (
        OpSpec("rms_norm", ("x", "weight"), "rms_norm(x, weight, eps)", True, False, False,
               "y = x / sqrt(mean(x^2) + eps) * w  (w or 1 + w by convention)"),
        OpSpec("gated_rms_norm", ("x", "gate", "weight"), "gated_rms_norm(x, gate, weight, eps)",
               True, True, False, "y = rms_norm(x) * w * act(gate)  (Qwen3.5 linear attention)"),
        OpSpec("l2_norm", ("x",), "l2_norm(x, eps)", False, False, False,
               "y = x * rsqrt(sum(x^2) + eps)  (Qwen3.5 q/k before the delta rule)"),
        OpSpec("qk_norm", ("x", "weight"), "qk_norm(x, weight, num_heads, eps)", True, False, True,
               "RMSNorm of q/k over each head (Qwen3) or the whole H*D vector (OLMo2)"),
        OpSpec("qk_norm_rope", ("x", "weight", "positions"),
               "qk_norm_rope(x, weight, positions, num_heads, eps)", True, False, True,
               "per-head QK-Norm, then rotary position embedding (rotate_half form; Qwen3 attention)"),
    )
}

# ---------------------------------------------------------------------------------------------
# Knob values. Each tuple lists the legal values; the first is the usual one.

EPS_PLACEMENTS = ("inside", "outside", "clamp", "none")
STATISTICS = ("mean_square", "sum_square", "variance")
SCOPES = ("head", "full")
GATE_ACTIVATIONS = ("silu", "sigmoid")
GATE_ORDERS = ("norm_then_gate", "gate_then_norm")
CASTS = ("one_rounding", "llama")
COMPUTE_DTYPES = ("float32", "input")
ROPE_ORDERS = ("norm_then_rope", "rope_then_norm")


@dataclass(frozen=True)
class Contract:
    """One op with every knob that changes its numbers.

    Exact maths (what the float64 oracle evaluates):
      stat  = mean(x^2) | sum(x^2) | mean((x - mean x)^2)      over `scope`
      y     = x / sqrt(stat + eps)       (eps_placement "inside";
              x / (sqrt(stat) + eps) "outside"; x / max(sqrt(stat), eps) "clamp"; none: no eps;
                                          `inverted` multiplies by the denominator instead)
      y    *= weight_offset + w          (when the op has a weight)
      y    *= act(gate)                  (gated op; "gate_then_norm" multiplies x first instead)

    Rounding (what correct low-precision implementations do, and what the ULP budgets absorb):
      cast "one_rounding": (y * (offset + w.float())).to(dtype)   Gemma, Qwen3.5, OLMo2, torch
      cast "llama":        (offset + w) * y.to(dtype)             Llama, Qwen2/3
    `stats_dtype` / `offset_dtype` say where the statistics and `offset + w` are computed; a correct
    implementation uses float32, mutants use the input dtype.

    qk_norm_rope: the per-head norm above (x is q or k, rows are tokens), then rotary position
    embedding in HF's `rotate_half` form on each head of D = head_dim:
      y     = q * cos + rotate_half(q) * sin,   rotate_half(q) = cat(-q[..., D/2:], q[..., :D/2])
      cos, sin = cos(cat(a, a)), sin(cat(a, a)),   a[t, i] = angle of token t, frequency i < D/2
    `rope_order` "norm_then_rope" is Qwen3's order; "rope_then_norm" rotates x first and normalises
    and weighs the rotated vector (the qk-norm-after-rope bug: a rotation keeps each head's RMS, so
    the two orders are the same maths when the weight is uniform, and differ when it is not).
    The angles are part of the contract, and they are float32, as HF's Qwen3RotaryEmbedding makes
    them. Exact float64 angles would be a different contract: below position 8192 the float32 angle
    is off the exact one by up to 4.9e-4 rad (inv_freq's own float32 rounding times the position,
    plus the product's rounding), which puts an implementation that uses float64 angles ~7000 float32
    ulp from one that follows HF (measured; 2.4 ulp in bf16/fp16, where it hides under rounding).
    So the contract is "angles computed in float32 as HF does":
      e     = float32(float32(2i) / float32(D))
      inv_i = float32(1 / float32(float32(rope_theta) ** e))     (the power correctly rounded)
      a     = float32(float32(position) * inv_i)                  (positions: integers < 2^24)
    and cos / sin of those float32 angles are then exact (the oracle takes them in float64).
    HF's power is torch's float32 `pow`, which is not correctly rounded: on this machine (torch 2.13,
    AVX512) it is one float32 ulp off at one frequency of 64 for D = 128, theta = 1e6 (index 37,
    inv 3.398e-4), which moves an angle by at most ~2.4e-7 rad at position 8191 (measured: torch's
    and HF's worst float32 error is 5.1 ulp, 4.0 with the correctly rounded frequencies), inside the
    float32 budget. Rounding (not in the oracle): HF's apply_rotary_pos_emb rounds cos and sin to
    the input dtype and computes q * cos, rotate_half(q) * sin and their sum in the input dtype, on
    top of the norm's roundings; `budgets.py` derives the budget and `compare.py` says where its
    ULPs are counted (at the magnitude of each rotated pair, not at |y|).
    """

    op: str
    eps: float = 1e-6
    weight_offset: float = 0.0
    eps_placement: str = "inside"
    statistic: str = "mean_square"
    # qk_norm only: the span normalised ("head": each head_dim slice; "full": all H*D) and the span
    # the weight covers ("head": shape (head_dim,), shared by heads; "full": shape (H*D,)).
    # For the row ops there is a single "head", so both are trivially "head".
    scope: str = "head"
    weight_span: str = "head"
    gate_activation: str = "silu"
    gate_order: str = "norm_then_gate"
    cast: str = "one_rounding"
    stats_dtype: str = "float32"
    offset_dtype: str = "float32"
    # multiply by the denominator instead of dividing by it (the rsqrt-inverted bug)
    inverted: bool = False
    # qk_norm_rope only: where the rotation sits relative to the norm, and RoPE's base (HF's default
    # 10000; the qwen3 convention sets Qwen3's 1e6). Ignored by every other op.
    rope_order: str = "norm_then_rope"
    rope_theta: float = 10000.0

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise ValueError(unknown("op", self.op, OPS))
        for name, legal in (("eps_placement", EPS_PLACEMENTS), ("statistic", STATISTICS),
                            ("scope", SCOPES), ("weight_span", SCOPES),
                            ("gate_activation", GATE_ACTIVATIONS), ("gate_order", GATE_ORDERS),
                            ("cast", CASTS), ("stats_dtype", COMPUTE_DTYPES),
                            ("offset_dtype", COMPUTE_DTYPES), ("rope_order", ROPE_ORDERS)):
            if getattr(self, name) not in legal:
                raise ValueError(f"contract knob {name}={getattr(self, name)!r} is not one of {legal}")
        theta = self.rope_theta
        if isinstance(theta, bool) or not isinstance(theta, (int, float)) or not 1.0 < theta < float("inf"):
            raise ValueError(f"contract knob rope_theta={theta!r} must be a finite number > 1")

    @property
    def spec(self) -> OpSpec:
        return OPS[self.op]

    def replace(self, **changes) -> "Contract":
        return dataclasses.replace(self, **changes)

    def knobs(self) -> dict:
        """The fields as a plain dict (for reports and JSON)."""
        return dataclasses.asdict(self)

    def describe(self) -> str:
        """A one-line formula that a person can check against their code."""
        spec = self.spec
        stat = {"mean_square": "mean(x^2)", "sum_square": "sum(x^2)",
                "variance": "var(x)"}[self.statistic]
        norm = {"inside": f"x * rsqrt({stat} + eps)", "outside": f"x / (sqrt({stat}) + eps)",
                "clamp": f"x / max(sqrt({stat}), eps)", "none": f"x * rsqrt({stat})"}[self.eps_placement]
        if self.inverted:
            norm = f"x / ({norm.replace('x * ', '', 1).replace('x / ', '1 / ', 1)})"
        if self.gate_order == "gate_then_norm" and spec.has_gate:
            norm = norm.replace("x", f"(x*{self.gate_activation}(z))")
        parts = [norm]
        if spec.has_weight:
            parts.append("(1 + w)" if self.weight_offset == 1 else "w" if self.weight_offset == 0
                         else f"({self.weight_offset:g} + w)")
        if spec.has_gate and self.gate_order == "norm_then_gate":
            parts.append(f"{self.gate_activation}(z)")
        text = " * ".join(parts) + f", eps={self.eps:g}"
        if spec.has_heads:
            text += ", over each head" if self.scope == "head" else ", over the full H*D vector"
        if spec.has_weight:
            text += ", Llama cast" if self.cast == "llama" else ", one rounding"
        if self.op == "qk_norm_rope":
            rope = f"RoPE (rotate_half, theta={self.rope_theta:g}, float32 angles)"
            text = (f"{text}; then {rope}" if self.rope_order == "norm_then_rope"
                    else f"{rope} first; then {text}")
        return text


def unknown(what: str, value: str, known) -> str:
    return f"unknown {what} {value!r}; known: {', '.join(sorted(known))}"


# ---------------------------------------------------------------------------------------------
# Conventions


@dataclass(frozen=True)
class Convention:
    name: str
    summary: str
    contracts: dict[str, Contract] = field(default_factory=dict)

    def contract(self, op: str) -> Contract:
        if op not in OPS:
            raise ValueError(unknown("op", op, OPS))
        if op not in self.contracts:
            raise ValueError(f"convention {self.name!r} does not define {op!r}; it defines: "
                             f"{', '.join(self.contracts)}")
        return self.contracts[op]


def _qwen35_like(name: str, summary: str) -> Convention:
    # Qwen3.5 and Qwen3-Next share the zero-centred norm, the gated norm (plain gamma, weight
    # multiplied after a Llama-style cast, gate in float32) and the eps-inside L2 norm.
    return Convention(name, summary, {
        "rms_norm": Contract("rms_norm", weight_offset=1.0),
        "gated_rms_norm": Contract("gated_rms_norm", cast="llama"),
        "l2_norm": Contract("l2_norm", statistic="sum_square"),
        "qk_norm": Contract("qk_norm", weight_offset=1.0),
    })


CONVENTIONS: dict[str, Convention] = {
    c.name: c
    for c in (
        Convention("qwen3", "plain gamma, Llama cast; QK-Norm per head before RoPE (HF Qwen3RMSNorm)", {
            "rms_norm": Contract("rms_norm", cast="llama"),
            "qk_norm": Contract("qk_norm", cast="llama"),
            "qk_norm_rope": Contract("qk_norm_rope", cast="llama", rope_theta=1e6),
        }),
        _qwen35_like("qwen3.5", "zero-centred 1 + gamma, one rounding; gated norm plain gamma; "
                                "L2 norm x * rsqrt(sum + eps) (HF Qwen3_5RMSNorm)"),
        _qwen35_like("qwen3-next", "as qwen3.5 (HF Qwen3NextRMSNorm)"),
        Convention("olmo2", "plain gamma, one rounding; QK-Norm over the full H*D vector (HF Olmo2RMSNorm)", {
            "rms_norm": Contract("rms_norm"),
            "qk_norm": Contract("qk_norm", scope="full", weight_span="full"),
        }),
        Convention("llama", "plain gamma, Llama cast (HF LlamaRMSNorm)", {
            "rms_norm": Contract("rms_norm", cast="llama"),
        }),
        Convention("gemma3", "zero-centred 1 + gamma, one rounding; QK-Norm per head (HF Gemma3RMSNorm)", {
            "rms_norm": Contract("rms_norm", weight_offset=1.0),
            "qk_norm": Contract("qk_norm", weight_offset=1.0),
        }),
        # Not a model family: the framework built-ins' documented semantics, so that they can be
        # declared against a contract they really implement and measured beside the models'.
        Convention("torch", "framework built-ins: torch.nn.RMSNorm / F.rms_norm (plain gamma, one "
                            "rounding) and F.normalize (x / max(norm, eps), eps 1e-12)", {
            "rms_norm": Contract("rms_norm"),
            "l2_norm": Contract("l2_norm", statistic="sum_square", eps_placement="clamp", eps=1e-12),
        }),
    )
}


def get_convention(name: str) -> Convention:
    if name not in CONVENTIONS:
        raise ValueError(unknown("convention", name, CONVENTIONS))
    return CONVENTIONS[name]


def get_contract(op: str, convention: str) -> Contract:
    return get_convention(convention).contract(op)


def pairs() -> list[tuple[str, str]]:
    """Every (op, convention) pair some convention defines."""
    return [(op, c.name) for c in CONVENTIONS.values() for op in c.contracts]
