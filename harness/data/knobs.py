"""The knobs of a contract: every choice that changes an op's numbers, with its legal values.

A knob is data: its name, its legal values (the first is the usual one), the values diagnosis tries
when the knob is continuous, and the group it belongs to. An op record (`ops.py`) says which groups
apply to it, so no other module has to know which op has a weight, a gate, heads or a rotation.
Pure data: imports nothing from normdiff.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Knob:
    name: str
    group: str
    values: tuple = ()  # the legal values of a discrete knob; () for a continuous one
    tried: tuple = ()  # what diagnosis tries (discrete knobs: every legal value)
    summary: str = ""

    @property
    def candidates(self) -> tuple:
        return self.tried or self.values


# Groups: which part of an op a knob belongs to. An op record lists the groups that apply to it.
STATISTIC = "statistic"  # every norm: what is averaged, where eps goes, in which dtype
WEIGHT = "weight"  # ops with a gain: offset, cast order, offset dtype
GATE = "gate"  # gated ops: the gate's activation and order
SCOPE = "scope"  # ops over heads: per head or the full vector, and the weight's span
ROPE = "rope"  # ops that rotate: order and base

# Declaration order is the order diagnosis tries them in (ties between equally good candidates keep it).
KNOBS: dict[str, Knob] = {
    k.name: k
    for k in (
        Knob("weight_offset", WEIGHT, tried=(0.0, 1.0, 2.0), summary="y * (offset + w)"),
        Knob("eps_placement", STATISTIC, ("inside", "outside", "clamp", "none"),
             summary="sqrt(stat + eps) | sqrt(stat) + eps | max(sqrt(stat), eps) | no eps"),
        Knob("eps", STATISTIC, tried=(1e-5, 1e-6, 1e-8, 1e-12), summary="the epsilon's value"),
        Knob("statistic", STATISTIC, ("mean_square", "sum_square", "variance"),
             summary="mean(x^2) | sum(x^2) | mean((x - mean x)^2)"),
        Knob("scope", SCOPE, ("head", "full"), summary="normalise each head's slice or the full H*D vector"),
        Knob("gate_activation", GATE, ("silu", "sigmoid")),
        Knob("gate_order", GATE, ("norm_then_gate", "gate_then_norm")),
        Knob("cast", WEIGHT, ("one_rounding", "llama"),
             summary="(y * w).to(dtype) | w * y.to(dtype) (the Llama cast rounds before the weight)"),
        Knob("stats_dtype", STATISTIC, ("float32", "input"), summary="the dtype the statistic is computed in"),
        Knob("offset_dtype", WEIGHT, ("float32", "input"), summary="the dtype offset + w is computed in"),
        Knob("inverted", STATISTIC, (False, True), summary="multiply by the denominator instead of dividing"),
        Knob("rope_order", ROPE, ("norm_then_rope", "rope_then_norm")),
        Knob("weight_span", SCOPE, ("head", "full"), summary="the weight is (head_dim,) or (H*D,)"),
        Knob("rope_theta", ROPE, summary="RoPE's base"),
    )
}

# Knobs that only say how a low-precision implementation rounds: the float64 oracle ignores them.
ROUNDING_KNOBS = ("cast", "stats_dtype", "offset_dtype")
# Knobs that follow from the inputs rather than being tried by diagnosis (the weight's shape)
DERIVED_KNOBS = ("weight_span",)


def in_groups(groups) -> tuple[str, ...]:
    """The names of the knobs in `groups`, in declaration order."""
    return tuple(name for name, k in KNOBS.items() if k.group in groups)
