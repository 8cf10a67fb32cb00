"""The case: one op under one convention on one deterministic input.

A case is fully described by its id, for example
    rms_norm@qwen3/bf16/8x1024/tiny_rms:1e-3/w=trained
    qk_norm@olmo2/fp16/4x8x64/head_scales:lognormal/w=ones
    gated_rms_norm@qwen3.5/fp32/8x128/normal/w=ones/z=closed#1
and `Case.from_id` rebuilds it, so every report row can be replayed from its id alone.
Inputs are drawn in float64 from a seed that depends only on the input configuration (shape,
regimes, sample), so the same input appears across ops, conventions and dtypes, then cast once to
the case's dtype. Ops that take token positions (qk_norm_rope) get them as an int64 array, one per
row (rows are tokens), drawn from the same seed and never cast to the float dtype.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from normdiff.cases import regimes
from normdiff.harness.contracts import OPS, Contract, get_contract, unknown
from normdiff.harness.dtypes import get_format


@dataclass(frozen=True)
class CaseInputs:
    """The arrays an implementation receives (in the case dtype; "positions" int64) plus the op's
    integer params."""

    arrays: dict[str, np.ndarray]
    num_heads: int

    def as_float64(self) -> dict[str, np.ndarray]:
        """The float arrays as float64; integer arrays (positions) are left as they are."""
        return {k: v if v.dtype.kind in "iu" else v.astype(np.float64) for k, v in self.arrays.items()}


@dataclass(frozen=True)
class Case:
    op: str
    convention: str
    dtype: str  # canonical name: float32 | bfloat16 | float16
    rows: int
    head_dim: int  # the normalised width for row ops; per-head width for qk_norm / qk_norm_rope
    num_heads: int = 1
    regime: str = "normal"
    weights: str = "ones"
    gate: str = ""
    sample: int = 0

    def __post_init__(self) -> None:
        spec = OPS.get(self.op)
        if spec is None:
            raise ValueError(unknown("op", self.op, OPS))
        object.__setattr__(self, "dtype", get_format(self.dtype).name)
        get_contract(self.op, self.convention)  # raises for an unknown or undefined pair
        regimes.check_input_regime(self.regime, spec.has_heads)
        if self.num_heads != 1 and not spec.has_heads:
            raise ValueError(f"{self.op} has no heads; got num_heads={self.num_heads}")
        if spec.has_weight and self.weights not in regimes.WEIGHT_REGIMES:
            raise ValueError(unknown("weight regime", self.weights, regimes.WEIGHT_REGIMES))
        if spec.has_gate and self.gate not in regimes.GATE_REGIMES:
            raise ValueError(unknown("gate regime", self.gate, regimes.GATE_REGIMES))
        if min(self.rows, self.head_dim, self.num_heads) < 1:
            raise ValueError(f"case shape must be positive, got rows={self.rows} "
                             f"heads={self.num_heads} head_dim={self.head_dim}")
        if "positions" in spec.inputs and self.head_dim % 2:
            raise ValueError(f"{self.op} rotates pairs of channels: head_dim must be even, got {self.head_dim}")

    # ---- identity ----------------------------------------------------------------------------

    @property
    def width(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def shape_text(self) -> str:
        if OPS[self.op].has_heads:
            return f"{self.rows}x{self.num_heads}x{self.head_dim}"
        return f"{self.rows}x{self.head_dim}"

    @cached_property
    def id(self) -> str:
        spec = OPS[self.op]
        parts = [f"{self.op}@{self.convention}", get_format(self.dtype).short, self.shape_text,
                 self.regime]
        if spec.has_weight:
            parts.append(f"w={self.weights}")
        if spec.has_gate:
            parts.append(f"z={self.gate}")
        text = "/".join(parts)
        return text + (f"#{self.sample}" if self.sample else "")

    @cached_property
    def seed(self) -> int:
        """Stable 32-bit seed of the input configuration (not of op, convention or dtype)."""
        key = f"{self.shape_text}|{self.regime}|{self.weights}|{self.gate}|{self.sample}"
        return _stable_hash(key)

    @property
    def contract(self) -> Contract:
        return get_contract(self.op, self.convention)

    @classmethod
    def from_id(cls, case_id: str) -> "Case":
        match = _ID_RE.fullmatch(case_id.strip())
        if not match:
            raise ValueError(f"malformed case id {case_id!r}; expected like "
                             "'rms_norm@qwen3/bf16/8x1024/normal/w=trained'")
        g = match.groupdict()
        dims = [int(d) for d in g["shape"].split("x")]
        rows, heads, dim = (dims[0], 1, dims[1]) if len(dims) == 2 else dims
        extras = dict(part.split("=", 1) for part in (g["extras"] or "").split("/") if part)
        return cls(op=g["op"], convention=g["conv"], dtype=g["dtype"], rows=rows, head_dim=dim,
                   num_heads=heads, regime=g["regime"], weights=extras.get("w", "ones"),
                   gate=extras.get("z", ""), sample=int(g["sample"] or 0))

    # ---- inputs ------------------------------------------------------------------------------

    def draw_float64(self) -> dict[str, np.ndarray]:
        """The float64 draw before the cast to the case dtype."""
        spec = OPS[self.op]
        arrays = {"x": regimes.draw_input(self.regime, np.random.default_rng([self.seed, 0]),
                                          self.rows, self.num_heads, self.head_dim)}
        if spec.has_weight:
            n = self.width if self.contract.weight_span == "full" else self.head_dim
            # weights depend only on their regime, length and sample, not on x: the same trained
            # weights meet every input regime, and same-shaped cases can be batched row-wise
            arrays["weight"] = regimes.WEIGHT_REGIMES[self.weights](
                np.random.default_rng([_stable_hash(f"{self.weights}|{n}|{self.sample}"), 1]), n)
        if spec.has_gate:
            arrays["gate"] = regimes.GATE_REGIMES[self.gate](
                np.random.default_rng([self.seed, 2]), (self.rows, self.width))
        return arrays

    def positions(self) -> np.ndarray | None:
        """Token positions (int64, one per row) for ops that take them; None for the others."""
        if "positions" not in OPS[self.op].inputs:
            return None
        return regimes.draw_positions(np.random.default_rng([self.seed, 3]), self.rows)

    def inputs(self) -> CaseInputs:
        dtype = get_format(self.dtype).np_dtype
        cast = {k: v.astype(dtype) for k, v in self.draw_float64().items()}
        positions = self.positions()
        if positions is not None:
            cast["positions"] = positions  # integers: not cast to the float dtype
        ordered = {name: cast[name] for name in OPS[self.op].inputs}
        return CaseInputs(ordered, self.num_heads)


def _stable_hash(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "little")


_ID_RE = re.compile(
    r"(?P<op>\w+)@(?P<conv>[\w.\-]+)/(?P<dtype>\w+)/(?P<shape>\d+(?:x\d+){1,2})/"
    r"(?P<regime>[\w.:\-+]+)(?:/(?P<extras>(?:[wz]=\w+/?)+))?(?:#(?P<sample>\d+))?"
)
