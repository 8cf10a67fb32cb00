"""The case: one op under one convention on one deterministic input.

A case is fully described by its id, for example
    rms_norm@qwen3/bf16/8x1024/tiny_rms:1e-3/w=trained
    rms_norm@qwen3/bf16/8x1024/tiny_rms:1e-3/w=trained/eps=1e-05
    qk_norm@olmo2/fp16/4x8x64/head_scales:lognormal/w=ones
    gated_rms_norm@qwen3.5/fp32/8x128/normal/w=ones/z=closed#1
    rms_norm@qwen3/bf16/8x1024/normal/w=trained/dy=aligned/out=dx
and `Case.from_id` rebuilds it, so every report row can be replayed from its id alone. The id's
shape is written in the op record's dims (rows x width, or rows x heads x head_dim), then x's input
regime, then `key=regime` for each operand the op draws from a named regime (the record's id_key:
w for the weight, z for the gate), then `eps=VALUE` when the case runs at another eps than its
convention's config eps, then `layout=NAME` when its arrays are not contiguous in memory
(cases/layouts.py: the same values, so the same seed), then for a backward case `dy=REGIME` (its upstream gradient's regime,
cases/regimes.py GRADIENT_REGIMES) and `out=OUTPUT` (which gradient the row judges: dx, dw, dgate;
the op record's `gradients`), then `#sample` when it is not 0. eps is no part of the seed: the same
inputs run at every eps. A forward case judges y and names neither.

The backward pass: one call computes every gradient of a backward case (`call_id`, the id without
`out=`), and each gradient is judged as its own case, so every report row is still one case x one
implementation. dy is drawn from the exact forward output y (the "aligned" regime correlates it
with y) on its own stream, the same for every output of the call, and cast to the case dtype.

Inputs are drawn in float64 from a seed that depends only on the input configuration (shape,
regimes, sample), so the same input appears across ops, conventions and dtypes, then cast once to
the case's dtype. Per-case operands (the weight) depend only on their regime, length and sample, so
the same trained weights meet every input regime. Integer operands (positions) are drawn as int64
and never cast. Nothing here knows a particular op: the op record (harness/data/ops/) says what
to draw.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field, replace
from functools import cached_property

import numpy as np

from normdiff.cases import layouts, regimes
from normdiff.harness.data.contracts import Contract
from normdiff.harness.data.conventions import get_contract
from normdiff.harness.data.dtypes import get_format
from normdiff.harness.data.errors import UsageError
from normdiff.harness.data.names import unknown
from normdiff.harness.data.ops import CASE, Op, Operand, get_op
from normdiff.text import general, number

DY_STREAM = 4  # the upstream gradient's random stream (the operands use 0-3: ops.py)

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
    # how the worker lays the arrays out in memory before the implementation gets them (cases/layouts.py)
    layout: str = layouts.DEFAULT

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
    dy: str = ""  # a backward case's upstream-gradient regime; "" for a forward case
    output: str = "y"  # what this case judges: a forward result (y, residual_out) or one of the op's gradients
    layout: str = layouts.DEFAULT  # how its arrays lie in memory (cases/layouts.py); not part of the seed
    # whether a run also calls some of its rows alone and compares them bit for bit with the same
    # rows in the call (batch invariance: harness/engine/runner.py); a check, not an input, so no
    # part of the id or of equality
    batch_check: bool = field(default=False, compare=False)

    def __post_init__(self) -> None:
        record = get_op(self.op)
        object.__setattr__(self, "dtype", get_format(self.dtype).name)
        config = get_contract(self.op, self.convention).eps  # raises for an unknown or undefined pair
        object.__setattr__(self, "eps", _normalise_eps(self.eps, config))
        regimes.check_input_regime(self.regime, record.dims, self.dtype)
        object.__setattr__(self, "choices", _normalise_choices(record, self.choices))
        if min(self.rows, self.width, self.num_heads) < 1:
            raise UsageError(f"case shape must be positive, got rows={self.rows} width={self.width} "
                             f"heads={self.num_heads}")
        check_size(self.rows, self.width)
        if not self.dy and self.output == "y" and "y" not in record.results:  # its first result is not y (q)
            object.__setattr__(self, "output", record.results[0])
        _check_pass(record, self.dy, self.output)
        if self.dy and not record.backward:
            raise UsageError(f"{self.op} has no backward pass (a quantizer's derivative is 0 almost everywhere)")
        group = get_contract(self.op, self.convention).quant_group if "q" in record.results else 0
        if group and self.width % group:
            raise UsageError(f"{self.op}@{self.convention} quantizes blocks of {group} columns: the width "
                             f"must be a multiple of {group}, got {self.width}")
        layouts.check_case_layout(self.layout, {o.name: self.choice(o.name) or o.default
                                                for o in record.operands if o.per_case_array}, record.quantizes)
        if self.num_heads != 1 and "num_heads" not in record.dims:
            raise UsageError(f"{self.op} has no heads; got num_heads={self.num_heads}")
        if self.width % self.num_heads:
            raise UsageError(f"width {self.width} is not divisible by num_heads={self.num_heads}")
        if record.even_head_dim and self.head_dim % 2:
            raise UsageError(f"{self.op} rotates pairs of channels: head_dim must be even, got {self.head_dim}")

    @classmethod
    def of(cls, op: str, convention: str, dtype: str, shape: str, regime: str = "normal", sample: int = 0,
           eps: float | None = None, dy: str = "", output: str = "", layout: str = layouts.DEFAULT,
           **choices) -> "Case":
        """A case from its shape text as ids and suites write it ('8x1024', '4x8x64'), its eps (None:
        the convention's) and its operands' regimes by operand name (weight="trained", gate="closed").
        A backward case names its upstream gradient's regime `dy` and its `output` (default dx);
        `layout` how its arrays lie in memory (default contiguous)."""
        rows, width, heads = parse_shape(get_op(op), shape)
        output = output or ("dx" if dy else get_op(op).results[0])
        return cls(op, convention, dtype, rows, width, heads, regime, tuple(choices.items()), eps, sample,
                   dy, output, layout)

    # ---- the pass --------------------------------------------------------------------------------

    @property
    def pass_(self) -> str:
        """"forward" (judges y) or "backward" (judges a gradient)."""
        return "backward" if self.dy else "forward"

    def with_output(self, output: str) -> "Case":
        """The same call judged on another of its outputs."""
        return replace(self, output=output)

    def outputs(self) -> list["Case"]:
        """Every case of this call: one per result of the forward (y; a fused add's residual_out
        too), one per gradient for a backward one."""
        return [self.with_output(name) for name in (self.record.gradients if self.dy else self.record.results)]

    @cached_property
    def call_id(self) -> str:
        """The id of the call that computes this case's output (a backward case's, without `out=`)."""
        return self._id(with_output=False)

    @property
    def operand(self) -> str:
        """The operand this case's output is the gradient of ("" for a forward result)."""
        return self.record.gradients.get(self.output, "")

    @property
    def key(self) -> str:
        """What this case's output is called in its call's values: the forward result's name (y,
        residual_out), or the operand a gradient is of (x, weight, ...)."""
        return self.operand or self.output

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
        return self._id(with_output=True)

    def _id(self, with_output: bool) -> str:
        record = self.record
        parts = [f"{self.op}@{self.convention}", get_format(self.dtype).short, self.shape_text, self.regime]
        parts += [f"{o.id_key}={self.choice(o.name)}" for o in record.chosen]
        if self.eps is not None:
            parts.append(f"eps={general(self.eps)}")
        if self.layout != layouts.DEFAULT:
            parts.append(f"layout={self.layout}")
        if self.dy:
            parts += [f"dy={self.dy}"] + ([f"out={self.output}"] if with_output else [])
        elif with_output and self.output != self.record.results[0]:  # a later result (residual_out, scale)
            parts.append(f"out={self.output}")
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
        choices, eps, grad, layout = {}, None, {}, layouts.DEFAULT
        for part in (g["extras"] or "").split("/"):
            if part:
                key, _, value = part.partition("=")
                if key == "eps":
                    eps = _parse_eps(value, case_id)
                elif key in ("dy", "out"):
                    grad[key] = value
                elif key == "layout":
                    layout = value
                elif key in keys:
                    choices[keys[key]] = value
                else:
                    raise UsageError(f"case id {case_id!r}: {g['op']} takes no '{key}='; its parts are "
                                     f"{', '.join(k + '=' for k in [*keys, 'eps', 'layout', 'dy', 'out'])}")
        if "out" in grad and "dy" not in grad and grad["out"] not in record.results:
            raise UsageError(f"case id {case_id!r}: out={grad['out']} names a gradient, which needs dy=REGIME before it"
                             + (f" ({g['op']}'s forward results: {', '.join(record.results)})"
                                if len(record.results) > 1 else ""))
        return cls.of(g["op"], g["conv"], g["dtype"], g["shape"], g["regime"], int(g["sample"] or 0), eps,
                      grad.get("dy", ""), grad.get("out", ""), layout, **choices)

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
        if isinstance(operand.length, int):  # a per-case scalar's (ops/record.py)
            return operand.length
        if operand.length == "none":
            return None
        if operand.length == "span":
            return self.width if self.contract.weight_span == "full" else self.head_dim
        return self.width

    def upstream(self, y: np.ndarray, result: str = "y") -> np.ndarray:
        """The upstream gradient of a backward case for the forward result `result` (dy for y), drawn
        from that result's exact value (float64) by its regime, on its own stream, in the case
        dtype: the same for every output of the call."""
        if not self.dy:
            raise ValueError(f"{self.id} is a forward case: it has no upstream gradient")
        extra = [] if result == "y" else [_stable_hash(result)]  # y's stream is the first version's
        rng = np.random.default_rng([self.seed, DY_STREAM, _stable_hash(self.dy), *extra])
        return regimes.draw_gradient(self.dy, rng, y).astype(get_format(self.dtype).np_dtype)

    def upstreams(self, results: dict[str, np.ndarray]):
        """The backward call's upstream gradients from the exact forward `results` (oracle.results):
        dy alone (an array) for a one-result op, else {result: its upstream gradient}."""
        if len(self.record.results) == 1:
            return self.upstream(results["y"])
        return {name: self.upstream(results[name], name) for name in self.record.results}

    def inputs(self) -> CaseInputs:
        dtype = get_format(self.dtype).np_dtype
        arrays = {}
        for operand in self.record.operands:
            if operand.dtype == "case":
                arrays[operand.name] = self._draw(operand).astype(dtype)
            else:  # integers: never cast to the float dtype
                arrays[operand.name] = self._draw(operand).astype(operand.dtype)
        return CaseInputs(arrays, self.num_heads, self.layout)


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
                         f"{number(float(rows * width))}: use fewer rows")


def _check_pass(record: Op, dy: str, output: str) -> None:
    if not dy:
        if output not in record.results:
            raise UsageError(f"output {output!r} is a gradient: a backward case needs dy=REGIME "
                             f"({', '.join(regimes.GRADIENT_REGIMES)})" if output in record.gradients else
                             f"{record.name}'s forward returns {', '.join(record.results)}; got out={output!r}")
        return
    if dy not in regimes.GRADIENT_REGIMES:
        raise UsageError(unknown("gradient regime", dy, regimes.GRADIENT_REGIMES))
    if output not in record.gradients:
        raise UsageError(f"{record.name}'s backward pass outputs {', '.join(record.gradients)}; got out={output!r}")


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
