"""The op records: everything normdiff knows about an op, in one declarative entry.

PyTorch's OpInfo (torch/testing/_internal/opinfo/core.py) is the model: one entry per op holds its
operands (which arrays it takes, which are one per row and which one per case, how each is drawn
and how it appears in a case id and a suite file), its scalar parameters, the call a user's
function receives, the protocol for a module class, the shape a case is written in, the contract
knobs that apply, the ULP budget rule and where ULPs are counted. The case model, the runner's
batching, diagnosis, user-code adapters, repro and the reports ask the record; only the record, the
oracle and the own implementations say anything about a particular op.

Adding an op is adding a record here (and its maths to the oracle and the own implementations, when
the knobs cannot already express it): CONTRIBUTING.md has the list. Pure data.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from normdiff.harness.data import knobs as K
from normdiff.harness.data.errors import UsageError, unknown

ROW, CASE = "row", "case"  # an operand is one entry per row of x, or one array for the whole case


@dataclass(frozen=True)
class Operand:
    """One array an op takes.

    per     "row": one entry per row of x; the runner concatenates same-shaped cases' rows into one
            call. "case": one array for the whole case; the runner batches only cases whose
            per-case operands are bit-identical (they are part of the batch key).
    dtype   "case": the case's float dtype; "int64": integers, never cast to the float dtype.
    length  its last axis: "width" (x's), "span" (the contract's weight_span: head_dim or width),
            "none" (one value per row: shape (rows,)).
    table   the regime table (cases/regimes.py) that draws it: "input" for x, "weight", "gate",
            "positions".
    id_key  its part of a case id (`w=trained`); "" when its draw has no choice to name.
    suite_key  the suite-file key that lists its regimes ("weights"); column: its results.csv
            column; default: its regime when a suite says nothing.
    stream  the random stream it is drawn from: x 0, weight 1, gate 2, positions 3 (part of every
            case's seed; never reuse one).
    """

    name: str
    per: str = ROW
    dtype: str = "case"
    length: str = "width"
    table: str = ""
    id_key: str = ""
    suite_key: str = ""
    column: str = ""
    default: str = ""
    stream: int = 0

    @property
    def chosen(self) -> bool:
        """Whether a case names the regime it is drawn from (it is then part of the case id)."""
        return bool(self.id_key)


X = Operand("x", table="input", stream=0)
WEIGHT = Operand("weight", per=CASE, length="span", table="weight", id_key="w", suite_key="weights",
                 column="weights", default="ones", stream=1)
GATE = Operand("gate", table="gate", id_key="z", suite_key="gates", column="gate", default="open", stream=2)
POSITIONS = Operand("positions", dtype="int64", length="none", table="positions", default="sorted", stream=3)
# stream 4 is the upstream gradient's (cases/model.py DY_STREAM)
BIAS = Operand("bias", per=CASE, length="span", table="bias", id_key="b", suite_key="biases", column="bias",
               default="zeros", stream=5)
RESIDUAL = Operand("residual", table="residual", id_key="r", suite_key="residuals", column="residual",
                   default="normal", stream=6)


@dataclass(frozen=True)
class Op:
    """One op. `call` is the positional call a user's function receives: operand names and the
    scalar parameters ("eps", "num_heads"). `optional` lists trailing call arguments a user function
    may leave out. `module_call` is what a module class's forward receives (None: the op has no
    class protocol); a class is built as Cls(dim, eps=eps) and given the case's weight.
    `dims` is how a case's shape is written ("rows", "width") or ("rows", "num_heads", "head_dim").
    `knob_groups` are the contract knobs that apply (knobs.py). `rounding` names the ULP budget rule
    (budgets.py) and `ulp_at` where errors are counted in ULPs (engine/judge.py). `even_head_dim`:
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
    rounding: str = "single"
    ulp_at: str = "value"
    even_head_dim: bool = False
    span_name: str = "head"  # what one span of the head axis is called ("group" for a grouped norm)
    # what its forward returns, in order: y, then any further result (a fused add's residual_out);
    # each is judged as a case of its own, and each gets its own upstream gradient in the backward
    results: tuple[str, ...] = ("y",)
    # (gradient, count): a correct backward of this op that takes every step in the dtype rounds
    # more than budgets.GRADIENT_ROUNDINGS counts (budgets.py: torch's autograd of F.normalize)
    dtype_backward_roundings: tuple[tuple[str, int], ...] = ()
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
        object.__setattr__(self, "knobs", K.in_groups(self.knob_groups))
        object.__setattr__(self, "chosen", tuple(sorted((o for o in self.operands if o.chosen), key=lambda o: o.stream)))

    @property
    def inputs(self) -> tuple[str, ...]:
        """The operand names, in call order (the arrays an implementation receives)."""
        return tuple(o.name for o in self.operands)

    @property
    def signature(self) -> str:
        return f"{self.name}({', '.join(self.call)})"

    @property
    def gradients(self) -> dict[str, str]:
        """The backward pass's outputs: output name -> the operand it is the gradient of (the float
        operands, in operand order: dx first; integer operands such as positions get none)."""
        return {GRADIENT_NAMES[o.name]: o.name for o in self.operands if o.dtype == "case"}

    @property
    def outputs(self) -> tuple[str, ...]:
        """Every output a case of this op can judge: the forward's results, then the gradients."""
        return (*self.results, *self.gradients)

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


PARAMS = ("eps", "num_heads", "group_size")  # the scalar parameters a call can name
# a float operand's gradient, as the backward pass's output is named (results.csv `output`)
GRADIENT_NAMES = {"x": "dx", "weight": "dw", "gate": "dgate", "bias": "db", "residual": "dresidual"}
PASSES = ("forward", "backward")
HEAD_DIMS = ("rows", "num_heads", "head_dim")
_NORM = (K.STATISTIC,)
_WEIGHTED = (K.STATISTIC, K.WEIGHT)
GROUP_DIMS = ("rows", "num_heads", "head_dim")  # a grouped norm's groups ride on the head axis

OPS: dict[str, Op] = {
    op.name: op
    for op in (
        Op("rms_norm", "y = x / sqrt(mean(x^2) + eps) * w  (w or 1 + w by convention)",
           (X, WEIGHT), ("x", "weight", "eps"), _WEIGHTED),
        # HF rounds the gated norm three times (budgets.py)
        Op("gated_rms_norm", "y = rms_norm(x) * w * act(gate)  (Qwen3.5 linear attention)",
           (X, GATE, WEIGHT), ("x", "gate", "weight", "eps"), _WEIGHTED + (K.GATE,),
           module_call=("x", "gate"), rounding="three_roundings"),
        Op("l2_norm", "y = x * rsqrt(sum(x^2) + eps)  (Qwen3.5 q/k before the delta rule)",
           (X,), ("x", "eps"), _NORM, optional=("eps",), dtype_backward_roundings=(("dx", 10),)),
        Op("qk_norm", "RMSNorm of q/k over each head (Qwen3) or the whole H*D vector (OLMo2)",
           (X, WEIGHT), ("x", "weight", "num_heads", "eps"), _WEIGHTED + (K.SCOPE,), dims=HEAD_DIMS),
        # a norm module cannot take the positions: RoPE is not its business, so no class protocol
        Op("qk_norm_rope", "per-head QK-Norm, then rotary position embedding (rotate_half form; Qwen3 attention)",
           (X, WEIGHT, POSITIONS), ("x", "weight", "positions", "num_heads", "eps"),
           _WEIGHTED + (K.SCOPE, K.ROPE), module_call=None, dims=HEAD_DIMS, rounding="rotation",
           ulp_at="rotation_pair", even_head_dim=True),
        # torch's F.layer_norm order: centre, normalise, then w, then + b; the budget grows with
        # the rows' |mean| / std, the conditioning of the centring (budgets.py)
        Op("layer_norm", "y = (x - mean x) / sqrt(var(x) + eps) * w + b  (GPT-2, GPT-NeoX, Phi, Cohere, OLMo-1)",
           (X, WEIGHT, BIAS), ("x", "weight", "bias", "eps"), _WEIGHTED + (K.CENTRE, K.BIAS),
           rounding="centred"),
        # vLLM / SGLang fused_add_rms_norm: h = x + residual, y = rms_norm(h); returns (y, h). The
        # sum is rounded to the input dtype before the norm (HF's unfused decoder) or kept in
        # float32 (vLLM's native path) by convention; residual_out is h in the input dtype
        Op("add_rms_norm", "h = x + residual; y = rms_norm(h) * w; returns (y, residual_out = h)  (vLLM, SGLang)",
           (X, RESIDUAL, WEIGHT), ("x", "residual", "weight", "eps"), _WEIGHTED + (K.RESIDUAL,),
           module_call=("x", "residual"), rounding="residual_sum", results=("y", "residual_out")),
        # Mamba2 / Bamba / Zamba2 / NemotronH: x * silu(gate), then an RMSNorm over each group of
        # group_size channels (a case's "heads" are the groups), weight over the whole width
        Op("group_gated_rms_norm", "y = rms_norm_per_group(x * silu(gate)) * w  (Mamba2 MambaRMSNormGated)",
           (X, GATE, WEIGHT), ("x", "gate", "weight", "group_size", "eps"), _WEIGHTED + (K.GATE, K.SCOPE),
           module_call=("x", "gate"), dims=GROUP_DIMS, rounding="three_roundings", span_name="group"),
    )
}


def get_op(name: str) -> Op:
    if name not in OPS:
        raise UsageError(unknown("op", name, OPS))
    return OPS[name]
