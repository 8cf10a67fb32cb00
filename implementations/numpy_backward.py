"""Own NumPy backward pass, written the way training kernels write it (Liger's and apex's fused
RMSNorm backward, llm.c's layernorm and rmsnorm backward): inputs in the case dtype, every step in float32.

    backward(op, contract, inputs, dy, dw_order="blocked", bug="", exact=False)
        -> {"x": dx, "residual": dresidual, "weight": dw, "gate": dgate, "bias": db}
    run_backward(op, contract, inputs, dy)  the correct backward, dw_order "blocked" (the registry's)
    mutant(bug)                             an adapter (op, contract, inputs, dy) -> the same dict,
                                            computing backward pass bug `bug` (below)

(the keys of the differentiable operands the op takes, in their order; positions get none). What it
computes, in float32, per normalised span of n (a head, a group, or the whole row; `contract.scope`):
  RoPE (qk_norm_rope, the norm before RoPE): the upstream gradient is first rotated back,
        dy' = R^T dy = dy * cos - rotate_half(dy) * sin, with float32 cos / sin (correctly rounded)
        of the same float32 angles the forward uses (harness/data/rope.py). Fused: dy' stays float32
        (a pipeline that runs RoPE's backward as its own kernel would round dy' to the dtype here).
  gate  before the norm (group_gated_rms_norm, Mamba2's x * silu(z) first): the norm's input is
        x' = x * a, a = silu(z) in float32, kept in float32 as the forward keeps it; everything
        below runs on x' in place of x, and the gate's backward comes last (below).
  c     (LayerNorm, and the variance statistic) x - m, m the span's mean as the forward computes it
        (float32 sum / n: the value a kernel saves).
  r     the forward's saved statistic, recomputed as numpy_own computes it: float32 squares summed
        in float32, / n for mean_square; for the variance the squares of c summed, / (n -
        correction) (variance_form "one_pass": sum(x^2) / (n - k) - m^2 n / (n - k), as the forward's
        E[x^2] - E[x]^2; exact mode always two-pass, the maths the rounding knob leaves);
        r = 1 / sqrt(stat + eps) ("inside") or 1 / max(sqrt(stat), eps) ("clamp", F.normalize).
  u     x * r (c * r when the contract centres), the normalised value; plus the bias when it comes
        before the weight (bias_order "before_scale": v = u + b); rounded to the input dtype when
        the contract's cast is "llama" (the forward multiplies the weight into that rounded value;
        the rounding's derivative is taken as 1, as autograd takes a .to(dtype)).
  gate  after the norm (gated_rms_norm) a = silu(z) in float32; v = u * (offset + w) [+ b] the
        forward's pre-gate value (for the Llama cast the product rounded to the dtype, as the
        forward's is); dgate = dy * v * silu'(z), silu' = s (1 + z (1 - s)), s = sigmoid(z) in float32.
  db    (LayerNorm) the sum over rows of the gradient reaching the bias: dy' [* a] after the weight
        ("after_scale", y = u (offset + w) + b), dy' [* a] * (offset + w) before it ("before_scale"),
        float32 terms summed in float32 in the reduction order `dw_order` (below), as dw.
  g     dy' * (offset + w) [* a]  (offset + w in float32; the dtype's rounding of it for the Llama
        cast, whose forward multiplies by the rounded value)
  dx    r * g - x * (r^3 / n * sum(g * x))     (mean_square; sum_square drops the 1 / n; the
        clamp's eps branch, where max(sqrt(stat), eps) = eps, has no second term), the sum over
        the span in float32 (np.sum: numpy's partial pairwise summation), rounded once to the
        input dtype at the end. LayerNorm (centred, the variance):
            dx = r * (g - mean(g)) - c * (r^3 / (n - correction) * sum(g * c))
        (= r (g - mean g - x_hat sum(g x_hat) / (n - k)), x_hat = c r, llm.c's and apex's formula;
        the first term's mean(g) is centring's backward, the second the variance's derivative,
        which is along c); centre=False (the mean subtracted in the variance only) keeps the
        variance's derivative along c: dx = r * g - c * (r^3 / (n - k) * sum(g * x)).
        The gate before the norm then: dgate = dx' * x * silu'(z), dx = dx' * a, with dx' the
        float32 value above (Mamba's layernorm_gated backward), each rounded once.
  dw    sum over rows of the per-row contributions dy' [* a] * u (float32 terms; u rounded at the
        Llama cast point as the forward rounds it, which is Liger's casting_mode="llama"), over
        (row, head) pairs for a per-head weight (the weight's gradient summed over the heads that
        share it), in the reduction order `dw_order`:
          "sequential"  row by row into one float32 accumulator (llm.c's dweight[i] += ...)
          "blocked"     float32 partial sums over blocks of 128 rows, each row by row, then the
                        partials summed row by row in float32 (Liger's per-program float32 _dW
                        rows, there n_rows / SM-count rows each, then their sum; apex likewise)
          "pairwise"    np.sum over the rows in float32 (numpy's partial pairwise summation)
          "float64"     the float32 terms summed in float64 and rounded once to float32
        dw is returned in float32 whatever the input dtype: kernels accumulate it in float32 and
        the optimizer's weight is a float32 master copy in mixed-precision training (a kernel that
        casts dw to a bf16 weight's dtype, as Liger's .to(W.dtype) then does, adds one rounding).
  dgate returned in the input dtype (one rounding); db in float32, as dw.
  fused add (add_rms_norm, h = x + residual; dy is {"y": dy, "residual_out": dh}, one upstream
        gradient per result; dy alone means dh = 0, as in the oracle's VJP): everything above runs at h as the forward normalised it (h rounded
        to the input dtype, to nearest or truncated, for residual_dtype "input"; the float32 sum
        for "float32"), the Llama cast's points in the input dtype either way; then
        g_h = dh + dx_norm in float32 (dx_norm the float32 dx above, not rounded first), rounded
        once: dx = dresidual = g_h; dw as above. residual_order "after_norm" (y = norm(x) +
        residual): the norm's backward at x, dx = dx_norm + dh and dresidual = dy + dh, each
        rounded once.

exact=True: the same formula (the correct one, or the bug's) in float64 with no rounding at all: x,
dy, the weight, the bias and the gate taken as float64 values, every step and every sum (the dw order's too)
in float64, RoPE's cos / sin of the float32 angles in float64, no cast point (u, offset + w, the
pre-gate value and the outputs are not rounded to the input dtype), and the outputs returned in
float64 (a fused add's h is the exact sum, whatever its rounding knobs). For bug "" it is the exact VJP (harness/engine/vjp.py) up to float64 rounding; for a bug,
the bug's own exact output, which diagnosis compares a user's gradients with. A bug that is itself a
rounding (the record's `rounding`: bwd-dw-input-dtype) has no rounding to keep here: its exact
output is the correct one.

Backward-pass bugs (`bug`, harness/data/backward_bugs.py: ids, sources, symptoms). Each is one
`Deviation` (the table DEVIATIONS), a departure at the one step it belongs to, everything else as
above:
  bwd-weight-twice           dx's second term times (offset + w) once more:
                             dx = r g - (offset + w) * x * (r^3 / n * sum(g x))
  bwd-weight-missing         dx's g without the weight: g = dy' [* a] (dw, dgate unchanged)
  bwd-offset-missing         dx's g with the weight but offset 0: g = dy' * w [* a]
  bwd-offset-added           dx's g with offset 1: g = dy' * (1 + w) [* a]
                             (these three: the Llama cast rounds the wrong scale as it rounds the
                             right one; the weight-twice factor is dx's own scale)
  bwd-dw-input-dtype         dw's running sums (within blocks and across the partials, or the one
                             running sum of "sequential") held in the input dtype: each add done in
                             float32 from the accumulator's value and the float32 term, rounded to
                             the dtype (a no-op deviation for float32; only the running-sum orders
                             "sequential" and "blocked" have it: the others raise ValueError)
  bwd-dw-one-block           dw summed over the first BLOCK_ROWS (row, head) rows only, in dw_order
                             (with "blocked": the first block's partial sum, the others dropped)
  bwd-saved-var              r read as stat + eps (the saved variance), in dx and u (so dw) alike;
                             the second term's coefficient r^3 / n of that r
  bwd-projection-dropped,    dx = r g (no second term)
  bwd-l2-projection-dropped
  bwd-eps-outside            r = 1 / (sqrt(stat) + eps), coefficient r^3 / n of it, in dx and u
  bwd-gate-sigmoid-grad      dgate = dy * v * s (1 - s) (sigmoid' in place of silu')
  bwd-rope-not-transposed    dy' = R dy = dy * cos + rotate_half(dy) * sin (R for R^T)
A bug's deviation applies to whatever contract it is given; it corrupts the outputs its record
names on the op@convention the record names (elsewhere it may be no deviation: an offset of 1
added where the convention's is 1 already).

The backward bugs' deviations apply as above to LayerNorm and the grouped norm too (their records
name rms_norm ops): dropping the projection keeps centring's mean(g) (dx = r (g - mean g)); the dw
deviations leave db alone.

Contracts: every knob value some convention's contract uses (harness/data/conventions.py), and
LayerNorm's knobs at every value (centre, correction, variance_form, bias_order: the forward bugs
ln-* are those values); a knob value none uses (eps outside the root, a scaled eps, statistics or
offset in the input dtype, the inverted rsqrt, a sigmoid gate, RoPE before the norm), and centring
with a statistic other than the variance, raises NotImplementedError naming it. Like numpy_own it
reads the contract's knobs and the arrays it is given (a weight, a bias, a gate, positions), never
the op's name.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import numpy as np

from normdiff.harness.data.backward_bugs import BACKWARD_BUGS
from normdiff.harness.data.names import unknown
from normdiff.harness.data.rope import angles as rope_angles
from normdiff.implementations.numpy_own import _to_dtype

if TYPE_CHECKING:
    from normdiff.cases.model import CaseInputs
    from normdiff.harness.data.contracts import Contract

_F32 = np.float32
_F64 = np.float64
DW_ORDERS = ("sequential", "blocked", "pairwise", "float64")
BLOCK_ROWS = 128  # rows per partial sum of the "blocked" order
_CHUNK_ROWS = 1024  # rows per cumulative-sum pass of the sequential order (bounds the memory)

# The knob values this backward implements: those the conventions' contracts use. Knobs not listed
# (weight_offset, eps, cast, scope, weight_span, rope_theta; LayerNorm's centre, correction,
# variance_form and bias_order) are implemented at every value (centring with the variance only).
SUPPORTED: dict[str, tuple] = {
    "eps_placement": ("inside", "clamp"),
    "eps_scale": ("one",),
    "statistic": ("mean_square", "sum_square", "variance"),
    "stats_dtype": ("float32",),
    "offset_dtype": ("float32",),
    "inverted": (False,),
    "gate_activation": ("silu",),
    "gate_order": ("norm_then_gate", "gate_then_norm"),
    "rope_order": ("norm_then_rope",),
}


@dataclass(frozen=True)
class Deviation:
    """Where a backward bug departs from the correct backward (the defaults: no departure)."""

    rope_transposed: bool = True  # False: dy' = R dy, not R^T dy
    saved: str = "rsqrt"  # "var": r read as stat + eps
    eps_placement: str | None = None  # the backward's own placement of eps ("outside"); None: the contract's
    dx_offset: float | None = None  # the offset of dx's scale; None: the contract's
    dx_weight: bool = True  # False: dx's g without the weight
    projection: bool = True  # False: dx = r g
    projection_weight: bool = False  # True: dx's second term times dx's scale again
    gate_grad: str = "silu"  # "sigmoid": dgate with s (1 - s)
    dw_input_dtype: bool = False  # True: dw's running sums rounded to the input dtype (a rounding)
    dw_rows: int | None = None  # dw over the first this many (row, head) rows only


CORRECT = Deviation()
DEVIATIONS: dict[str, Deviation] = {
    "bwd-weight-twice": Deviation(projection_weight=True),
    "bwd-weight-missing": Deviation(dx_weight=False),
    "bwd-offset-missing": Deviation(dx_offset=0.0),
    "bwd-offset-added": Deviation(dx_offset=1.0),
    "bwd-dw-input-dtype": Deviation(dw_input_dtype=True),
    "bwd-dw-one-block": Deviation(dw_rows=BLOCK_ROWS),
    "bwd-saved-var": Deviation(saved="var"),
    "bwd-projection-dropped": Deviation(projection=False),
    "bwd-eps-outside": Deviation(eps_placement="outside"),
    "bwd-gate-sigmoid-grad": Deviation(gate_grad="sigmoid"),
    "bwd-l2-projection-dropped": Deviation(projection=False),
    "bwd-rope-not-transposed": Deviation(rope_transposed=False),
}


def deviation(bug: str) -> Deviation:
    """The Deviation of backward bug `bug` ("" the correct backward); ValueError naming the known
    ids for any other."""
    if bug == "":
        return CORRECT
    if bug not in DEVIATIONS:
        raise ValueError(unknown("backward bug", bug, BACKWARD_BUGS))
    return DEVIATIONS[bug]


def check_supported(contract: Contract) -> None:
    """Raise NotImplementedError naming every knob of the contract (of those that apply to its op)
    set to a value this backward does not implement, and a combination it does not (centring with a
    statistic other than the variance)."""
    bad = [f"{name}={getattr(contract, name)!r} (implemented: {', '.join(map(repr, values))})"
           for name, values in SUPPORTED.items()
           if contract.record.applies(name) and getattr(contract, name) not in values]
    if contract.record.applies("centre") and contract.centre and contract.statistic != "variance":
        bad.append(f"centre=True with statistic={contract.statistic!r} (centring is implemented with "
                   "statistic='variance' only)")
    if bad:
        raise NotImplementedError(f"numpy_backward does not implement {contract.op} with "
                                  + "; ".join(bad) + ": no convention uses these values")


def backward(op: str, contract: Contract, inputs: CaseInputs, dy: np.ndarray,
             dw_order: str = "blocked", bug: str = "", exact: bool = False) -> dict[str, np.ndarray]:
    """The gradients of the op's forward (numpy_own.run) at `inputs` for the upstream gradient `dy`
    (x's shape, in the input dtype): {"x": dx (input dtype), "weight": dw (float32, the weight's
    shape), "gate": dgate (input dtype), "bias": db (float32, the bias's shape)}, for the operands
    the op takes, in their order; with backward pass bug `bug` (a BACKWARD_BUGS id, "" none); with
    exact=True all of them in float64, unrounded. Module docstring: how."""
    if op != contract.op:
        raise ValueError(f"backward of {op!r} asked with a contract for {contract.op!r}")
    if dw_order not in DW_ORDERS:
        raise ValueError(f"dw_order must be one of {', '.join(DW_ORDERS)}; got {dw_order!r}")
    dev = deviation(bug)
    check_supported(contract)
    if "residual" in inputs.arrays:
        return _add_norm_backward(contract, inputs, dy, dw_order, dev, exact)
    return _backward(contract, inputs.arrays, inputs.num_heads, dy, inputs.arrays["x"].dtype, dw_order, dev, exact)


def _add_norm_backward(contract: Contract, inputs: CaseInputs, dy, dw_order: str, dev: Deviation,
                       exact: bool) -> dict[str, np.ndarray]:
    """The fused add's backward (module docstring): the norm's backward at h as the forward
    normalised it, then d residual_out added, in float32 (float64 when exact), rounded once."""
    a = inputs.arrays
    x, r = a["x"], a["residual"]
    dtype = x.dtype
    if not isinstance(dy, dict):  # dy of y alone: residual_out's upstream gradient is 0 (as the VJP's)
        dy = {"y": dy, "residual_out": np.zeros_like(np.asarray(dy))}
    if set(dy) != {"y", "residual_out"}:
        raise ValueError("a fused add's backward takes one upstream gradient per result: "
                         f"{{'y': dy, 'residual_out': dresidual_out}}; got {sorted(dy)}")
    for name, g in dy.items():
        if np.shape(g) != x.shape:
            raise ValueError(f"{'dy' if name == 'y' else 'd' + name} has shape {np.shape(g)}, x has {x.shape}")
    ft = _F64 if exact else _F32
    dh = np.asarray(dy["residual_out"]).astype(ft)
    rest = {name: v for name, v in a.items() if name not in ("x", "residual")}

    def final(v: np.ndarray) -> np.ndarray:
        return v if exact else v.astype(dtype)

    exact_sum = x.astype(_F64) + r.astype(_F64)
    if contract.residual_order == "after_norm":  # y = norm(x) + residual: the norm's backward at x
        grads = _backward(contract, {"x": x, **rest}, inputs.num_heads, dy["y"], dtype, dw_order, dev, exact,
                          rounded=False)
        out = {"x": final(grads.pop("x") + dh), "residual": final(np.asarray(dy["y"]).astype(ft) + dh)}
        return {**out, **grads}
    if exact:  # the exact maths: h = x + residual, no rounding
        h = exact_sum
    elif contract.residual_dtype == "float32":  # the float32 sum the forward normalises
        h = x.astype(_F32) + r.astype(_F32)
    else:  # h in the input dtype, as the forward rounded it (to nearest, or truncated)
        h = _to_dtype(exact_sum, dtype, contract.residual_rounding)
    grads = _backward(contract, {"x": h, **rest}, inputs.num_heads, dy["y"], dtype, dw_order, dev, exact,
                      rounded=False)
    g_h = final(grads.pop("x") + dh)  # d residual_out + J^T dy, rounded once: x's and the residual's
    return {"x": g_h, "residual": g_h.copy(), **grads}


def _backward(contract: Contract, a: dict[str, np.ndarray], num_heads: int, dy, dtype, dw_order: str,
              dev: Deviation, exact: bool, rounded: bool = True) -> dict[str, np.ndarray]:
    """The norm's backward at a["x"] (the case dtype, or a fused add's float32 / float64 sum), its
    cast points in `dtype`; `rounded` False leaves dx in the working precision (a fused add adds
    d residual_out to it first)."""
    x = a["x"]
    dy = np.asarray(dy)
    if dy.shape != x.shape:
        raise ValueError(f"dy has shape {dy.shape}, x has {x.shape}")
    ft = _F64 if exact else _F32  # the working precision

    def cast(v: np.ndarray) -> np.ndarray:
        """A cast point of the forward: rounded to the input dtype (none when exact)."""
        return v if exact else v.astype(dtype).astype(_F32)

    def final(v: np.ndarray) -> np.ndarray:
        """An output in the input dtype (float64 when exact)."""
        return v if exact else v.astype(dtype)

    grad = dy.astype(ft)
    if "positions" in a:  # the norm, then RoPE: rotate the gradient back first
        grad = rope_transpose(grad, a["positions"], num_heads, contract.rope_theta, dev.rope_transposed)

    xf = x.astype(ft)
    width = xf.shape[-1]
    gate_first = "gate" in a and contract.gate_order == "gate_then_norm"
    if "gate" in a:
        z = a["gate"].astype(ft)
        s = (1.0 / (1.0 + np.exp(-z))).astype(ft)  # as numpy_own's forward computes it
        act = z * s
    xn = xf * act if gate_first else xf  # the norm's input (x * silu(z) in float32 when the gate is first)
    heads = num_heads if contract.scope == "head" else 1
    spans = xn.reshape(*xn.shape[:-1], heads, -1)
    centres = contract.centre or contract.statistic == "variance"
    centred = spans - _span_mean(spans) if centres else spans  # x - mean(x), the float32 mean
    r, coef = _saved_statistic(spans, centred, contract, dev, exact)
    num = centred if contract.centre else spans  # what the forward divides by the denominator
    u = (num * r).reshape(x.shape)  # the normalised value
    llama = contract.cast == "llama" and "weight" in a
    bias = _tiled(a["bias"].astype(ft), width) if "bias" in a else None
    bias_first = bias is not None and "weight" in a and contract.bias_order == "before_scale"
    v = u + bias if bias_first else u  # the value the weight multiplies
    if llama:  # the forward multiplies the weight into it rounded to the input dtype
        v = cast(v)

    out: dict[str, np.ndarray] = {}
    scale = dx_scale = None
    if "weight" in a:
        w = a["weight"].astype(ft)

        def scaled(offset: float) -> np.ndarray:  # offset + w as the forward multiplies by it
            s = w + ft(offset)
            if llama:
                s = cast(s)
            return _tiled(s, width)  # a per-head weight

        scale = scaled(contract.weight_offset)
        dx_scale = scale if dev.dx_offset is None else scaled(dev.dx_offset)
    if "gate" in a and not gate_first:  # y = (the norm's output) * silu(z)
        pre_gate = v if scale is None else v * scale
        if llama:  # the forward's product is in the input dtype
            pre_gate = cast(pre_gate)
        if bias is not None and not bias_first:
            pre_gate = pre_gate + bias
        out["gate"] = final(grad * pre_gate * _activation_grad(z, s, dev.gate_grad))
        grad = grad * act
    if bias is not None and not bias_first:  # y = ... + b: db = sum over rows of the gradient there
        out["bias"] = reduce_rows(grad.reshape(-1, a["bias"].shape[-1]), dw_order, ft).reshape(a["bias"].shape)
    grad_x = grad
    if "weight" in a:
        terms = (grad * v).reshape(-1, a["weight"].shape[-1])  # one row per (row, head) sharing w
        if dev.dw_rows is not None:
            terms = terms[:dev.dw_rows]
        acc = dtype if dev.dw_input_dtype and not exact else ft
        out["weight"] = reduce_rows(terms, dw_order, acc).astype(ft).reshape(a["weight"].shape)
        if bias_first:  # y = (u + b) * (offset + w): db = sum over rows of the gradient times the scale
            out["bias"] = reduce_rows((grad * scale).reshape(-1, a["bias"].shape[-1]), dw_order,
                                      ft).reshape(a["bias"].shape)
        if dev.dx_weight:
            grad_x = grad * dx_scale

    g = grad_x.reshape(spans.shape)
    dx = r * (g - _span_mean(g) if contract.centre else g)  # the centring's backward: g - mean(g)
    if dev.projection:  # the statistic's derivative is along x (its centred value for the variance)
        second = centred * (coef * _projection(g, num))
        if dev.projection_weight:
            second = dx_scale.reshape(spans.shape[-2:]) * second
        dx = dx - second
    dx = dx.reshape(x.shape)
    if gate_first:  # x' = x * silu(z): dz = dx' x silu'(z), dx = dx' silu(z)
        out["gate"] = final(dx * xf * _activation_grad(z, s, dev.gate_grad))
        dx = dx * act
    out["x"] = final(dx) if rounded else dx
    return {name: out[name] for name in a if name in out}  # the operands' order


def run_backward(op: str, contract: Contract, inputs: CaseInputs, dy: np.ndarray) -> dict[str, np.ndarray]:
    """The own NumPy backward as the registry calls it: correct, dw in the "blocked" order."""
    return backward(op, contract, inputs, dy, "blocked")


def mutant(bug: str) -> Callable[..., dict[str, np.ndarray]]:
    """An adapter (op, contract, inputs, dy) -> backward's dict that computes backward pass bug
    `bug` (dw_order "blocked"); ValueError naming the known ids for any other (also for "": the
    correct adapter is run_backward)."""
    if bug not in DEVIATIONS:
        raise ValueError(unknown("backward bug", bug, BACKWARD_BUGS))

    def adapter(op: str, contract: Contract, inputs: CaseInputs, dy: np.ndarray) -> dict[str, np.ndarray]:
        return backward(op, contract, inputs, dy, "blocked", bug=bug)

    adapter.__name__ = adapter.__qualname__ = f"numpy_backward_mutant[{bug}]"
    adapter.bug = bug  # type: ignore[attr-defined]
    return adapter


def _tiled(v: np.ndarray, width: int) -> np.ndarray:
    """A per-case operand (weight, bias) across the row: a per-head one is shared by every head."""
    return v if v.shape[-1] == width else np.tile(v, width // v.shape[-1])


def _span_mean(spans: np.ndarray) -> np.ndarray:
    """The mean over each span (the last axis) as numpy_own's forward computes it: summed in spans'
    precision (np.sum: pairwise), divided by n."""
    return spans.sum(-1, keepdims=True) / spans.dtype.type(spans.shape[-1])


def _saved_statistic(spans: np.ndarray, centred: np.ndarray, c: Contract, dev: Deviation = CORRECT,
                     exact: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(r, coef) per span, in spans' precision: r = 1 / the denominator, as the forward computes it,
    and the coefficient of the projection term, d(r)/d(stat) * d(stat)/dx / x (/ (x - mean x) for
    the variance): r^3 / n (mean_square), r^3 (sum_square), r^3 / (n - correction) (variance); 0
    where the clamp's eps branch holds (the denominator is then a constant). `centred`: the spans
    minus their mean (the variance's two-pass form sums its squares; the one-pass form, a rounding,
    E[x^2] - E[x]^2, is computed only when not exact). A deviation's r (the saved variance, eps
    outside the root) gets the coefficient of the same form."""
    ft = spans.dtype.type
    n = spans.shape[-1]
    with np.errstate(divide="ignore", invalid="ignore"):  # n - correction = 0: as the forward (inf / nan)
        if c.statistic == "variance":
            divisor = ft(n - c.correction)
            if c.variance_form == "one_pass" and not exact:  # numpy_own's order of operations
                mean = _span_mean(spans)
                stat = (spans * spans).sum(-1, keepdims=True) / divisor - mean * mean * ft(n) / divisor
            else:
                stat = (centred * centred).sum(-1, keepdims=True) / divisor
        else:
            stat = (spans * spans).sum(-1, keepdims=True)
            divisor = ft(n) if c.statistic == "mean_square" else ft(1)
            if c.statistic == "mean_square":
                stat = stat / divisor
    eps = ft(c.eps)
    placement = dev.eps_placement or c.eps_placement
    cube = lambda v: v * v * v  # noqa: E731
    with np.errstate(divide="ignore", invalid="ignore"):
        if dev.saved == "var":  # the saved value read as r
            r = stat + eps
            coef = cube(r)
        elif placement == "inside":
            r = 1.0 / np.sqrt(stat + eps)
            coef = cube(r)
        elif placement == "outside":
            r = 1.0 / (np.sqrt(stat) + eps)
            coef = cube(r)
        else:  # "clamp": x / max(||x||, eps)
            root = np.sqrt(stat)
            r = 1.0 / np.maximum(root, eps)
            coef = np.where(root >= eps, cube(r), ft(0.0))
        if c.statistic != "sum_square":
            coef = coef / divisor
    return r, coef


def _activation_grad(z: np.ndarray, s: np.ndarray, kind: str) -> np.ndarray:
    """silu'(z) = s (1 + z (1 - s)), or (a bug's) sigmoid'(z) = s (1 - s); s = sigmoid(z)."""
    if kind == "sigmoid":
        return s * (1.0 - s)
    return s * (1.0 + z * (1.0 - s))


def _projection(g: np.ndarray, spans: np.ndarray) -> np.ndarray:
    """sum(g * x) over each span (np.sum over the contiguous last axis: pairwise)."""
    return (g * spans).sum(-1, keepdims=True)


def rope_transpose(g: np.ndarray, positions: np.ndarray, num_heads: int, theta: float,
                   transposed: bool = True) -> np.ndarray:
    """R^T g in g's precision (float32, or float64 when exact) for the rotate_half RoPE R of the
    forward: per head of D, with c, s the cos / sin of the forward's float32 angles (correctly
    rounded to g's precision),
        out[:D/2] = g[:D/2] * c + g[D/2:] * s,    out[D/2:] = g[D/2:] * c - g[:D/2] * s;
    transposed=False (bwd-rope-not-transposed) R g, the same with -s."""
    dim = g.shape[-1] // num_heads
    heads = g.reshape(-1, num_heads, dim)
    theta_angles = rope_angles(positions, dim, theta).astype(np.float64)[:, None, :]  # (tokens, 1, D/2)
    if theta_angles.shape[0] != heads.shape[0]:
        raise ValueError(f"{theta_angles.shape[0]} positions for {heads.shape[0]} rows")
    cos, sin = np.cos(theta_angles).astype(g.dtype), np.sin(theta_angles).astype(g.dtype)
    if not transposed:
        sin = -sin
    half = dim // 2
    lo, hi = heads[..., :half], heads[..., half:]
    out = np.concatenate([lo * cos + hi * sin, hi * cos - lo * sin], axis=-1)
    return out.reshape(g.shape)


def reduce_rows(terms: np.ndarray, order: str, dtype=_F32) -> np.ndarray:
    """The sum over axis 0 of (rows, n) `terms`, in reduction order `order`, accumulated in `dtype`:
    float32 (float32 terms; the "float64" order sums them in float64 and rounds once), float64 (the
    exact mode: float64 terms, every order in float64, no rounding to float32), or a low-precision
    dtype (bf16 / fp16, bwd-dw-input-dtype: float32 terms, each add of the running sums done in
    float32 and rounded to the dtype; "sequential" and "blocked" only). Returned in `dtype`."""
    dtype = np.dtype(dtype)
    wide = dtype in (np.float32, np.float64)
    terms = np.asarray(terms, dtype=dtype if wide else _F32)
    rows, width = terms.shape
    if order not in DW_ORDERS:
        raise ValueError(f"dw_order must be one of {', '.join(DW_ORDERS)}; got {order!r}")
    if not wide and order not in ("sequential", "blocked"):
        raise ValueError(f"a {dtype.name} accumulator has only the running-sum orders sequential and "
                         f"blocked; got {order!r}")
    if order == "float64":
        return terms.astype(np.float64).sum(axis=0).astype(dtype)
    if order == "pairwise":  # along the contiguous axis, where numpy sums pairwise
        return np.ascontiguousarray(terms.T).sum(axis=-1, dtype=dtype)
    if order == "sequential":
        return _sequential(terms, np.zeros(width, dtype=dtype))
    blocks = -(-rows // BLOCK_ROWS)  # "blocked"
    padded = np.zeros((blocks * BLOCK_ROWS, width), dtype=terms.dtype)  # + 0 is exact
    padded[:rows] = terms
    # each block's running sum (the blocks side by side), then the partials' running sum
    partials = _sequential(padded.reshape(blocks, BLOCK_ROWS, width).swapaxes(0, 1),
                           np.zeros((blocks, width), dtype=dtype))
    return _sequential(partials, np.zeros(width, dtype=dtype))


def _sequential(terms: np.ndarray, acc: np.ndarray) -> np.ndarray:
    """acc + terms[0] + terms[1] + ... (along axis 0) strictly left to right, each add rounded to
    acc's dtype. float32 / float64: np.cumsum (a running sum), chunked so that the running sums of
    at most _CHUNK_ROWS rows are held at once; a low-precision acc: row by row, each add in float32
    from the accumulator's value, then rounded."""
    if acc.dtype in (np.float32, np.float64):
        for start in range(0, terms.shape[0], _CHUNK_ROWS):
            chunk = terms[start:start + _CHUNK_ROWS].astype(acc.dtype)  # a copy
            chunk[0] += acc
            acc = np.cumsum(chunk, axis=0, dtype=acc.dtype)[-1]
        return acc
    for t in terms:
        acc = (acc.astype(_F32) + t.astype(_F32)).astype(acc.dtype)
    return acc
