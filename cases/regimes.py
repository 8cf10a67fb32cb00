"""Deterministic input generators for the regimes that expose normalization bugs.

Every generator draws in float64 from the NumPy generator it is given; the case casts the draw to
its dtype once, and those exact bits are what every implementation and the oracle see.
A regime is named `name` or `name:param` (for example `tiny_rms:1e-3`, `mean_shift:3`).
See ../shared/CATALOGUE.md ("Input regimes that expose them") for why each one exists.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from normdiff.harness.data.dtypes import get_format
from normdiff.harness.data.errors import UsageError
from normdiff.harness.data.names import unknown
from normdiff.harness.data.ops import OPS
from normdiff.text import general

Array = np.ndarray


@dataclass(frozen=True)
class Regime:
    name: str
    exposes: str  # the bugs this regime is there for
    draw: Callable[..., Array]
    needs_heads: bool = False  # only meaningful for ops that know num_heads
    param_default: str | None = None  # the parameter used when none is given; None: takes none
    # checks a given parameter before anything is drawn (a suite's typo fails at load, not as every
    # case's error): raises UsageError naming what it takes; None: no parameter to check
    check: Callable[[str], None] | None = None
    # the largest magnitude its draws reach for a parameter (a mean and SIGMAS standard deviations):
    # a case whose dtype cannot hold it is refused (cast, every input would be Inf); None: a fixed one
    reaches: Callable[[float], float] | None = None


def split(regime: str) -> tuple[str, str | None]:
    name, _, param = regime.partition(":")
    return name, (param or None)


def _number(name: str, what: str, ok: Callable[[float], bool], example: str) -> Callable[[str], None]:
    """A parameter check: a number for which `ok` holds (NaN and inf never do: they would make
    every input NaN, a case that measures nothing)."""
    def check(param: str) -> None:
        try:
            value = float(param)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and ok(value)):
            raise UsageError(f"input regime {name!r} takes {what}, like '{name}:{example}'; got {param!r}")
    return check


def _one_of(choices: tuple[str, ...], name: str) -> Callable[[str], None]:
    def check(param: str) -> None:
        if param not in choices:
            raise UsageError(f"input regime {name!r} takes {' or '.join(map(repr, choices))}, not {param!r}")
    return check


# --- x ----------------------------------------------------------------------------------------
# Each takes (rng, rows, num_heads, head_dim, param) and returns float64 (rows, num_heads*head_dim).


def _normal(rng, rows, heads, dim, param):
    return rng.standard_normal((rows, heads * dim))


def _tiny_rms(rng, rows, heads, dim, param):
    return float(param) * rng.standard_normal((rows, heads * dim))


def _zero_rows(rng, rows, heads, dim, param):
    x = rng.standard_normal((rows, heads * dim))
    x[::2] = 0.0  # every other row is exactly zero: 0/0 guards and eps-ignored NaNs
    return x


def _large(rng, rows, heads, dim, param):
    # fp16 values of 300-1000: x^2 overflows fp16 (65504) when statistics are not upcast
    return rng.choice([-1.0, 1.0], (rows, heads * dim)) * rng.uniform(300, 1000, (rows, heads * dim))


def _spike(rng, rows, heads, dim, param):
    x = rng.standard_normal((rows, heads * dim))
    cols = rng.integers(0, heads * dim, rows)
    x[np.arange(rows), cols] = rng.choice([-1.0, 1.0], rows) * rng.uniform(300, 1000, rows)
    return x


def _outliers(rng, rows, heads, dim, param):
    # a few channels carry huge activations in every row, as in real LLM residual streams
    width = heads * dim
    x = rng.standard_normal((rows, width))
    cols = rng.choice(width, size=min(4, width), replace=False)
    x[:, cols] = rng.choice([-1.0, 1.0], (rows, cols.size)) * rng.uniform(300, 3000, (rows, cols.size))
    return x


def _mean_shift(rng, rows, heads, dim, param):
    return float(param) + rng.standard_normal((rows, heads * dim))


def _narrow(rng, rows, heads, dim, param):
    # rows at mean 1000 with a small spread: LayerNorm's centring is ill-conditioned
    # (|mean| / std = 1000 / std), so a one-pass variance E[x^2] - E[x]^2 cancels catastrophically
    # while a two-pass one stays within rounding (the budget grows with the ratio: budgets.py)
    return 1000.0 + float(param) * rng.standard_normal((rows, heads * dim))


def _group_scales(rng, rows, heads, dim, param):
    # each group of channels at its own scale, 1e-2 .. 1e2: a norm over the wrong groups (or over
    # the whole row) weighs every group by the others' scale
    scales = np.logspace(-2, 2, heads)
    rng.shuffle(scales)
    x = rng.standard_normal((rows, heads, dim)) * scales[None, :, None]
    return x.reshape(rows, heads * dim)


HEAD_SCALES = ("lognormal", "logspace")  # head_scales' parameter: how the heads' scales spread
_check_head_scales = _one_of(HEAD_SCALES, "head_scales")


def _head_scales(rng, rows, heads, dim, param):
    _check_head_scales(param)  # a direct draw_input call is not checked by check_input_regime
    if param == "lognormal":
        scales = rng.lognormal(0.0, 0.5, heads)
    else:
        scales = np.logspace(-1, 1, heads)
    x = rng.standard_normal((rows, heads, dim)) * scales[None, :, None]
    return x.reshape(rows, heads * dim)


def _zero_heads(rng, rows, heads, dim, param):
    x = rng.standard_normal((rows, heads, dim))
    x[:, ::2] = 0.0
    return x.reshape(rows, heads * dim)


SIGMAS = 8  # a standard normal draw of 2**28 elements (the largest case) stays within 6.5

INPUT_REGIMES: dict[str, Regime] = {
    r.name: r
    for r in (
        Regime("normal", "baseline and cast-order tolerances", _normal),
        Regime("tiny_rms", "eps placement and value, L2 eps semantics", _tiny_rms, param_default="1e-3",
               check=_number("tiny_rms", "a positive finite number (the rows' RMS)", lambda v: v > 0, "1e-3"),
               reaches=lambda v: SIGMAS * v),
        Regime("zero_rows", "eps ignored (NaN), 0/0 guards", _zero_rows),
        Regime("large", "fp16 overflow of x^2 when statistics are not upcast", _large),
        Regime("spike", "one element > 256: fp16 overflow of x^2", _spike),
        Regime("outliers", "low-precision statistics (signed per-row bias)", _outliers),
        Regime("mean_shift", "variance instead of mean square", _mean_shift, param_default="1",
               check=_number("mean_shift", "a finite number (the rows' mean)", lambda v: True, "3"),
               reaches=lambda v: abs(v) + SIGMAS),
        Regime("narrow", "one-pass variance E[x^2] - E[x]^2 (mean 1000, std the parameter)", _narrow,
               param_default="1", check=_number("narrow", "a positive finite number (the rows' std around 1000)",
                                                lambda v: v > 0, "0.1"), reaches=lambda v: 1000.0 + SIGMAS * v),
        Regime("group_scales", "a grouped norm over the wrong groups", _group_scales, needs_heads=True),
        Regime("head_scales", "full-vector vs per-head QK-Norm", _head_scales, needs_heads=True,
               param_default="lognormal", check=_check_head_scales),
        Regime("zero_heads", "per-head 0/0 guards", _zero_heads, needs_heads=True),
    )
}

# --- weights ----------------------------------------------------------------------------------
# Each takes (rng, shape) and returns float64 of that shape ((n,) for a weight).


def _trained(rng, shape):
    # Qwen3.5 layer-0 input_layernorm (stored w - 1): mean +0.238, range [-0.11, +1.00] (seed 000)
    return -0.11 + 1.11 * rng.beta(2.0, 4.35, shape)


def final_norm_offsets(rng, shape):
    """The final norm's stored w - 1 in the same checkpoint: mean +3.309, range [-0.78, +5.31] (seed
    000); a beta on that range with that mean (normdiff model's trained-like final norms)."""
    return -0.78 + 6.09 * rng.beta(4.0, 1.96, shape)


WEIGHT_REGIMES: dict[str, Callable[[np.random.Generator, tuple], Array]] = {
    "zeros": lambda rng, shape: np.zeros(shape),
    "ones": lambda rng, shape: np.ones(shape),
    "small": lambda rng, shape: rng.normal(-0.02, 0.1, shape),
    "trained": _trained,
    "large": lambda rng, shape: rng.normal(7.7, 1.0, shape),  # final-norm-like gains
}

# --- biases -----------------------------------------------------------------------------------

BIAS_REGIMES: dict[str, Callable[[np.random.Generator, tuple], Array]] = {
    "zeros": lambda rng, shape: np.zeros(shape),
    # LayerNorm biases of trained GPT-2 / Pythia checkpoints: centred near 0, spread ~0.1, a few large
    "trained": lambda rng, shape: rng.normal(0.0, 0.1, shape) + (rng.random(shape) < 0.02) * rng.normal(0.0, 1.0, shape),
    "large": lambda rng, shape: rng.normal(3.0, 1.0, shape),  # a bias comparable to the normalised value
}

# --- residuals (a fused add's second input; per row, like x) ------------------------------------
# Each takes (rng, shape) with shape (rows, width).

RESIDUAL_REGIMES: dict[str, Callable[[np.random.Generator, tuple], Array]] = {
    "normal": lambda rng, shape: rng.standard_normal(shape),
    # a residual stream deep in a model is much larger than one layer's update: h's rounding to the
    # input dtype, and a truncated residual_out, are then relative to the residual
    "large": lambda rng, shape: 30.0 * rng.standard_normal(shape),
}

# --- gates ------------------------------------------------------------------------------------

GATE_REGIMES: dict[str, Callable[[np.random.Generator, tuple], Array]] = {
    "open": lambda rng, shape: rng.standard_normal(shape),
    "closed": lambda rng, shape: rng.normal(-4.0, 1.0, shape),  # silu(z) ~ -0.07: mostly shut
}


# --- positions --------------------------------------------------------------------------------

MAX_POSITION = 8192  # positions are drawn below this: Qwen3's pretraining context length


def draw_positions(rng: np.random.Generator, tokens: int) -> Array:
    """int64 (tokens,): distinct sorted positions in [0, MAX_POSITION) (with repeats only when there
    are more tokens than positions), as for tokens sampled from one long sequence. Large positions
    carry large float32 angles, where RoPE's angle rounding is largest."""
    if tokens <= MAX_POSITION:
        drawn = rng.choice(MAX_POSITION, size=tokens, replace=False)
    else:
        drawn = rng.integers(0, MAX_POSITION, tokens)
    return np.sort(drawn).astype(np.int64)


POSITION_REGIMES: dict[str, Callable[[np.random.Generator, tuple], Array]] = {
    "sorted": lambda rng, shape: draw_positions(rng, shape[0]),
}

# --- upstream gradients -------------------------------------------------------------------------
# For a backward case: each takes (rng, y) with y the exact forward output (float64, rows x width)
# and returns dy, float64 of y's shape, which the case casts to its dtype. Why each one exists:
#   normal   the baseline
#   aligned  dy mostly along y, so sum(dy * y) is large: the projection term of the norm's backward
#            (- x r^3 / n * sum(g x)) dominates, and a bug in it (the weight twice, a dropped
#            projection) is as large as the answer
#   sparse   a few nonzero entries per row: a projection term computed from the wrong elements, or
#            strides ignored, shows in rows that are almost all zero
#   large    |dy| ~ 300: products g * w * x overflow fp16 unless accumulated in float32
#   tiny     |dy| ~ 1e-4: dw partial sums in a low-precision dtype lose everything


def _aligned(rng, y):
    scale = np.sqrt(np.mean(y * y, axis=-1, keepdims=True))
    scale = np.where(scale > 0, scale, 1.0)
    return 0.9 * y / scale + 0.1 * rng.standard_normal(y.shape)


def _sparse(rng, y):
    dy = np.zeros(y.shape)
    width = y.shape[-1]
    hits = max(1, width // 100)  # about 1 % of each row, never none
    for row in range(int(np.prod(y.shape[:-1]))):
        cols = rng.choice(width, size=hits, replace=False)
        dy.reshape(-1, width)[row, cols] = rng.standard_normal(hits)
    return dy


GRADIENT_REGIMES: dict[str, Callable[[np.random.Generator, Array], Array]] = {
    "normal": lambda rng, y: rng.standard_normal(y.shape),
    "aligned": _aligned,
    "sparse": _sparse,
    "large": lambda rng, y: 300.0 * rng.standard_normal(y.shape),
    "tiny": lambda rng, y: 1e-4 * rng.standard_normal(y.shape),
}


def draw_gradient(regime: str, rng: np.random.Generator, y: Array) -> Array:
    """The upstream gradient of a backward case (float64, shaped like y)."""
    if regime not in GRADIENT_REGIMES:
        raise UsageError(unknown("gradient regime", regime, GRADIENT_REGIMES))
    return GRADIENT_REGIMES[regime](rng, np.asarray(y, dtype=np.float64))


# The tables an operand's `table` names (harness/data/ops/). x's regimes take parameters and the
# head layout, so x is drawn by `draw_input`.
TABLES: dict[str, dict[str, Callable]] = {"weight": WEIGHT_REGIMES, "gate": GATE_REGIMES,
                                          "positions": POSITION_REGIMES, "bias": BIAS_REGIMES,
                                          "residual": RESIDUAL_REGIMES}
# and those of the operands only one op module knows, which carry their own draws (ops/record.py)
TABLES.update({o.table: dict(o.draws) for op in OPS.values() for o in op.operands if o.draws})


def check_regime(table: str, regime: str) -> None:
    """Raise UsageError unless `regime` is one of `table`'s."""
    if regime not in TABLES[table]:
        raise UsageError(unknown(f"{table} regime", regime, TABLES[table]))


def draw(table: str, regime: str, rng: np.random.Generator, shape: tuple) -> Array:
    return TABLES[table][regime](rng, shape)


def check_input_regime(regime: str, dims: tuple[str, ...] | None, dtype: str | None = None) -> None:
    """Raise UsageError unless `regime` is a known input regime with a valid parameter that fits an
    op written in `dims` (None: any op; a suite checks its regimes before it knows the op) and
    whose draws `dtype` holds (None: not checked; a case checks it)."""
    name, param = split(str(regime))
    if name not in INPUT_REGIMES:
        raise UsageError(unknown("input regime", name, INPUT_REGIMES))
    spec = INPUT_REGIMES[name]
    if dims is not None and spec.needs_heads and "num_heads" not in dims:
        raise UsageError(f"input regime {name!r} needs an op with heads (shaped rows x heads x head_dim)")
    if param is not None and spec.param_default is None:
        raise UsageError(f"input regime {name!r} takes no parameter (got {param!r})")
    if param is not None and spec.check:
        spec.check(param)
    if dtype is not None and spec.reaches is not None:
        reaches, fmt = spec.reaches(float(param or spec.param_default)), get_format(dtype)
        if reaches >= fmt.overflow:
            raise UsageError(f"input regime {str(regime)!r} draws values up to about {general(reaches)} ({SIGMAS} "
                             f"standard deviations out), and {fmt.name} rounds {general(fmt.overflow)} and above to "
                             "Inf: give a smaller parameter or a wider dtype")


def draw_input(regime: str, rng: np.random.Generator, rows: int, heads: int, dim: int) -> Array:
    name, param = split(regime)
    spec = INPUT_REGIMES[name]
    return spec.draw(rng, rows, heads, dim, param or spec.param_default)
