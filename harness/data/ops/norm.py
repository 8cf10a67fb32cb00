"""The exact maths every norm op shares: its forward evaluated in float64 (`evaluate`) and its exact
vector-Jacobian product (`vjp`), stage by stage. An op module points its record's `exact` and `vjp`
here (ops/rms_norm.py, ...); an op whose maths is not a norm's gives its own.

The forward reads the contract's knobs and which operands it is given (a weight, a gate, positions,
a bias, a residual), so an op the knobs can express needs nothing new here. Rounding knobs (`cast`,
`stats_dtype`, `offset_dtype`, `variance_form`) describe how a *low-precision* implementation rounds;
the exact maths ignores them on purpose, so that every implementation's error is its distance from
the true value of its contract. The ULP budgets in `budgets.py` absorb legitimate rounding orders.

Follows seed 004: r = sqrt(mean(x^2) + eps), y_i = x_i / r * g_i. qk_norm_rope (seed 004, section
3.5: per-head QK-Norm, then RoPE): one exception to "exact". The RoPE angles are float32 by
contract, as HF computes them (harness/data/rope.py explains why and computes them); cos, sin and
everything after them are float64.

The backward (`vjp`):
The oracle's backward pass: the exact float64 vector-Jacobian product of `evaluate`.

`vjp(contract, arrays, dy, num_heads)` returns {"x": dx, "weight": dw, "gate": dz, "bias": db} (the keys of the
differentiable operands given; positions get none): J^T dy for the contract's exact maths, computed
analytically, stage by stage, in the reverse order of `evaluate`'s stages. Like the oracle it
ignores the rounding knobs (`cast`, `stats_dtype`, `offset_dtype`, `variance_form`). Every forward value it needs
(statistic, denominator, activations, RoPE's cos/sin of the float32 angles) comes from the oracle's
own functions, so forward and backward are of one and the same function.

Follows seed 004's Jacobian dy_i/dx_j = g_i (delta_ij / r - x_i x_j / (n r^3)) (r = sqrt(mean(x^2)
+ eps), engine/oracle.py `rms_norm_jacobian`), whose transpose applied to dy is
    dx = (g / r) - x * sum(g * x) / (n r^3),      g = dy * (weight_offset + w)  (times the gate)
generalised to every knob. Stages, last forward stage first (dy is the upstream gradient):
  RoPE after the norm  y = R x per head (R = C + S rotate_half): dx = R^T dy = dy*cos - rotate_half(dy)*sin,
                       the same rotation with -sin (same float32 angles; computed as F R F with F
                       negating each head's second half, which is R^T exactly)
  gate after the norm  y = u * a(z): du = dy * a(z), dz = dy * u * a'(z)
                       silu' = s(z) (1 + z (1 - s(z))), sigmoid' = s(z) (1 - s(z)), s = sigmoid
  bias                 y = u + b: du = dy, db = sum over rows of dy (before the weight stage
                       when bias_order is "before_scale": y = (u + b) * (offset + w))
  weight               y = u * (offset + w): du = dy * (offset + w), dw = sum over rows of dy * u,
                       and over heads when a per-head weight was tiled across the row
  normalisation        y = x * d^p over each span of n (p = -1, or +1 when `inverted`), d = d(x):
                       dx = g d^p + p d^(p-1) sum(g * x) grad d
                       grad d = grad_s / (2 d)                    "inside"   d = sqrt(s + e)
                                + grad_e / (2 d)
                              = grad_s / (2 sqrt s) + grad_e      "outside"  d = sqrt(s) + e
                              = grad_s / (2 sqrt s)  if sqrt s >= e, else grad_e   "clamp"
                              = grad_s / (2 sqrt s)               "none"
                       grad_s = 2x / n (mean_square) | 2x (sum_square) | 2 (x - mean x) / n (variance)
                       grad_e = 0 ("one", "span": e = eps, eps * n) | eps * 2 x * m ("max_square":
                                e = eps * max(x^2), m the subgradient of the max: ties split equally
                                among the arg-max elements, as torch.amax does; no ties: the one-hot)
  centring (LayerNorm)  c = x - mean(x) over each span: dx = dc - mean(dc); the normalisation
                       above then runs on c (its variance statistic is c's mean square over
                       n - correction)
  gate before the norm x' = x * a(z): dx = dx' * a(z), dz = dx' * x * a'(z)
  RoPE before the norm dx = R^T dx' as above
Points where the function has no derivative, and the choice made there:
  clamp at sqrt(s) == e        the sqrt branch (as torch's clamp_min, F.normalize's, does)
  a root of 0 (sqrt(s) = 0, or d = 0 "inside")   grad of the root taken as 0, the least-norm
                               subgradient (torch's choice for a norm at 0). For the square
                               statistics s = 0 means x = 0 and sum(g * x) = 0, so this is the
                               limit, the true derivative ("outside" at a zero row: dx = g / e;
                               "inverted" "none": 0). For "variance" at a constant row the function
                               has no derivative and this is a subgradient.
  d = 0 and not inverted       ("none", or eps 0, at a zero row) the forward is 0/0 = NaN, and so is
                               dx there: d^(p-1) sum(g * x) = inf * 0. Not hidden.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from normdiff.harness.data import rope
from normdiff.harness.data.roundoff import centring_gamma

if TYPE_CHECKING:
    from normdiff.harness.data.contracts import Contract


ACTIVATIONS = {
    "silu": lambda z: z / (1.0 + np.exp(-z)),
    "sigmoid": lambda z: 1.0 / (1.0 + np.exp(-z)),
}


def statistic(xs: np.ndarray, kind: str, correction: int = 0) -> np.ndarray:
    if kind == "mean_square":
        return np.mean(xs * xs, axis=-1, keepdims=True)
    if kind == "sum_square":
        return np.sum(xs * xs, axis=-1, keepdims=True)
    c = centred(xs)  # "variance": LayerNorm's statistic, over n - correction
    with np.errstate(divide="ignore", invalid="ignore"):  # n = 1 unbiased: 0/0, as torch.var gives
        return np.sum(c * c, axis=-1, keepdims=True) / (xs.shape[-1] - correction)


def centred(xs: np.ndarray) -> np.ndarray:
    return xs - xs.mean(axis=-1, keepdims=True)


def denominator(stat: np.ndarray, contract: Contract, xs: np.ndarray) -> np.ndarray:
    eps = contract.eps * eps_factor(xs, contract.eps_scale)
    if contract.eps_placement == "inside":
        return np.sqrt(stat + eps)
    if contract.eps_placement == "outside":
        return np.sqrt(stat) + eps
    if contract.eps_placement == "clamp":
        return np.maximum(np.sqrt(stat), eps)
    return np.sqrt(stat)  # "none": 0/0 is NaN, as the buggy code gives


def eps_factor(xs: np.ndarray, scale: str):
    if scale == "span":
        return xs.shape[-1]
    if scale == "max_square":
        return np.max(xs * xs, axis=-1, keepdims=True)
    return 1.0


def normalise(xs: np.ndarray, contract: Contract) -> np.ndarray:
    d = denominator(statistic(xs, contract.statistic, contract.correction), contract, xs)
    if contract.centre:  # LayerNorm: the centred x over the (variance's) denominator
        xs = centred(xs)
    with np.errstate(divide="ignore", invalid="ignore"):
        return xs * d if contract.inverted else xs / d


def rotate(x: np.ndarray, positions: np.ndarray, num_heads: int, theta: float, power="nearest") -> np.ndarray:
    """RoPE in rotate_half form on (..., H * D) float64 x, one position per token (row): x * cos + rotate_half(x) * sin with
    cos / sin of the float32 angles taken in float64, the same rotation for every head (`power`:
    which float32 neighbour of each frequency's power, rope.inverse_frequencies)."""
    tokens, dim = int(np.prod(x.shape[:-1])), x.shape[-1] // num_heads
    angles = rope.angles(positions, dim, theta, power).astype(np.float64)
    if angles.shape[0] != tokens:
        raise ValueError(f"{angles.shape[0]} positions for {tokens} tokens")
    emb = np.concatenate([angles, angles], axis=-1)[:, None, :]  # (tokens, 1 head, D)
    heads = x.reshape(-1, num_heads, dim)
    half = dim // 2
    rotated_half = np.concatenate([-heads[..., half:], heads[..., :half]], axis=-1)
    return (heads * np.cos(emb) + rotated_half * np.sin(emb)).reshape(x.shape)


def residual_sum(arrays: dict[str, np.ndarray]) -> np.ndarray:
    return np.asarray(arrays["x"], dtype=np.float64) + np.asarray(arrays["residual"], dtype=np.float64)


def evaluate(contract: Contract, arrays: dict[str, np.ndarray], num_heads: int = 1, power="nearest") -> np.ndarray:
    """The contract's exact output y, float64, shaped like x (a fused add's first result). `power`
    (RoPE): "other" rotates by the angles of the other float32 neighbour of each frequency's power,
    the contract as a faithfully rounded pow may give it (rope.inverse_frequencies)."""
    if "residual" in arrays:  # add_rms_norm: the norm of h = x + residual, or (a bug) norm(x) + residual
        rest = {name: a for name, a in arrays.items() if name not in ("x", "residual")}
        h = residual_sum(arrays)
        if contract.residual_order == "after_norm":
            return evaluate(contract, {"x": arrays["x"], **rest}, num_heads, power) + np.asarray(arrays["residual"], np.float64)
        return evaluate(contract, {"x": h, **rest}, num_heads, power)
    x = np.asarray(arrays["x"], dtype=np.float64)
    rotates = "positions" in arrays
    if rotates and x.shape[-1] % num_heads:
        raise ValueError(f"width {x.shape[-1]} is not divisible by num_heads={num_heads}")
    if rotates and contract.rope_order == "rope_then_norm":
        x = rotate(x, arrays["positions"], num_heads, contract.rope_theta, power)
    act = ACTIVATIONS[contract.gate_activation]
    gate = np.asarray(arrays["gate"], dtype=np.float64) if "gate" in arrays else None
    if gate is not None and contract.gate_order == "gate_then_norm":
        x = x * act(gate)
    lead, width = x.shape[:-1], x.shape[-1]
    heads = num_heads if contract.scope == "head" else 1
    if width % heads:
        raise ValueError(f"width {width} is not divisible by num_heads={num_heads}")
    y = normalise(x.reshape(*lead, heads, width // heads), contract).reshape(x.shape)
    if "weight" in arrays:
        w = tiled(arrays["weight"], width)
        scale = contract.weight_offset + w
        if "bias" in arrays and contract.bias_order == "before_scale":
            y = (y + tiled(arrays["bias"], width)) * scale
        else:
            y = y * scale
    if "bias" in arrays and (contract.bias_order == "after_scale" or "weight" not in arrays):
        y = y + tiled(arrays["bias"], width)
    if gate is not None and contract.gate_order == "norm_then_gate":
        y = y * act(gate)
    if rotates and contract.rope_order == "norm_then_rope":
        y = rotate(y, arrays["positions"], num_heads, contract.rope_theta, power)
    return y


def tiled(v: np.ndarray, width: int) -> np.ndarray:
    """A per-case operand (weight, bias) as float64 across the row: a per-head one is shared by
    every head, so tiled."""
    v = np.asarray(v, dtype=np.float64)
    if v.shape[-1] == width:
        return v
    if width % v.shape[-1]:
        raise ValueError(f"a weight of {v.shape[-1]} does not tile a width of {width}")
    return np.tile(v, width // v.shape[-1])


def mean_slip(xs: np.ndarray) -> np.ndarray:
    """Per span, how far a legal float32 mean may be off: g_n mean|x| (centring_gamma)."""
    return centring_gamma(xs.shape[-1]) * np.mean(np.abs(xs), axis=-1, keepdims=True)


# ---- the exact vector-Jacobian product ---------------------------------------------------------


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return _activate(z, "sigmoid")  # the oracle's own sigmoid


def _silu_grad(z: np.ndarray) -> np.ndarray:
    s = _sigmoid(z)
    return s * (1.0 + z * (1.0 - s))


def _sigmoid_grad(z: np.ndarray) -> np.ndarray:
    s = _sigmoid(z)
    return s * (1.0 - s)


def _silu_grad_terms(z: np.ndarray) -> np.ndarray:
    """|s| + |z s (1 - s)|: silu''s two terms in magnitude (they cancel near z = -1.28)."""
    s = _sigmoid(z)
    return s + np.abs(z) * s * (1.0 - s)


_ACTIVATION_GRADS = {"silu": _silu_grad, "sigmoid": _sigmoid_grad}
_ACTIVATION_GRAD_TERMS = {"silu": _silu_grad_terms, "sigmoid": _sigmoid_grad}


def vjp(contract: Contract, arrays: dict[str, np.ndarray], dy: np.ndarray, num_heads: int = 1,
        absolute: bool = False, floor: float = 0.0, power="nearest") -> dict[str, np.ndarray]:
    """J^T dy of `evaluate(contract, arrays, num_heads)`, float64: {"x", "weight", "gate"}
    for those of them in `arrays`, each shaped like its operand.

    absolute=True gives instead the magnitude of the terms each gradient is a sum of: every product
    taken in absolute value and every difference as a sum (|J|^T |dy| stage by stage, an upper bound
    of it). It is the scale a rounding error is relative to: a kernel's float32 sum over the width,
    or over the rows for dw, errs relative to the sum of its terms' magnitudes, not to the result,
    which can cancel to far below them (budgets.py, `gradient_budget`). `floor` (absolute only) is
    the least magnitude a product term counts at: the dtype's smallest normal, below which a
    product rounded in the dtype errs by an absolute half subnormal spacing, not a relative one (a
    fp16 dy of 1e-4 times a weight is subnormal), as the forward's `ulp_floor` does. `power`
    (RoPE): which float32 neighbour of each frequency's power the angles use (rope.inverse_frequencies)."""
    x = np.asarray(arrays["x"], dtype=np.float64)
    upstream = dict(dy) if isinstance(dy, dict) else {"y": dy}
    upstream = {name: np.asarray(g, dtype=np.float64) for name, g in upstream.items()}
    for name, g in upstream.items():
        if g.shape != x.shape:
            raise ValueError(f"{'dy' if name == 'y' else 'd' + name} has shape {g.shape}, x has {x.shape}")
    if absolute:
        upstream = {name: np.abs(g) for name, g in upstream.items()}
    dy = upstream["y"]
    stages = _stages(contract, arrays, num_heads, floor if absolute else None, upstream.get("residual_out"), power)
    grads: dict[str, np.ndarray] = {}
    for stage in reversed(stages):
        dy = stage(dy, grads)
    grads["x"] = dy + grads.pop("x_extra", 0.0)
    return grads


def _stages(contract: Contract, arrays: dict, num_heads: int, terms: float | None = None,
            d_sum: np.ndarray | None = None, power="nearest") -> list:
    """Runs the forward as `evaluate` does, keeping each stage's input, and returns each
    stage's backward: a function (gradient of its output, grads) -> gradient of its input, which
    adds the stage's operand gradient to grads. `terms`: None for the VJP itself; a floor for the
    magnitudes of its terms (`vjp`'s absolute=True), each product term counted at least at it.
    `d_sum`: a fused add's upstream gradient of its residual_out (h = x + residual)."""
    x = np.asarray(arrays["x"], dtype=np.float64)
    residual = np.asarray(arrays["residual"], dtype=np.float64) if "residual" in arrays else None
    d_sum = 0.0 if d_sum is None else d_sum
    positions = arrays.get("positions")
    gate = np.asarray(arrays["gate"], dtype=np.float64) if "gate" in arrays else None
    rope_first = positions is not None and contract.rope_order == "rope_then_norm"
    gate_first = gate is not None and contract.gate_order == "gate_then_norm"
    if positions is not None and x.shape[-1] % num_heads:
        raise ValueError(f"width {x.shape[-1]} is not divisible by num_heads={num_heads}")
    stages = []

    def stage(back, y):  # records a stage's backward, passes its output on
        stages.append(back)
        return y

    rotation = (positions, num_heads, contract.rope_theta, power, terms)
    act = contract.gate_activation
    sum_first = residual is not None and contract.residual_order == "before_norm"
    if sum_first:  # h = x + residual, then the norm of h
        x = stage(_sum_back(d_sum), x + residual)
    if rope_first:
        x = stage(_rope_back(*rotation), rotate(x, *rotation[:4]))
    if gate_first:
        x = stage(_gate_back(x, gate, act, terms), x * _activate(gate, act))
    mag = None  # absolute: the centred value's magnitude, floored at its span's scale
    if contract.centre:  # LayerNorm: x - mean(x) over each span, then the norm of that
        if terms is not None:
            # a float32 mean's error is one value for the whole span: it lands in every centred
            # element alike, relative to the span's scale rather than to |x - mean| (~0 near the
            # mean), as the forward's centred_floor counts it (and the budget's kappa term
            # bounds it there); a mean rounded to the dtype, which no correct backward does, stays
            # far outside
            # (no less than a legal mean's own error, g_n mean|x|, as oracle.span_scale: on a
            # constant span c = 0 while a correct mean leaves x - mean ~ g_n mean|x|)
            spans = _spans(x, contract, num_heads)
            c = centred(spans)
            scale = np.maximum(np.sqrt(np.mean(c * c, axis=-1, keepdims=True)), mean_slip(spans))
            mag = np.maximum(np.abs(c), scale).reshape(x.shape)
        x = stage(_centre_back(contract, num_heads, terms), _centred(x, contract, num_heads))
    plain = contract.replace(centre=False)
    u = _normalise(x, plain, num_heads)
    x = stage(_norm_back(x, plain, num_heads, terms, mag), u if mag is None else _normalise_terms(x, mag, plain, num_heads))
    bias = np.asarray(arrays["bias"], dtype=np.float64) if "bias" in arrays else None
    bias_first = bias is not None and "weight" in arrays and contract.bias_order == "before_scale"
    if bias_first:
        x = stage(_bias_back(bias, terms), x + _tiled(bias, x.shape[-1]))
    rounded = terms is not None and contract.cast == "llama"  # saves u, then w * u, in the dtype
    if rounded:
        x = _subnormal_floor(x, terms)
    if "weight" in arrays:
        w = np.asarray(arrays["weight"], dtype=np.float64)
        scale = contract.weight_offset + _tiled(w, x.shape[-1])
        x = stage(_weight_back(x, w, contract.weight_offset, terms), x * scale)
        if rounded:
            x = _subnormal_floor(x, terms * np.maximum(np.abs(scale), 1.0))
    if bias is not None and not bias_first:
        x = stage(_bias_back(bias, terms), x + _tiled(bias, x.shape[-1]))
    if gate is not None and not gate_first:
        stage(_gate_back(x, gate, act, terms), None)
    if positions is not None and not rope_first:
        stage(_rope_back(*rotation), None)
    if residual is not None and not sum_first:  # the bug: y = norm(x) + residual
        stage(_sum_back(d_sum, after=True), None)
    return stages


# ---- the stages' backwards ---------------------------------------------------------------------

def _rope_back(positions, num_heads: int, theta: float, power="nearest", terms: float | None = None):
    def back(g, grads):
        if terms is not None:  # |g_i cos| + |g_partner sin|: R^T's two products in magnitude
            return np.maximum(_rotate_terms(g, positions, num_heads, theta), terms)
        return _flip(rotate(_flip(g, num_heads), positions, num_heads, theta, power), num_heads)
    return back


def _rotate_terms(g: np.ndarray, positions, num_heads: int, theta: float) -> np.ndarray:
    """|g| |cos| + |rotate_half(g)| |sin| per head: the magnitude of both products of a rotation
    (of R and of R^T alike), at the oracle's angles."""
    heads = g.reshape(-1, num_heads, g.shape[-1] // num_heads)
    dim, half = heads.shape[-1], heads.shape[-1] // 2
    angles = rope.angles(positions, dim, theta).astype(np.float64)
    emb = np.concatenate([angles, angles], axis=-1)[:, None, :]
    swapped = np.concatenate([heads[..., half:], heads[..., :half]], axis=-1)
    return (np.abs(heads) * np.abs(np.cos(emb)) + np.abs(swapped) * np.abs(np.sin(emb))).reshape(g.shape)


def _flip(v: np.ndarray, num_heads: int) -> np.ndarray:
    """v with the second half of each head negated (F, with F R F = R^T for a rotate_half RoPE R)."""
    heads = v.reshape(*v.shape[:-1], num_heads, v.shape[-1] // num_heads).copy()
    heads[..., heads.shape[-1] // 2:] *= -1.0
    return heads.reshape(v.shape)


def _subnormal_floor(value: np.ndarray, floor) -> np.ndarray:
    """A forward value a Llama cast rounds to the dtype (u, then w * u), as a magnitude no less than
    `floor`: below the dtype's smallest normal that rounding errs by an absolute half subnormal
    spacing, which every later product (dw = dy u, dgate = dy v silu') carries, so each term built
    from it counts at least there, as the forward's judge.ulp_floor counts y (|offset + w| x the
    smallest normal, no less than the smallest normal for the product's own rounding)."""
    return np.maximum(np.abs(value), floor)


def _term(terms: float | None):
    """How a stage forms a product term: signed (the VJP), or its magnitude, at least `terms`."""
    if terms is None:
        return lambda a, b: a * b
    return lambda a, b: np.maximum(np.abs(a * b), terms)


def _gate_back(u: np.ndarray, gate: np.ndarray, activation: str, terms: float | None = None):
    grad = (_ACTIVATION_GRADS if terms is None else _ACTIVATION_GRAD_TERMS)[activation]
    term = _term(terms)
    def back(g, grads):
        grads["gate"] = _sum_to(term(g * u, grad(gate)), gate.shape)
        return term(g, _activate(gate, activation))
    return back


def _weight_back(u: np.ndarray, w: np.ndarray, offset: float, terms: float | None = None):
    term = _term(terms)
    def back(g, grads):
        full = _sum_to(term(g, u), _tiled(w, u.shape[-1]).shape)  # the tiled weight's gradient
        grads["weight"] = full.reshape(*full.shape[:-1], -1, w.shape[-1]).sum(axis=-2)
        return term(g, offset + _tiled(w, u.shape[-1]))
    return back


def _sum_back(d_sum, after: bool = False):
    """h = x + residual, its value also returned (residual_out, upstream d_sum): both addends get
    the gradient reaching h plus d_sum. `after`: the sum added after the norm (y = norm(x) +
    residual): the residual gets dy + d_sum, x its norm's gradient and d_sum (kept in grads until
    the last stage hands x its gradient)."""
    def back(g, grads):
        grads["residual"] = g + d_sum
        if after:
            grads["x_extra"] = d_sum
            return g
        return g + d_sum
    return back


def _bias_back(b: np.ndarray, terms: float | None = None):
    def back(g, grads):  # y = u + b: db = sum of g over rows (and over the heads sharing it)
        full = _sum_to(g if terms is None else np.maximum(np.abs(g), terms), _tiled(b, g.shape[-1]).shape)
        grads["bias"] = full.reshape(*full.shape[:-1], -1, b.shape[-1]).sum(axis=-2)
        return g
    return back


def _centre_back(contract: Contract, num_heads: int, terms: float | None = None):
    def back(g, grads):  # c = x - mean(x): dx = g - mean(g) (absolute: |g| + mean|g|)
        spans = _spans(g, contract, num_heads)
        if terms is None:
            return (spans - spans.mean(axis=-1, keepdims=True)).reshape(g.shape)
        return (spans + spans.mean(axis=-1, keepdims=True)).reshape(g.shape)  # g is |g| here
    return back


def _centred(x: np.ndarray, contract: Contract, num_heads: int) -> np.ndarray:
    return centred(_spans(x, contract, num_heads)).reshape(x.shape)


def _norm_back(x: np.ndarray, contract: Contract, num_heads: int, terms: float | None = None,
               mag: np.ndarray | None = None):
    def back(g, grads):
        spans = _spans(x, contract, num_heads)
        m = None if mag is None else mag.reshape(spans.shape)
        return _span_back(spans, g.reshape(spans.shape), contract, terms is not None, m).reshape(x.shape)
    return back


def _normalise_terms(c: np.ndarray, mag: np.ndarray, contract: Contract, num_heads: int) -> np.ndarray:
    """The normalised value's magnitude, floored at its span's scale, over the span's denominator
    (what the weight and bias stages multiply by, in absolute mode)."""
    spans = _spans(c, contract, num_heads)
    d = denominator(statistic(spans, contract.statistic, contract.correction), contract, spans)
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.abs(d) if contract.inverted else 1.0 / np.abs(d)
    return (mag.reshape(spans.shape) * scale).reshape(c.shape)


def _same(v):
    return v


def _span_back(xs: np.ndarray, g: np.ndarray, contract: Contract, absolute: bool = False,
               mag: np.ndarray | None = None) -> np.ndarray:
    """The normalisation's J^T g over each span (last axis) of xs: g d^p + p d^(p-1) sum(g x) grad d
    (absolute: |g| |d^p| + |d^(p-1)| sum|g x| |grad d|, with |x| the centred value's floored `mag`
    when there is one)."""
    stat = statistic(xs, contract.statistic, contract.correction)
    d = denominator(stat, contract, xs)
    grad_d = _denominator_grad(xs, stat, d, contract, mag)
    fix = (np.abs if mag is None else lambda v: mag) if absolute else _same
    gx = np.sum(g * fix(xs), axis=-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        if contract.inverted:
            return g * fix(d) + gx * fix(grad_d)
        if absolute:
            return g / np.abs(d) + gx / (d * d) * np.abs(grad_d)
        return g / d - gx / (d * d) * grad_d


def _denominator_grad(xs: np.ndarray, stat: np.ndarray, d: np.ndarray, contract: Contract,
                      mag: np.ndarray | None = None) -> np.ndarray:
    """grad d(x) over each span, for the contract's eps placement (module docstring); with `mag`
    (absolute mode, a centred x) the variance's gradient at the magnitude of its terms."""
    if mag is None:
        grad_s = _statistic_grad(xs, contract.statistic, contract.correction)
    else:
        grad_s = 2.0 * mag / (xs.shape[-1] - contract.correction)
    eps = contract.eps * eps_factor(xs, contract.eps_scale)
    grad_e = contract.eps * _eps_factor_grad(xs, contract.eps_scale)
    if contract.eps_placement == "inside":
        return _root_grad(d, grad_s + grad_e)
    root = np.sqrt(stat)
    if contract.eps_placement == "outside":
        return _root_grad(root, grad_s) + grad_e
    if contract.eps_placement == "clamp":
        return np.where(root >= eps, _root_grad(root, grad_s), grad_e)
    return _root_grad(root, grad_s)  # "none"


def _root_grad(root: np.ndarray, grad: np.ndarray) -> np.ndarray:
    """grad of sqrt(q) = grad q / (2 sqrt q), with 0 where sqrt(q) = 0 (module docstring)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(root > 0, grad / (2.0 * root), 0.0)


def _statistic_grad(xs: np.ndarray, kind: str, correction: int = 0) -> np.ndarray:
    n = xs.shape[-1]
    if kind == "mean_square":
        return 2.0 * xs / n
    if kind == "sum_square":
        return 2.0 * xs
    return 2.0 * (xs - xs.mean(axis=-1, keepdims=True)) / (n - correction)  # "variance": sum(x - mean) = 0


def _eps_factor_grad(xs: np.ndarray, scale: str):
    """grad of eps_factor: 0 for a constant factor; for max(x^2), 2x at the arg-max
    element(s), a tie split equally among them."""
    if scale != "max_square":
        return 0.0
    square = xs * xs
    at_max = square == np.max(square, axis=-1, keepdims=True)
    return 2.0 * xs * at_max / np.sum(at_max, axis=-1, keepdims=True)


# ---- forward helpers (the oracle's maths, shaped as its stages) --------------------------------

def _activate(gate: np.ndarray, activation: str) -> np.ndarray:
    with np.errstate(over="ignore"):
        return ACTIVATIONS[activation](gate)


def _spans(x: np.ndarray, contract: Contract, num_heads: int) -> np.ndarray:
    """x as (..., spans, n): the spans the contract normalises (each head, or the whole row)."""
    heads = num_heads if contract.scope == "head" else 1
    if x.shape[-1] % heads:
        raise ValueError(f"width {x.shape[-1]} is not divisible by num_heads={num_heads}")
    return x.reshape(*x.shape[:-1], heads, x.shape[-1] // heads)


def _normalise(x: np.ndarray, contract: Contract, num_heads: int) -> np.ndarray:
    return normalise(_spans(x, contract, num_heads), contract).reshape(x.shape)


def _tiled(w: np.ndarray, width: int) -> np.ndarray:
    """The weight as the oracle applies it: a per-head weight tiled across the row."""
    return w if w.shape[-1] == width else np.tile(w, width // w.shape[-1])


def _sum_to(grad: np.ndarray, shape: tuple) -> np.ndarray:
    """grad summed over the axes broadcasting added or stretched to reach grad's shape from `shape`."""
    grad = grad.sum(axis=tuple(range(grad.ndim - len(shape))))
    stretched = tuple(i for i, n in enumerate(shape) if n == 1 and grad.shape[i] != 1)
    return grad.sum(axis=stretched, keepdims=True) if stretched else grad
