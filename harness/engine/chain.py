"""The contract's rounding chain: the exact values rounded at exactly the contract's cast points, and
the set of outputs a correct implementation of that chain can give (issue 31).

A budget is a maximum, and one rounding more than the contract allows stays inside it: an RMSNorm
that rounds the normalised value to bf16 before the weight multiply, under a contract that rounds
once, is at most ~1.8 ULPs off where the budget allows 2. What the extra rounding changes is *which*
neighbour each element rounds to, on a large share of the elements. So the oracle also computes the
chain reference: the contract's own arithmetic (implementations/numpy_own.py, the code every
knob is written in) run in float64 between its rounding points, each rounding point correctly rounded
(FloatFormat.cast).

A correct implementation computes the values between its rounding points in float32, not float64,
so it may round an element the other way where the float64 value lies within its float32 error of a
rounding boundary. Its float32 error is what the contract's float32 budget bounds (budgets.py: the
same derivation; the budget is the most a legal float32 pipeline may be off, in float32 ULPs at the
judge's magnitude and floor). So the legal outputs of each element are bracketed by running the
chain twice more with every rounding point's input moved by that bound, once away from zero and once
toward it (a magnitude moved up stays up through the products by the weight and the gate, and a
rounding is monotone), and taking the elementwise least and greatest of the three: an element
outside [lo, hi] is one no legal float32 order of the contract's chain can give, unless it is the
exact value rounded once (within the same float32 slack): fewer roundings than the contract takes
are closer to the exact value, never a bug (FlashInfer's fused add rounds once where vLLM's native
path takes the Llama cast's two), so that bracket is legal too. By that derivation
a correct implementation has none; `OFF_CHAIN_SHARE` is the share the detector allows before it calls
the chain a different one (engine/judge.py), for the one case the derivation does not cover: a
budget that is itself a bound reached by no real pipeline can still be exceeded by a kernel's own
approximations (a fast rsqrt), on a handful of elements, never on a share.

Judged where it means something: a bfloat16 or float16 output (in float32 a correct pipeline's own
error is the output's ULP, and the chain reference is the exact value again), the op's y (a fused
add's residual_out is one rounding of an exact sum, half an ULP already), a statistic the contract
computes in float32, and no rotation after the norm (RoPE's products of rounded cos and sin cancel,
which no bracket by magnitude follows: its own budget and reference hold it).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from normdiff.harness.data.dtypes import FloatFormat, get_format
from normdiff.implementations import numpy_own

LOW_PRECISION = ("bfloat16", "float16")
# The share of elements outside the legal set above which the outputs follow another chain. 0 by
# derivation for a correct implementation (module docstring); a chain with one rounding more moves
# ~1/4 of the elements the weight or gate does not leave alike (measured on the corpus: 0.19 to 0.48
# of a case's elements for the double-rounding bugs, 0 for every correct implementation)
OFF_CHAIN_SHARE = 0.02


@dataclass
class Chain:
    """One case's chain reference (`centre`) and, per element, the least and greatest output a
    legal float32 order of the chain gives (`lo`, `hi`), float64."""

    centre: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    # the exact value rounded once, with the same slack: legal too (module docstring)
    once_lo: np.ndarray
    once_hi: np.ndarray

    def measure(self, out: np.ndarray) -> tuple[float, float]:
        """(the share of elements bit-identical to the chain reference, the share outside the legal
        set), over the elements both are finite at."""
        o = np.asarray(out, dtype=np.float64)
        finite = np.isfinite(o) & np.isfinite(self.centre)
        total = int(finite.sum())
        if not total:
            return float("nan"), float("nan")
        o = o[finite]
        identical = float(np.count_nonzero(o == self.centre[finite])) / total
        outside = (o < self.lo[finite]) | (o > self.hi[finite])
        outside &= (o < self.once_lo[finite]) | (o > self.once_hi[finite])
        off = float(np.count_nonzero(outside)) / total
        return identical, off


def applies(contract, dtype: str, result: str, operands) -> bool:
    """Whether a case's output is judged by its chain (module docstring)."""
    return (dtype in LOW_PRECISION and result == "y" and contract.stats_dtype == "float32"
            and "positions" not in operands)


def reference(contract, inputs, dtype: str, float32_budget: float, floor: np.ndarray | None,
              exact: np.ndarray) -> Chain:
    """The chain reference of a case and its legal brackets. `float32_budget`: the contract's budget
    in float32 for this case (budgets.budget_for), `floor`: the least magnitude its ULPs are counted
    at (judge.reference_for's), or None; `exact`: the oracle's y."""
    fmt = get_format(dtype)
    relative = float32_budget * 2.0 ** -get_format("float32").mantissa_bits
    runs = [_y(numpy_own.run(contract.op, contract, inputs, np.float64, _Rounding(fmt, s, relative, floor)))
            for s in (0, -1, 1)]
    once = [_Rounding(fmt, s, relative, floor)(exact, dtype, final=True).astype(np.float64) for s in (-1, 1)]
    with np.errstate(invalid="ignore"):
        return Chain(runs[0], _least(runs), _greatest(runs), _least(once), _greatest(once))


def _least(runs: list[np.ndarray]) -> np.ndarray:
    return functools.reduce(np.fmin, runs)


def _greatest(runs: list[np.ndarray]) -> np.ndarray:
    return functools.reduce(np.fmax, runs)


def _y(value) -> np.ndarray:
    return np.asarray(value[0] if isinstance(value, tuple) else value, dtype=np.float64)


class _Rounding:
    """numpy_own's rounding point in the chain reference: the float64 value, moved `slack` (-1, 0,
    +1) times a legal float32 pipeline's error away from zero, correctly rounded to the format."""

    def __init__(self, fmt: FloatFormat, slack: int, relative: float, floor: np.ndarray | None):
        self.fmt, self.slack, self.relative, self.floor = fmt, slack, relative, floor

    def __call__(self, v: np.ndarray, dtype, final: bool = False) -> np.ndarray:
        v = np.asarray(v, dtype=np.float64)
        if self.slack and final and self.floor is not None:  # counted no finer than the floor (a centring's)
            error = np.maximum(self.relative * np.abs(v), self.relative * np.broadcast_to(self.floor, v.shape))
            with np.errstate(invalid="ignore"):
                v = v + self.slack * error * np.where(v < 0, -1.0, 1.0)
        elif self.slack:  # |v| moved by its relative error: v (1 +- relative), one product
            v = v * (1.0 + self.slack * self.relative)
        return self.fmt.cast(v)
