"""The case: one op under one convention on one deterministic input.

A case is fully described by its id, for example
    rms_norm@qwen3/bf16/8x1024/tiny_rms:1e-3/w=trained
    rms_norm@qwen3/bf16/8x1024/tiny_rms:1e-3/w=trained/eps=1e-05
    qk_norm@olmo2/fp16/4x8x64/head_scales:lognormal/w=ones
    gated_rms_norm@qwen3.5/fp32/8x128/normal/w=ones/z=closed#1
and `Case.from_id` rebuilds it, so every report row can be replayed from its id alone. The id's
shape is written in the op record's dims (rows x width, or rows x heads x head_dim), then x's input
regime, then `key=regime` for each operand the op draws from a named regime (the record's id_key:
w for the weight, z for the gate), then `eps=VALUE` when the case runs at another eps than its
convention's config eps, then `#sample` when it is not 0. eps is no part of the seed: the same
inputs run at every eps.

Inputs are drawn in float64 from a seed that depends only on the input configuration (shape,
regimes, sample), so the same input appears across ops, conventions and dtypes, then cast once to
the case's dtype. Per-case operands (the weight) depend only on their regime, length and sample, so
the same trained weights meet every input regime. Integer operands (positions) are drawn as int64
and never cast. Nothing here knows a particular op: the op record (harness/data/ops.py) says what
to draw.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from normdiff.cases import regimes
from normdiff.harness.data.contracts import Contract
from normdiff.harness.data.conventions import get_contract
from normdiff.harness.data.dtypes import get_format
from normdiff.harness.data.errors import UsageError
from normdiff.harness.data.ops import CASE, Op, Operand, get_op

# The first version's seed key named the weight and gate regimes (with these stand-ins for an op
# that has neither); keeping it keeps every existing case's inputs, digests and baselines. Regimes
# of operands added since are appended as `|name=regime`.
_SEED_PARTS = (("weight", "ones"), ("gate", ""))

# The largest case: its inputs are drawn whole in float64 and its output is held by the oracle and
# by every implementation, so a typo ('8x10240000') would take the machine's memory before the first
# result. Checked when a case is made, before anything is drawn (suites check them before any case).
MAX_WIDTH = 2 ** 20
MAX_CASE_ELEMENTS = 2 ** 28


@dataclass(frozen=True)
class CaseInputs:
    """The arrays an implementation receives (in the case dtype; integer operands int64), in the
    op's call order, plus the op's integer params."""

    arrays: dict[str, np.ndarray]
    num_heads: int

    def as_float64(self) -> dict[str, np.ndarray]:
        """The float arrays as float64; integer arrays (positions) are left as they are."""
        return {k: v if v.dtype.kind in "iu" else v.astype(np.float64) for k, v in self.arrays.items()}


@dataclass(frozen=True)
class Case:
    """`width` is x's last dimension: the whole row (num_heads * head_dim for ops with heads).
    `regime` is x's input regime; `choices` the regimes of the op's other drawn operands, as
    ((operand, regime), ...) in the record's `chosen` order (missing ones get the operand's default)."""

    op: str
    convention: str
    dtype: str  # canonical name: float32 | bfloat16 | float16
    rows: int
    width: int
    num_heads: int = 1
    regime: str = "normal"
    choices: tuple = ()
    eps: float | None = None  # None: the convention's config eps (its contract's)
    sample: int = 0

    def __post_init__(self) -> None:
        record = get_op(self.op)
        object.__setattr__(self, "dtype", get_format(self.dtype).name)
        config = get_contract(self.op, self.convention).eps  # raises for an unknown or undefined pair
        object.__setattr__(self, "eps", _normalise_eps(self.eps, config))
        regimes.check_input_regime(self.regime, record.dims)
        object.__setattr__(self, "choices", _normalise_choices(record, self.choices))
        if min(self.rows, self.width, self.num_heads) < 1:
            raise UsageError(f"case shape must be positive, got rows={self.rows} width={self.width} "
                             f"heads={self.num_heads}")
        check_size(self.rows, self.width)
        if self.num_heads != 1 and "num_heads" not in record.dims:
            raise UsageError(f"{self.op} has no heads; got num_heads={self.num_heads}")
        if self.width % self.num_heads:
            raise UsageError(f"width {self.width} is not divisible by num_heads={self.num_heads}")
        if record.even_head_dim and self.head_dim % 2:
            raise UsageError(f"{self.op} rotates pairs of channels: head_dim must be even, got {self.head_dim}")

    @classmethod
    def of(cls, op: str, convention: str, dtype: str, shape: str, regime: str = "normal", sample: int = 0,
           eps: float | None = None, **choices) -> "Case":
        """A case from its shape text as ids and suites write it ('8x1024', '4x8x64'), its eps (None:
        the convention's) and its operands' regimes by operand name (weight="trained", gate="closed")."""
        rows, width, heads = parse_shape(get_op(op), shape)
        return cls(op, convention, dtype, rows, width, heads, regime, tuple(choices.items()), eps, sample)

    # ---- identity ----------------------------------------------------------------------------

    @cached_property
    def record(self) -> Op:
        return get_op(self.op)

    @property
    def head_dim(self) -> int:
        """The width of one head (the whole row for ops without heads)."""
        return self.width // self.num_heads

    @property
    def span(self) -> int:
        """The normalised span, the reduction length of its statistic: head_dim for a per-head norm,
        the whole row otherwise (the full H*D vector when the contract's scope is "full")."""
        return self.head_dim if self.contract.scope == "head" else self.width

    def choice(self, operand: str, absent: str = "") -> str:
        """The regime operand `operand` is drawn from; `absent` when the op does not take it."""
        for name, regime in self.choices:
            if name == operand:
                return regime
        return absent

    @cached_property
    def shape_text(self) -> str:
        values = {"rows": self.rows, "width": self.width, "num_heads": self.num_heads, "head_dim": self.head_dim}
        return "x".join(str(values[d]) for d in self.record.dims)

    @cached_property
    def id(self) -> str:
        record = self.record
        parts = [f"{self.op}@{self.convention}", get_format(self.dtype).short, self.shape_text, self.regime]
        parts += [f"{o.id_key}={self.choice(o.name)}" for o in record.chosen]
        if self.eps is not None:
            parts.append(f"eps={self.eps:g}")
        text = "/".join(parts)
        return text + (f"#{self.sample}" if self.sample else "")

    @cached_property
    def seed(self) -> int:
        """Stable 32-bit seed of the input configuration (not of op, convention or dtype)."""
        legacy = [self.choice(name, absent) for name, absent in _SEED_PARTS]
        newer = [f"{name}={regime}" for name, regime in self.choices if name not in dict(_SEED_PARTS)]
        return _stable_hash("|".join([self.shape_text, self.regime, *legacy, *newer, str(self.sample)]))

    @cached_property
    def contract(self) -> Contract:
        """The convention's contract for the op, at the case's eps."""
        base = get_contract(self.op, self.convention)
        return base if self.eps is None else base.replace(eps=self.eps)

    @classmethod
    def from_id(cls, case_id: str) -> "Case":
        match = _ID_RE.fullmatch(str(case_id).strip())
        if not match:
            raise UsageError(f"malformed case id {case_id!r}; expected like "
                             "'rms_norm@qwen3/bf16/8x1024/normal/w=trained'")
        g = match.groupdict()
        record = get_op(g["op"])
        keys = {o.id_key: o.name for o in record.chosen}
        choices, eps = {}, None
        for part in (g["extras"] or "").split("/"):
            if part:
                key, _, value = part.partition("=")
                if key == "eps":
                    eps = _parse_eps(value, case_id)
                elif key in keys:
                    choices[keys[key]] = value
                else:
                    raise UsageError(f"case id {case_id!r}: {g['op']} takes no '{key}='; its parts are "
                                     f"{', '.join(k + '=' for k in [*keys, 'eps'])}")
        return cls.of(g["op"], g["conv"], g["dtype"], g["shape"], g["regime"], int(g["sample"] or 0), eps,
                      **choices)

    # ---- inputs ------------------------------------------------------------------------------

    def draw_float64(self) -> dict[str, np.ndarray]:
        """The float64 draw of every float operand, before the cast to the case dtype."""
        return {o.name: self._draw(o) for o in self.record.operands if o.dtype == "case"}

    def _draw(self, operand: Operand) -> np.ndarray:
        if operand.name == "x":
            return regimes.draw_input(self.regime, np.random.default_rng([self.seed, operand.stream]),
                                      self.rows, self.num_heads, self.head_dim)
        regime = self.choice(operand.name) or operand.default
        length = self._length(operand)
        if operand.per == CASE:
            # depends only on its regime, length and sample, not on x: the same trained weights meet
            # every input regime, and same-shaped cases can be batched row-wise
            rng = np.random.default_rng([_stable_hash(f"{regime}|{length}|{self.sample}"), operand.stream])
            shape = (length,)
        else:
            rng = np.random.default_rng([self.seed, operand.stream])
            shape = (self.rows,) if length is None else (self.rows, length)
        return regimes.draw(operand.table, regime, rng, shape)

    def _length(self, operand: Operand) -> int | None:
        if operand.length == "none":
            return None
        if operand.length == "span":
            return self.width if self.contract.weight_span == "full" else self.head_dim
        return self.width

    def inputs(self) -> CaseInputs:
        dtype = get_format(self.dtype).np_dtype
        arrays = {}
        for operand in self.record.operands:
            if operand.dtype == "case":
                arrays[operand.name] = self._draw(operand).astype(dtype)
            else:  # integers: never cast to the float dtype
                arrays[operand.name] = self._draw(operand).astype(operand.dtype)
        return CaseInputs(arrays, self.num_heads)


def parse_shape(record: Op, shape) -> tuple[int, int, int]:
    """(rows, width, num_heads) from a shape written in the op's dims ('8x1024', '4x8x64')."""
    try:
        dims = [int(d) for d in str(shape).split("x")]
    except ValueError:
        raise UsageError(f"shape {shape!r} is not like '8x1024' or '8x4x128'") from None
    if len(dims) != len(record.dims):
        shown = " x ".join("heads" if d == "num_heads" else d for d in record.dims)
        raise UsageError(f"{record.name} shapes are {shown}, got {shape!r}")
    values = dict(zip(record.dims, dims))
    heads = values.get("num_heads", 1)
    width = values["width"] if "width" in values else heads * values["head_dim"]
    return values["rows"], width, heads


def check_size(rows: int, width: int) -> None:
    """Raise UsageError for a case beyond MAX_WIDTH wide or MAX_CASE_ELEMENTS in all."""
    if width > MAX_WIDTH:
        raise UsageError(f"a case is at most {MAX_WIDTH} wide, got width {width}: use a narrower shape")
    if rows * width > MAX_CASE_ELEMENTS:
        raise UsageError(f"a case has at most {MAX_CASE_ELEMENTS} elements, got {rows} x {width} = "
                         f"{rows * width:.3g}: use fewer rows")


def _normalise_choices(record: Op, given) -> tuple:
    given = dict(given)
    chosen = {o.name: o for o in record.chosen}
    extra = sorted(set(given) - set(chosen))
    if extra:
        raise UsageError(f"{record.name} draws no {', '.join(extra)}; it chooses regimes for: "
                         f"{', '.join(chosen) or 'nothing'}")
    out = []
    for name, operand in chosen.items():
        regime = str(given.get(name) or operand.default)
        regimes.check_regime(operand.table, regime)
        out.append((name, regime))
    return tuple(out)


def _normalise_eps(eps, config: float) -> float | None:
    """None for the convention's own eps (so a case has one id), else a positive finite float."""
    if eps is None:
        return None
    if isinstance(eps, str) and eps == "config":
        return None
    try:
        value = float(eps)
    except (TypeError, ValueError):
        raise UsageError(f"eps must be a number or 'config', got {eps!r}") from None
    if not (value > 0 and value < float("inf")):
        raise UsageError(f"eps must be a positive finite number, got {eps!r}")
    return None if value == config else value


def _parse_eps(text: str, case_id: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise UsageError(f"case id {case_id!r}: eps={text!r} is not a number") from None


def _stable_hash(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "little")


_ID_RE = re.compile(
    r"(?P<op>\w+)@(?P<conv>[\w.\-]+)/(?P<dtype>\w+)/(?P<shape>\d+(?:x\d+){1,2})/"
    r"(?P<regime>[\w.:\-+]+)(?:/(?P<extras>(?:\w+=[\w.+\-]+/?)+))?(?:#(?P<sample>\d+))?"
)
