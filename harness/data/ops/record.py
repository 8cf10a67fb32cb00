"""What an op record holds: the Op and Operand types, the operands ops share, the rounding chains
an op's budget follows. Each op is one module of this package (rms_norm.py, layer_norm.py, ...)
holding its record; the package (`__init__.py`) lists them.

PyTorch's OpInfo (torch/testing/_internal/opinfo/core.py) is the model: one entry per op holds its
operands (which arrays it takes, which are one per row and which one per case, how each is drawn
and how it appears in a case id and a suite file), its scalar parameters, the call a user's
function receives, the protocol for a module class, the shape a case is written in, the contract
knobs that apply, its exact maths (forward and VJP), its ULP budget rule and where ULPs are
counted. The case model, the runner's batching, diagnosis, user-code adapters, repro and the
reports ask the record. Pure data and the exact maths it points at.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from normdiff.harness.data import knobs as K

ROW, CASE = "row", "case"  # an operand is one entry per row of x, or one array for the whole case


@dataclass(frozen=True)
class Operand:
    """One array an op takes.

    per     "row": one entry per row of x; the runner concatenates same-shaped cases' rows into one
            call. "case": one array for the whole case; the runner batches only cases whose
            per-case operands are bit-identical (they are part of the batch key).
    dtype   "case": the case's float dtype; "int64": integers, never cast to the float dtype.
    length  its last axis: "width" (x's), "span" (the contract's weight_span: head_dim or width),
            "none" (one value per row: shape (rows,)), or a number (a per-case scalar: 1).
    table   the regime table (cases/regimes.py) that draws it: "input" for x, "weight", "gate",
            "positions"; `draws`: the regimes of a table of its own, (name, draw(rng, shape)) pairs,
            for an operand only its op module knows (cases/regimes.py adds them to its tables).
    id_key  its part of a case id (`w=trained`); "" when its draw has no choice to name.
    suite_key  the suite-file key that lists its regimes ("weights"); column: its results.csv
            column; default: its regime when a suite says nothing.
    stream  the random stream it is drawn from: x 0, weight 1, gate 2, positions 3 (part of every
            case's seed; never reuse one).
    gradient  the backward pass's output for it (results.csv `output`): "d" + its name unless given.
    """

    name: str
    per: str = ROW
    dtype: str = "case"
    length: str | int = "width"
    table: str = ""
    id_key: str = ""
    suite_key: str = ""
    column: str = ""
    default: str = ""
    stream: int = 0
    gradient: str = ""
    draws: tuple[tuple[str, Callable], ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "gradient", self.gradient or "d" + self.name)

    @property
    def chosen(self) -> bool:
        """Whether a case names the regime it is drawn from (it is then part of the case id)."""
        return bool(self.id_key)

    @property
    def scalar(self) -> bool:
        """A per-case scalar (a quantizer's given scale): nothing a memory layout moves."""
        return isinstance(self.length, int)

    @property
    def per_case_array(self) -> bool:
        """One array for the whole case (a weight, a bias): the one a broadcast layout lays out with
        stride 0, which must then hold a constant (cases/layouts.py); a per-case scalar is not one."""
        return self.per == CASE and not self.scalar


X = Operand("x", table="input", stream=0, gradient="dx")
WEIGHT = Operand("weight", per=CASE, length="span", table="weight", id_key="w", suite_key="weights",
                 column="weights", default="ones", stream=1, gradient="dw")
GATE = Operand("gate", table="gate", id_key="z", suite_key="gates", column="gate", default="open", stream=2)
POSITIONS = Operand("positions", dtype="int64", length="none", table="positions", default="sorted", stream=3)
# stream 4 is the upstream gradient's (cases/model.py DY_STREAM)
BIAS = Operand("bias", per=CASE, length="span", table="bias", id_key="b", suite_key="biases", column="bias",
               default="zeros", stream=5, gradient="db")
RESIDUAL = Operand("residual", table="residual", id_key="r", suite_key="residuals", column="residual",
                   default="normal", stream=6)


@dataclass(frozen=True)
class Rounding:
    """An op's rounding chain (harness/data/budgets.py derives the numbers): the ULPs of the output
    dtype a correct implementation's roundings may cost in each dtype, and the dtype roundings a
    correct backward takes on top of the usual ones (budgets.GRADIENT_ROUNDINGS), for every
    gradient or only for `backward_outputs`."""

    name: str
    chain: tuple[tuple[str, float], ...]  # (dtype, ULPs)
    backward_extra: int = 0
    backward_outputs: tuple[str, ...] = ()  # () : every gradient

    def ulps(self, dtype: str) -> float:
        return dict(self.chain)[dtype]

    def backward_roundings(self, output: str) -> int:
        return self.backward_extra if not self.backward_outputs or output in self.backward_outputs else 0


def _chain(float32: float, low: float) -> tuple[tuple[str, float], ...]:
    return (("float32", float32), ("bfloat16", low), ("float16", low))


# The chains budgets.py derives ("Chains"): one rounding of the result (the Llama cast's two roundings
# count 1 + 1 in bf16/fp16); HF's gated norm rounds three times, and its backward's activation two
# more; RoPE's cos and sin rounded, two products and a sum, and its transpose three more; a centring
# op's; a fused add rounding its sum to the dtype first, and summing its two upstream gradients
SINGLE = Rounding("single", _chain(8.0, 2.0))
# a contract that multiplies by the weight in float32 and rounds once (cast "one_rounding"): that one
# rounding, <= 1 in bf16 / fp16, where the Llama cast's two take 2; a second rounding then leaves the
# budget wherever it costs more than the first's slack (and the rounding chain, engine/chain.py,
# sees it where it does not)
ONE_ROUNDING = Rounding("one_rounding", _chain(8.0, 1.0))
THREE_ROUNDINGS = Rounding("three_roundings", _chain(8.0, 3.0), backward_extra=2)
ROTATION = Rounding("rotation", _chain(18.0, 6.0), backward_extra=3)
CENTRED = Rounding("centred", _chain(9.0, 2.0))
CENTRED_ONE_ROUNDING = Rounding("centred_one_rounding", _chain(9.0, 1.0))
RESIDUAL_SUM = Rounding("residual_sum", _chain(9.0, 3.0), backward_extra=1, backward_outputs=("dx", "dresidual"))
ROUNDINGS = (SINGLE, ONE_ROUNDING, THREE_ROUNDINGS, ROTATION, CENTRED, CENTRED_ONE_ROUNDING, RESIDUAL_SUM)
# the relaxation (Op.relaxed) a weighted op rounding once takes: its chain's one-rounding form
ROUNDS_ONCE = (("cast", "one_rounding", ONE_ROUNDING),)


@dataclass(frozen=True)
class Op:
    """One op. `call` is the positional call a user's function receives: operand names and the
    scalar parameters ("eps", "num_heads"). `optional` lists trailing call arguments a user function
    may leave out. `module_call` is what a module class's forward receives (None: the op has no
    class protocol); a class is built as Cls(dim, eps=eps) and given the case's weight.
    `dims` is how a case's shape is written ("rows", "width") or ("rows", "num_heads", "head_dim").
    `knob_groups` are the contract knobs that apply (knobs.py). `rounding` is its rounding chain
    (`Rounding`; budgets.py), `relaxed` the chains a contract's knob values give it instead, and
    `ulp_at` where errors are counted in ULPs (engine/judge.py). `exact(contract, arrays,
    num_heads, power)` is its forward evaluated exactly in float64 (a dict of arrays by operand name;
    `power`: RoPE's choice of float32 frequency, rope.py) and `vjp(contract, arrays, dy, num_heads,
    absolute, floor, power)` its exact vector-Jacobian product (norm.py has both for the norms). `even_head_dim`:
    the op rotates channel pairs of each head. Its backward pass (a case with an upstream gradient
    dy) has one output per float operand (`gradients`: dx, dw, dgate); `backward_call` is the call
    a user's explicit backward receives: dy first, then the forward's call."""

    name: str
    summary: str
    operands: tuple[Operand, ...]
    call: tuple[str, ...]
    knob_groups: tuple[str, ...]
    optional: tuple[str, ...] = ()
    module_call: tuple[str, ...] | None = ("x",)
    dims: tuple[str, ...] = ("rows", "width")
    rounding: Rounding = SINGLE
    ulp_at: str = "value"
    even_head_dim: bool = False
    span_name: str = "head"  # what one span of the head axis is called ("group" for a grouped norm)
    # what its forward returns, in order: y, then any further result (a fused add's residual_out);
    # each is judged as a case of its own, and each gets its own upstream gradient in the backward
    results: tuple[str, ...] = ("y",)
    # (gradient, count): a correct backward of this op that takes every step in the dtype rounds
    # more than budgets.GRADIENT_ROUNDINGS counts (budgets.py: torch's autograd of F.normalize)
    dtype_backward_roundings: tuple[tuple[str, int], ...] = ()
    # (knob, value, Rounding): a contract with that knob value follows that chain instead
    relaxed: tuple[tuple[str, object, Rounding], ...] = ()
    # (output, dtype roundings, float32 part(n, reduced_rows) in u32): the budget of a gradient the
    # shared rules do not know (budgets.py `gradient_budget`), for an operand only this op has
    gradient_budgets: tuple[tuple[str, int, Callable], ...] = ()
    # (convention, summary, contract knobs): the contracts this op has under conventions, merged into
    # conventions.py's (the summary names a convention no other op defines)
    conventions: tuple[tuple[str, str, dict], ...] = ()
    # describe(contract) -> the one-line formula `normdiff list conventions` shows; None: the norms'
    # formula composed from the knobs (contracts.py)
    describe: Callable | None = None
    # floor(contract, arrays, num_heads) -> the least magnitude, per element, at which its errors are
    # counted (a sum of terms that can cancel: its terms' magnitude), or None; None: the norms' rule
    # (engine/oracle.py centred_floor, for an op that centres)
    floor: Callable | None = None
    exact: Callable | None = None
    vjp: Callable | None = None
    # whether its forward sums over the span (a norm's statistic): only then does a legal order of
    # that float32 sum have an allowance in its budget (budgets.py, `budget_for`)
    reduces: bool = True
    # whether it has a backward pass (a quantizer has none: ops/quantize.py no_vjp)
    backward: bool = True
    # exact_results(contract, arrays, num_heads) -> {result: exact float64}: for an op whose results
    # are not y and a fused add's sum (a quantizing op's q and scale, ops/quantize.py); None: `exact`
    exact_results: Callable | None = None
    order: int = 100  # where it is listed (`normdiff list ops`, reports): the package sorts by it
    knobs: tuple[str, ...] = field(init=False)
    # the operands whose regime a case chooses (weight, gate), in stream order: the order of their
    # parts in a case id, their suite keys and their results.csv columns
    chosen: tuple[Operand, ...] = field(init=False)

    def __post_init__(self) -> None:
        names = [o.name for o in self.operands]
        if not names or names[0] != "x":
            raise ValueError(f"op {self.name!r}: x must be the first operand")
        unknown = [a for a in self.call if a not in names and a not in PARAMS]
        missing = [n for n in names if n not in self.call]
        if unknown or missing:
            raise ValueError(f"op {self.name!r}: call {self.call} names unknown {unknown} / leaves out "
                             f"operands {missing}")
        if list(self.call[len(self.call) - len(self.optional):]) != list(self.optional):
            raise ValueError(f"op {self.name!r}: optional arguments {self.optional} must end the call")
        if self.exact is None or self.vjp is None:
            raise ValueError(f"op {self.name!r}: give its exact forward and its vjp (norm.py has the norms')")
        object.__setattr__(self, "knobs", K.in_groups(self.knob_groups))
        object.__setattr__(self, "chosen", tuple(sorted((o for o in self.operands if o.chosen), key=lambda o: o.stream)))

    @property
    def inputs(self) -> tuple[str, ...]:
        """The operand names, in call order (the arrays an implementation receives)."""
        return tuple(o.name for o in self.operands)

    @property
    def quantizes(self) -> bool:
        """Whether its output is quantized (q and scale, judged in the format's units)."""
        return "q" in self.results

    @property
    def signature(self) -> str:
        return f"{self.name}({', '.join(self.call)})"

    @property
    def gradients(self) -> dict[str, str]:
        """The backward pass's outputs: output name -> the operand it is the gradient of (the float
        operands, in operand order: dx first; integer operands such as positions get none)."""
        return {o.gradient: o.name for o in self.operands if o.dtype == "case"}

    @property
    def outputs(self) -> tuple[str, ...]:
        """Every output a case of this op can judge: the forward's results, then the gradients
        (where it has a backward pass)."""
        return (*self.results, *(self.gradients if self.backward else ()))

    def by_result(self, value) -> dict:
        """A forward's return as {result: value}: y's array, or a multi-result op's tuple (in
        results order) or dict."""
        if isinstance(value, dict):
            return dict(value)
        values = tuple(value) if len(self.results) > 1 else (value,)
        if len(values) != len(self.results):
            raise ValueError(f"{self.name} returns {len(self.results)} results, got {len(values)}")
        return dict(zip(self.results, values))

    @property
    def upstreams(self) -> tuple[str, ...]:
        """The upstream gradients a backward call receives, one per result: dy (of y), then
        d<result> (a fused add's dresidual_out)."""
        return tuple("dy" if r == "y" else f"d{r}" for r in self.results)

    @property
    def backward_call(self) -> tuple[str, ...]:
        return (*self.upstreams, *self.call)

    @property
    def backward_signature(self) -> str:
        grads = ", ".join(self.gradients)
        return f"{self.name}_backward({', '.join(self.backward_call)}) -> ({grads})"

    def operand(self, name: str) -> Operand | None:
        return next((o for o in self.operands if o.name == name), None)

    def applies(self, knob: str) -> bool:
        return knob in self.knobs

    def rounding_for(self, contract) -> Rounding:
        """The chain a contract's roundings follow: the op's, or a relaxed one its knobs give."""
        for knob, value, rounding in self.relaxed:
            if getattr(contract, knob) == value:
                return rounding
        return self.rounding


PARAMS = ("eps", "num_heads", "group_size")  # the scalar parameters a call can name
PASSES = ("forward", "backward")
HEAD_DIMS = ("rows", "num_heads", "head_dim")
NORM_KNOBS = (K.STATISTIC,)
WEIGHTED_KNOBS = (K.STATISTIC, K.WEIGHT)
GROUP_DIMS = ("rows", "num_heads", "head_dim")  # a grouped norm's groups ride on the head axis
