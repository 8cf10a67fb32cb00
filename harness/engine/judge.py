"""Judge one implementation's output against the oracle: error figures, detectors, outcome.

The outcomes are listed in harness/data/outcomes.py. Detectors are the catalogue's: they see what max-abs and cosine miss (a constant rescale, a per-head
RMS error, a coherent per-row or per-channel bias, outputs flushed to zero).

ULPs are counted at the reference value (`ulp_magnitude`), unless the op record says otherwise
(`Op.ulp_at`). One rule does: "rotation_pair", for qk_norm_rope, which ends in a rotation of each channel pair (i, i + D/2) of a head: y_i = q_i cos - q_{i+D/2} sin, a sum
of two products, so an element can be near zero while its operands are not, and an error of an ulp
of the operands is then many ulps of the result (measured: a correct bf16 pipeline is 1e5 ulp from
the oracle at |ref|). Its ULPs are counted at the magnitude of the element's pair,
hypot(ref_i, ref_{i+D/2}) (>= |ref|): the rotation keeps it, so it is exactly the magnitude of the
operands (q_i, q_{i+D/2}) that were rotated. (The head's RMS is a rougher stand-in: pairs well above
it get a too small ulp, so the measured maximum grows with the tail of pair / RMS, i.e. with the
number of pairs: 5.6 bf16 ulp and 14.7 float32 ulp for correct pipelines on 8x8x128 cases, against
2.5 and 5.1 at the pair's magnitude.) Every other op is judged at |ref| ("value").
"""
from __future__ import annotations

import copy
import hashlib
import math
from dataclasses import dataclass

import numpy as np

from normdiff.harness.data.budgets import channel_bias_budgets
from normdiff.harness.data import quant
from normdiff.harness.data.dtypes import FloatFormat, format_of, get_format
from normdiff.harness.data.ops import OPS
from normdiff.harness.engine import chain, oracle
from normdiff import wording
from normdiff.wording import channel_bias


@dataclass
class Measurement:
    outcome: str
    max_ulp: float = float("nan")
    p99_ulp: float = float("nan")
    max_abs: float = float("nan")
    rel_l2: float = float("nan")
    tolerance_ulp: float = float("nan")
    nan_count: int = 0
    inf_count: int = 0
    zero_excess: float = float("nan")  # fraction of exact zeros in the output where ref != 0
    scale_ratio: float = float("nan")  # median of out / ref
    ratio_spread: float = float("nan")  # (p99 - p1) / median of out / ref: ~0 for a pure rescale
    span_rms_err: float = float("nan")  # max |rms(out) / rms(ref) - 1| over heads (or rows)
    row_bias_ulp: float = float("nan")  # max |mean magnitude error| of a row, in ulps
    channel_bias_ulp: float = float("nan")  # max |mean magnitude error| of a channel across rows
    channel_bias_budget: float = float("nan")  # judged only with enough rows (budgets.py)
    # the contract's rounding chain (engine/chain.py): the share of elements bit-identical to it, and
    # the share outside what a legal float32 order of it gives (NaN where no chain is judged)
    chain_identical: float = float("nan")
    off_chain: float = float("nan")
    # plausibility: what a quick look would say (the mutants look right by these)
    cosine: float = float("nan")  # cosine similarity to the reference
    rms_ratio: float = float("nan")  # rms(out) / rms(ref)
    assert_close: bool | None = None  # would torch.testing.assert_close's default tolerances pass?
    output_dtype: str = ""
    output_digest: str = ""
    detail: str = ""
    # rows of the call run alone, compared bit for bit with the same rows in the call: "yes", "no"
    # ("" when the case asks for no such check; runner.py, batch invariance)
    batch_invariant: str = ""

    def as_row(self) -> dict:
        return dict(vars(self))  # every field is a scalar: no need for asdict's deep copy

    def __copy__(self) -> "Measurement":  # every field is a scalar: copy.copy's generic path cost 5x this
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        return new


def failure(outcome: str, detail: str) -> Measurement:
    return Measurement(outcome=outcome, detail=detail)


def ulp_distance(a: np.ndarray, b: np.ndarray, fmt: FloatFormat, floor: np.ndarray | None = None) -> tuple[float, bool]:
    """How far apart two outputs are: the max over their finite elements of |a - b| in ULPs of `fmt`
    at the larger magnitude (never below `floor`, where the judge counts the case's errors no finer:
    a LayerNorm's span scale, a gradient's terms), and whether their NaN/Inf patterns are the same."""
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if x.size and x.shape == y.shape:
        magnitude = np.maximum(np.abs(x), np.abs(y))
        if np.isfinite(magnitude.max()):  # both finite everywhere (a NaN or Inf would be the max):
            if floor is not None:  # most pairs, measured without masks or copies
                magnitude = np.maximum(magnitude, np.broadcast_to(floor, x.shape))
            return float((np.abs(x - y) / fmt.ulp(magnitude)).max()), True
    fx, fy = np.isfinite(x), np.isfinite(y)
    same = bool(np.array_equal(fx, fy) and np.array_equal(x[~fx], y[~fy], equal_nan=True))
    ok = fx & fy
    if not ok.any():
        return 0.0, same
    magnitude = np.maximum(np.abs(x[ok]), np.abs(y[ok]))
    if floor is not None:
        magnitude = np.maximum(magnitude, np.broadcast_to(floor, x.shape)[ok])
    return float((np.abs(x[ok] - y[ok]) / fmt.ulp(magnitude)).max()), same


def ulp_apart(a: np.ndarray, b: np.ndarray, fmt: FloatFormat) -> float:
    """ulp_distance as one number: inf when the two outputs' NaN/Inf patterns or their shapes differ
    (a quantizing candidate with another block size has another number of scales)."""
    if np.shape(a) != np.shape(b):
        return float("inf")
    dist, same = ulp_distance(a, b, fmt)
    return dist if same else float("inf")


def digest(array: np.ndarray) -> str:
    """A short hash of the output's bits: equal digests mean bit-identical outputs."""
    # the bytes viewed, not copied: tobytes() cost a copy of every output judged
    return hashlib.blake2b(np.ascontiguousarray(array).reshape(-1).view(np.uint8), digest_size=8).hexdigest()


def output_format(case) -> FloatFormat:
    """The format a case's output is counted in: the case dtype, or a quantizing op's own (q in its
    quantized format, the scale in float32)."""
    if case.output == "q":
        return quant.get_format(case.contract.quant_dtype).as_float_format()
    if case.output == "scale":  # counted in the precision of the y its amax is taken of
        return get_format(case.dtype if case.contract.quant_input == "input" else "float32")
    return get_format(case.dtype)


def ulp_rule(op: str) -> str:
    """Where `op`'s errors are counted in ULPs (its record's ulp_at; "value" for no op)."""
    return OPS[op].ulp_at if op in OPS else "value"


def ulp_magnitude(ref: np.ndarray, op: str = "", num_heads: int = 1, floor: np.ndarray | None = None) -> np.ndarray:
    """The magnitude at which each element's error is counted in ULPs: |ref|; under the
    "rotation_pair" rule the magnitude of the element's rotation pair (ref_i, ref_{i+D/2}) of its
    head, which is >= |ref| (a non-finite partner counts as 0); never below `floor` (`ulp_floor`)."""
    mag = np.abs(np.asarray(ref, dtype=np.float64))
    rotates = ulp_rule(op) == "rotation_pair" and mag.ndim and not mag.shape[-1] % num_heads \
        and not (mag.shape[-1] // num_heads) % 2
    if rotates:
        mag = np.maximum(mag, _pairwise(np.where(np.isfinite(mag), mag, 0.0), num_heads, np.hypot))
        if floor is not None:  # a rotated pair mixes both channels' roundings
            floor = _pairwise(floor, num_heads, np.maximum)
    return mag if floor is None else np.maximum(mag, floor)


def _pairwise(values: np.ndarray, num_heads: int, combine) -> np.ndarray:
    """combine(v_i, v_{i+D/2}) for each rotation pair of each head, at both of its positions."""
    heads = values.reshape(*values.shape[:-1], num_heads, -1)
    half = heads.shape[-1] // 2
    pair = combine(heads[..., :half], heads[..., half:])
    return np.concatenate([pair, pair], axis=-1).reshape(values.shape)


def ulp_floor(contract, arrays: dict, fmt: FloatFormat) -> np.ndarray | None:
    """The smallest magnitude at which errors are counted, per element, or None (the values).

    A Llama cast rounds the normalised value to the output dtype before multiplying by the weight
    (and, in the gated norm, the gate). Below the dtype's smallest normal that rounding is absolute,
    half the subnormal spacing, and the factors after it scale it: a correct fp16 pipeline with a
    gain of ~8 lands ~4 subnormal ULPs from an output that is itself subnormal (measured: 4.5 on
    outlier channels). Counting ULPs no finer than at |factors| x the smallest normal turns that
    absolute error into the relative one the chain's budget covers (harness/data/budgets.py)."""
    if contract.cast != "llama" or "weight" not in arrays:
        return None
    x = arrays["x"]
    with np.errstate(over="ignore", invalid="ignore"):
        scale = np.abs(contract.weight_offset + np.asarray(arrays["weight"], dtype=np.float64))
        if scale.shape[-1] != x.shape[-1]:  # a per-head weight is shared by every head
            scale = np.tile(scale, x.shape[-1] // scale.shape[-1])
        scale = np.maximum(scale, 1.0) * np.ones(x.shape)  # the product w * xh is rounded too
        if "gate" in arrays and contract.gate_order == "norm_then_gate":
            gate = oracle.ACTIVATIONS[contract.gate_activation](np.asarray(arrays["gate"], dtype=np.float64))
            scale = scale * np.where(np.isfinite(gate), np.abs(gate), 0.0)
    return scale * 2.0 ** fmt.min_exponent


def reference_for(case, inputs, exact: np.ndarray, float32_budget: float | None = None) -> "Reference":
    """The prepared reference of a case: its exact output, its dtype, its ULP rule and floor, and
    where it applies (`float32_budget` given: the contract's budget in float32) its rounding chain."""
    fmt = get_format(case.dtype)
    floor = ulp_floor(case.contract, inputs.arrays, fmt)
    counted_at = case.record.floor or oracle.centred_floor
    centred = counted_at(case.contract, inputs.arrays, case.num_heads)
    if centred is not None:  # LayerNorm: counted at least at the span's scale (budgets.py, "Centring")
        floor = centred if floor is None else np.maximum(floor, centred)
    other = None
    if "positions" in inputs.arrays and case.output == "y":  # RoPE: the other legal frequencies
        other = oracle.evaluate(case.contract, inputs.arrays, case.num_heads, power="other")
    # the Llama cast rounds u to the dtype before w * u: on rows alike, that rounding is alike too
    ref = Reference(exact, fmt, case.num_heads, case.op, floor, other,
                    intermediate_rounding=case.contract.cast == "llama")
    if float32_budget is not None and chain.applies(case.contract, case.dtype, case.output, inputs.arrays):
        ref.chain = chain.reference(case.contract, inputs, case.dtype, float32_budget, floor, exact)
    return ref


CELLS_PER_ULP = 8  # values closer than 1/8 ulp round alike (Reference.distinct_cells)


class Reference:
    """The oracle's output and what judging it needs, computed once per case and shared by every
    implementation judged on that case. `op` picks where ULPs are counted (`ulp_magnitude`)."""

    def __init__(self, exact: np.ndarray, fmt: FloatFormat, num_heads: int = 1, op: str = "",
                 floor: np.ndarray | None = None, other: np.ndarray | None = None, mixed=None,
                 intermediate_rounding: bool = False):
        self.exact, self.fmt, self.num_heads, self.op, self.floor = exact, fmt, num_heads, op, floor
        # RoPE: the exact output at the other float32 neighbour of every frequency's power, or
        # `mixed(choice)`, the exact output at one choice per frequency, where elements depend on
        # more than their own frequency (a backward's dx)
        self.other, self.mixed = other, mixed
        self._flip_shifts = None
        # whether the contract rounds an intermediate to the dtype (reference_for): then rows whose
        # values are alike carry that rounding's error alike, which no mean over them averages away
        self.intermediate_rounding = intermediate_rounding
        self.rounded = fmt.round(exact)
        self.rounded_finite = np.isfinite(self.rounded)
        self.finite = np.isfinite(exact)
        # most references are finite everywhere: then no output needs masks where they are not
        self.all_finite, self.rounded_all_finite = bool(self.finite.all()), bool(self.rounded_finite.all())
        self.ulp = fmt.ulp(ulp_magnitude(exact, op, num_heads, floor))
        self.sign = np.sign(exact)
        self.rows = int(np.prod(exact.shape[:-1]))
        # the same for every output judged here, so made once, when first judged: the figures of
        # `exact` (_ExactFigures) and each systematic part's channel budgets
        self._exact_figures: _ExactFigures | None = None
        self._channel_limits: dict[float, np.ndarray] = {}
        # what judge() measured here, by the output's bits and the judging's arguments: many
        # implementations return bit-identical outputs for a case (a family's class and our torch
        # version, a mutant where its bug does not bite: 45 % of the default run's judgements),
        # and each bit-identical one gets the same measurement without the work
        self.judged: dict[tuple, Measurement] = {}
        self.chain: chain.Chain | None = None  # the contract's rounding chain, where judged (reference_for)

    def nearest(self, out: np.ndarray) -> np.ndarray:
        """The exact output an implementation is judged against: the oracle's, or for RoPE, per
        frequency, whichever of the two float32 neighbours of its power (rope.inverse_frequencies)
        leaves `out` the smaller worst error over that frequency's elements (every row, head and
        both halves of the rotated pairs: one choice per frequency, as one inv_freq buffer makes
        it). The contract's power is correctly rounded, but torch's float32 pow (HF's) is only
        faithful: where the exact power lies near a midpoint it returns the other neighbour, which
        moves that frequency's angle by position x ulp(inv_i) (39 float32 ULPs at D = 42, up to
        ~8000 at large positions), while every other frequency stays the contract's. Where an
        element depends on every frequency (`mixed` is given: a backward, whose projection term
        sums over the whole head), the choice is `_choice`'s and the exact value is taken at it."""
        if self.mixed is not None:
            choice = self._choice(out)
            return self.mixed(choice) if choice.any() else self.exact
        if self.other is None:
            return self.exact
        worse = _per_frequency(self._ulps(out, self.other), self.num_heads) < \
            _per_frequency(self._ulps(out, self.exact), self.num_heads)
        return np.where(_per_element(worse, self.exact.shape, self.num_heads), self.other, self.exact)

    def _choice(self, out: np.ndarray) -> np.ndarray:
        """The frequencies at the other power that bring `out` nearest, in the sum of squared
        ULPs over every element: chosen greedily, one frequency at a time, each by the shift its
        flip alone makes (flips are tiny, so their shifts add up). Not frequency by frequency: one
        flipped frequency moves every element of the head through dx's projection term (~40
        float32 ULPs of dx on 2x2x124), more than another frequency's own shift may be."""
        shifts = self._shifts()
        n = shifts.shape[0]
        resid = self._signed_ulps(out, self.exact).ravel()
        choice = np.zeros(n, dtype=bool)
        norms = np.sum(shifts * shifts, axis=1)
        while not choice.all():
            gain = np.where(choice, -np.inf, 2.0 * np.sum(shifts * resid, axis=1) - norms)
            best = int(np.argmax(gain))
            if gain[best] <= 0.0:
                break
            choice[best] = True
            resid = resid - shifts[best]
        return choice

    def distinct_cells(self, channels: np.ndarray) -> np.ndarray:
        """Per channel (a mask over the last axis; 0 elsewhere), how many of its finite rows have
        different rounding errors, where the contract rounds an intermediate (the Llama cast):
        rows whose exact values lie within 1/8 ulp of each other (one bin of
        floor(|exact| / (ulp / 8))) round alike. A channel whose exact values barely move across
        the rows (an outlier channel dominating its rms: u ~ +-sqrt(n) in every row) carries one
        coherent rounding error, up to ~1 ulp through the Llama cast's two roundings (measured
        0.86 over 58 bf16 rows, our own NumPy and HF's Mamba2 class alike): its mean is one
        rounding, not an average of independent ones. With one rounding, a correct output on alike
        rows is the rounded reference in each, so there it is not used (torch's F.normalize,
        rounding its norm to bf16 first, is caught: a finding)."""
        exact = self.exact.reshape(-1, self.exact.shape[-1])[:, channels]
        ulp = np.broadcast_to(self.ulp, self.exact.shape).reshape(exact.shape[0], -1)[:, channels]
        with np.errstate(invalid="ignore", divide="ignore"):
            cells = np.where(np.isfinite(exact), np.floor(np.abs(exact) / ulp * CELLS_PER_ULP), np.nan)
        # every channel at once (np.unique per channel was most of this): sorted down each column,
        # non-finite last, a finite cell that differs from the one above it is a new one
        cells = np.sort(np.where(np.isfinite(cells), cells, np.nan), axis=0)
        starts = np.isfinite(cells)
        starts[1:] &= cells[1:] != cells[:-1]
        found = starts.sum(0)
        out = np.zeros(channels.shape, dtype=int)
        out[channels] = found
        return out

    def figures(self, exact: np.ndarray, ok: np.ndarray | None) -> "_ExactFigures":
        """The figures of `exact` (the nearest exact output) where `ok` (None: everywhere); kept for
        the reference's own exact values everywhere, which nearly every output is judged against."""
        if ok is not None or exact is not self.exact:
            return _ExactFigures(exact, ok, self.num_heads)
        if self._exact_figures is None:
            self._exact_figures = _ExactFigures(exact, None, self.num_heads)
        return self._exact_figures

    def channel_limits(self, systematic: float) -> np.ndarray:
        """Each channel's bias budget over every row (an output finite everywhere), plus `systematic`."""
        if systematic not in self._channel_limits:
            rows = np.full(self.exact.shape[-1], self.rows)
            self._channel_limits[systematic] = channel_bias_budgets(rows) + systematic
        return self._channel_limits[systematic]

    def _shifts(self) -> np.ndarray:
        """(D/2, elements): each frequency's flip alone, in signed ULPs of the exact value; made
        once per case (D/2 VJPs, ~12 ms at 8x8x128) and kept for every implementation judged on it."""
        if self._flip_shifts is None:
            n = self.exact.shape[-1] // self.num_heads // 2
            shifts = np.zeros((n,) + self.exact.shape)
            for f in range(1, n):  # theta ** 0 = 1 is exact in any pow: frequency 0 has no other
                flip = np.zeros(n, dtype=bool)
                flip[f] = True
                shifts[f] = self._signed_ulps(self.mixed(flip), self.exact)
            self._flip_shifts = shifts.reshape(n, -1)
        return self._flip_shifts

    def _signed_ulps(self, out: np.ndarray, exact: np.ndarray) -> np.ndarray:
        with np.errstate(invalid="ignore"):
            err = (np.asarray(out, dtype=np.float64) - exact) / self.ulp
        return np.where(np.isfinite(err), err, 0.0)

    def _ulps(self, out: np.ndarray, exact: np.ndarray) -> np.ndarray:
        return np.abs(self._signed_ulps(out, exact))


def _per_frequency(values: np.ndarray, num_heads: int) -> np.ndarray:
    """The max of `values` (..., H * D) over each RoPE frequency's elements: (D / 2,)."""
    heads = values.reshape(-1, num_heads, 2, values.shape[-1] // num_heads // 2)
    return heads.max(axis=(0, 1, 2))


def _per_element(per_frequency: np.ndarray, shape: tuple, num_heads: int) -> np.ndarray:
    """A (D / 2,) choice per frequency spread over (..., H * D): both halves of every head."""
    return np.broadcast_to(np.tile(per_frequency, 2 * num_heads), shape)


def judge(out, ref, fmt: FloatFormat, budget: float, num_heads: int = 1, op: str = "",
          operand: str = "", systematic: float = 0.0) -> Measurement:
    """Compare `out` (any array the implementation returned) with the float64 reference (an array,
    or a prepared `Reference`). `op` matters only for its ULP rule (`ulp_rule`); `operand` is what
    `out` is the gradient of ("" for the forward's output). `systematic` is the part of the budget
    a legal float32 order may spend alike on every row (its sums' and a centring's bound): a
    channel's mean error may reach it on top of the channel-bias budget."""
    if not isinstance(ref, Reference):
        ref = Reference(np.asarray(ref, dtype=np.float64), fmt, num_heads, op)
    elif op and ulp_rule(op) != ulp_rule(ref.op):  # prepared without the op's rule
        ref = Reference(ref.exact, ref.fmt, ref.num_heads, op, ref.floor, ref.other, ref.mixed,
                        ref.intermediate_rounding)
    out = np.asarray(out)
    if out.shape != ref.exact.shape:
        if operand:
            return failure("error", f"wrong-shaped gradient of {operand} {out.shape}; expected {ref.exact.shape}")
        return failure("error", f"wrong-shaped output {out.shape}; expected {ref.exact.shape} (the shape of x)")
    try:
        out_fmt = format_of(out)
    except ValueError as exc:
        return failure("error", str(exc))
    key = (out.dtype.str, out.shape, digest(out), budget, num_heads, op, operand, systematic)
    if key in ref.judged:
        return copy.copy(ref.judged[key])  # a copy: the runner marks batch invariance on its own
    m = _measure(out, out_fmt, ref, budget, key[2], systematic)
    ref.judged[key] = copy.copy(m)
    return m


def _measure(out: np.ndarray, out_fmt: FloatFormat, ref: Reference, budget: float, out_digest: str,
             systematic: float) -> Measurement:
    m = Measurement(outcome="", tolerance_ulp=budget, output_dtype=out_fmt.name, output_digest=out_digest)
    if out_fmt.name != ref.fmt.name:
        m.detail = f"returns {out_fmt.name} for {ref.fmt.name} input"
    o = out.astype(np.float64)
    finite = np.isfinite(o)
    all_finite = bool(finite.all())
    if not all_finite:  # (an output finite everywhere keeps the counts at 0)
        nans = int(np.isnan(o).sum())
        m.nan_count, m.inf_count = nans, int((~finite).sum()) - nans
    if not all_finite or not ref.rounded_all_finite:
        _nonfinite(m, o, finite, ref, budget)
    channels = _errors(m, o, ref, finite, all_finite and ref.all_finite)
    if not m.outcome:
        # o[finite] is all of o when it is finite everywhere: compared without the two copies
        if np.array_equal(o, ref.rounded) if all_finite else np.array_equal(o[finite], ref.rounded[finite]):
            m.outcome = "identical"
        else:
            m.outcome = "agree" if m.max_ulp <= budget else "disagree"
    _judge_channel_bias(m, channels, ref, systematic)
    _judge_chain(m, o, out_fmt, ref)
    return m


def _judge_chain(m: Measurement, o: np.ndarray, out_fmt: FloatFormat, ref: Reference) -> None:
    """The contract's rounding chain (engine/chain.py): an output inside its budget that rounds
    where the contract does not, on more than a few elements, disagrees."""
    if ref.chain is None or out_fmt.name != ref.fmt.name:
        return
    m.chain_identical, m.off_chain = ref.chain.measure(o)
    if m.outcome in ("agree", "identical") and m.off_chain > chain.OFF_CHAIN_SHARE:
        m.outcome = "disagree"
        m.detail = wording.off_chain(m.off_chain, m.chain_identical, m.max_ulp, m.tolerance_ulp)


def _nonfinite(m: Measurement, o, finite, ref: Reference, budget: float = 0.0) -> None:
    expected = ref.rounded
    # near the overflow threshold a correct output may be finite or the exact value's infinity
    legal = overflows_either_way(ref, budget) & (finite | (np.isinf(o) & (np.sign(o) == ref.sign)))
    same = (finite == ref.rounded_finite) | legal
    judged = ~finite & ~legal  # the non-finite outputs that must be the rounded reference's
    if not same.all() or not np.array_equal(o[judged], expected[judged], equal_nan=True):
        m.outcome = "nan_mismatch"
        bad = int((~same).sum())
        m.detail = (_all_nonfinite(o) if not finite.any() else
                    f"{bad} element(s) non-finite in one of output/reference only ({m.nan_count} NaN, "
                    f"{m.inf_count} Inf in output)")


def overflows_either_way(ref: Reference, budget: float) -> np.ndarray:
    """Where a correct output may be finite or +-inf: its exact value is within `budget` ULPs (at
    the reference's ULP magnitude, where the error is counted) of the dtype's overflow threshold.
    An output within budget of an exact value just below the threshold may round past it to inf, and
    one just above it may stay at the largest finite value (a correct fp16 backward with dy large:
    budgets.py). An infinite or NaN budget (no budget) allows neither."""
    if not np.isfinite(budget):
        return np.zeros(ref.exact.shape, dtype=bool)
    with np.errstate(invalid="ignore"):
        return ref.finite & (np.abs(np.abs(ref.exact) - ref.fmt.overflow) <= budget * ref.ulp)


def _all_nonfinite(o) -> str:
    """'all 512 outputs are +Inf' (or -Inf, NaN, or a mix): there is no error in ULPs to speak of."""
    kinds = [name for name, hit in (("NaN", np.isnan(o).any()), ("+Inf", (o == np.inf).any()),
                                    ("-Inf", (o == -np.inf).any())) if hit]
    what = kinds[0] if len(kinds) == 1 else " or ".join(kinds)
    return f"all {o.size} outputs are {what}: nothing finite to measure"


def _judge_channel_bias(m: Measurement, channels, ref: Reference, systematic: float = 0.0) -> None:
    """`channels`: each channel's mean signed error, the number of rows it was taken over (its
    finite elements: an output that overflowed legally in most rows leaves a channel few, whose
    mean is that much noisier) and whether that is every row, or None. Each channel is judged at
    the budget of its own count (budgets.channel_bias_budget; none below its minimum), plus
    `systematic`."""
    if channels is None:
        return
    means, counts, every_row = channels

    def excess_at(counts, limits=None):
        if limits is None:
            limits = channel_bias_budgets(counts) + systematic
        judged = np.isfinite(limits) & np.isfinite(means)
        return limits, np.where(judged, np.abs(means) - limits, -np.inf)
    rows = counts
    limits, excess = excess_at(counts, ref.channel_limits(systematic) if every_row else None)
    if ref.intermediate_rounding and np.isfinite(excess).any() and excess.max() > 0:  # the count costs a sort
        over = excess > 0
        counts = np.where(over, np.minimum(counts, ref.distinct_cells(over)), counts)
        limits, excess = excess_at(counts)
    if not np.isfinite(excess).any():
        return
    worst = int(np.argmax(excess))
    m.channel_bias_budget = float(limits[worst])
    if m.outcome == "agree" and excess[worst] > 0:
        m.outcome = "disagree"
        m.detail = channel_bias(abs(means[worst]), int(rows[worst]), limits[worst], m.max_ulp)


def _quantiles(values: np.ndarray, qs) -> list[float]:
    """Nearest-rank quantiles with one partition (np.percentile costs several sorts' worth here),
    of only the elements near each rank where the array is large (`_select`)."""
    values = values.ravel()
    ks = [min(values.size - 1, int(round(q * (values.size - 1)))) for q in qs]
    found = _select(values, ks) if values.size >= SELECT_MIN_SIZE else None
    if found is None:
        part = np.partition(values, ks)
        found = [float(part[k]) for k in ks]
    return found


SELECT_MIN_SIZE = 2048  # below this a partition of the whole array costs no more than _select
SELECT_SAMPLE = 512  # about how many elements _select sorts to bracket its ranks
SELECT_SIGMAS = 4.0  # the bracket's half-width, in standard deviations of a sample rank


def _select(values: np.ndarray, ks: list[int]) -> list[float] | None:
    """The k-th smallest of `values` for each k, or None where the partition of the whole array
    must decide. Partitioning every element was a third of judging's time; here a sorted sample
    (every s-th element, s odd so that no power-of-two row width aligns with it) brackets each
    rank, and only the elements inside the bracket are partitioned. The count below the bracket
    says whether the rank is inside it (a NaN is in no bracket, so a rank that lands on one is not
    either), and the value found is then exactly the k-th smallest. A zero is left to the full
    partition: +0 and -0 compare equal, and which one it returns depends on its order."""
    sample = np.sort(values[::(values.size // SELECT_SAMPLE) | 1])
    found = []
    for k in ks:
        value = _select_one(values, k, sample)
        if value is None or value == 0:
            return None
        found.append(value)
    return found


def _select_one(values: np.ndarray, k: int, sample: np.ndarray) -> float | None:
    """The k-th smallest of `values` from the elements between the sample's values a few standard
    deviations of a sample rank either side of rank k; None where that is every element or misses
    rank k."""
    n, s = values.size, sample.size
    p = (k + 0.5) / n
    half = SELECT_SIGMAS * math.sqrt(s * p * (1.0 - p)) + 1.0
    lo, hi = math.floor(p * s - half), math.ceil(p * s + half)
    if lo <= 0 and hi >= s - 1:
        return None
    # the sample's least and greatest values bound nothing: beyond them the bracket stays open
    below, inside = 0, None
    if lo > 0:
        below = int(np.count_nonzero(values < sample[lo]))
        inside = values >= sample[lo]
    if hi < s - 1:
        under = values <= sample[hi]
        inside = under if inside is None else inside & under
    candidates = values[inside]
    if not below <= k < below + candidates.size:
        return None
    return float(np.partition(candidates, k - below)[k - below])


def _errors(m: Measurement, o: np.ndarray, ref: Reference, finite, everywhere: bool):
    """The error figures and detectors; `everywhere`: the output and the reference are finite
    everywhere (`finite` is where the output is), so nothing needs masking."""
    ok = None if everywhere else finite & ref.finite
    if ok is not None and not ok.any():
        return
    nearest = ref.nearest(o)
    exact = nearest if everywhere else np.where(ok, nearest, 0.0)
    o_ok = o if everywhere else np.where(ok, o, 0.0)
    figures = ref.figures(exact, ok)
    diff = o_ok - exact
    ulps = diff / ref.ulp
    abs_ulps = np.abs(ulps if everywhere else ulps[ok])
    m.max_ulp = float(abs_ulps.max())
    m.p99_ulp = _quantiles(abs_ulps, [0.99])[0]
    m.max_abs = float(np.abs(diff).max())
    # sums of squares rather than np.linalg.norm: BLAS dot is slow under this machine's
    # OPENBLAS_CORETYPE setting, and these are small arrays
    diff_norm = float(np.sqrt(np.sum(diff * diff)))
    m.rel_l2 = diff_norm / figures.norm if figures.norm else diff_norm
    zeros = o_ok == 0
    if figures.nonzero is not None:  # (None: exact is nonzero everywhere)
        zeros &= figures.nonzero
    m.zero_excess = float(np.count_nonzero(zeros) / o.size)
    _plausibility(m, o_ok, figures, o, ref, everywhere)
    _ratio(m, o_ok, figures)
    # signed by the reference: a coherent scale error (low-precision statistics, bf16(1 + w))
    # shows as a mean away from 0, while correct rounding averages out
    channels = _biases(m, ulps * ref.sign, ok)
    _span_rms(m, o_ok, figures)
    return channels


class _ExactFigures:
    """What the figures need of the exact values an output is compared with (zeros outside `ok`,
    where both are finite; None: everywhere): the same for every output compared with the same
    values, so a Reference keeps those of its own exact values (`Reference.figures`)."""

    def __init__(self, exact: np.ndarray, ok: np.ndarray | None, num_heads: int):
        self.values = exact
        self.norm = float(np.sqrt(np.sum(exact * exact)))
        # the ratio out / exact is taken where |exact| is not tiny (and both are finite); nearly
        # always everywhere, and then no mask is kept (a Reference keeps these for the whole run)
        big = np.abs(exact) > 1e-30
        if ok is not None:
            big &= ok
        self.big_count = int(np.count_nonzero(big))
        self.every_big = self.big_count == exact.size  # then out[big] is out.ravel()
        self.big, self.big_exact = (None, exact.ravel()) if self.every_big else (big, exact[big])
        self.nonzero = None if self.every_big else exact != 0  # None: nonzero everywhere
        # the rms of each head's span (each row's, where the heads do not divide it)
        width = exact.shape[-1]
        self.span = width // num_heads if width % num_heads == 0 else width
        rms = np.sqrt(np.mean(exact.reshape(-1, self.span) ** 2, -1))
        self.live = rms > 0
        self.live_rms = rms[self.live]


# torch.testing.assert_close's default (rtol, atol) per dtype, from its documentation; the test
# tests/harness/engine/test_judge.py checks this copy against torch itself
ASSERT_CLOSE_DEFAULTS = {"float32": (1.3e-6, 1e-5), "bfloat16": (1.6e-2, 1e-5), "float16": (1e-3, 1e-5),
                         "float64": (1e-7, 1e-7)}


def _plausibility(m: Measurement, o_ok, figures: _ExactFigures, o, ref: Reference, finite: bool) -> None:
    """`finite`: the output is finite everywhere."""
    out_norm = float(np.sqrt(np.sum(o_ok * o_ok)))
    ref_norm = figures.norm
    m.cosine = float(np.sum(o_ok * figures.values) / (out_norm * ref_norm)) if out_norm * ref_norm else float("nan")
    m.rms_ratio = out_norm / ref_norm if ref_norm else float("nan")
    # assert_close(actual=out, expected=a correct output: the reference rounded to the dtype),
    # judged on values alone (its check_dtype is left out: output_dtype records that)
    rtol, atol = ASSERT_CLOSE_DEFAULTS[ref.fmt.name]
    expected = ref.rounded
    with np.errstate(invalid="ignore"):
        close = np.abs(o - expected) <= atol + rtol * np.abs(expected)
    if not finite:  # equal infinities pass; NaN never does (equal_nan=False); equal finite values
        close |= o == expected  # are within the tolerance already
    m.assert_close = bool(close.all())


def _ratio(m: Measurement, o_ok, figures: _ExactFigures) -> None:
    if figures.big_count >= 2:
        ratio = (o_ok.ravel() if figures.every_big else o_ok[figures.big]) / figures.big_exact
        lo, med, hi = _quantiles(ratio, [0.01, 0.5, 0.99])
        m.scale_ratio = med
        m.ratio_spread = float((hi - lo) / abs(med)) if med else float("inf")


def _biases(m: Measurement, signed_ulps, ok):
    """The row and channel biases; returns each channel's mean, the rows it was taken over and
    whether that is every row (`ok`, where both are finite, is None)."""
    flat = signed_ulps.reshape(-1, signed_ulps.shape[-1])
    if ok is None:
        rows, cols = flat.mean(-1), flat.mean(0)
        counts = np.full(flat.shape[-1], flat.shape[0])
    else:
        mask = ok.reshape(flat.shape)
        flat = np.where(mask, flat, 0.0)
        counts = mask.sum(0)
        with np.errstate(invalid="ignore", divide="ignore"):
            rows, cols = flat.sum(-1) / mask.sum(-1), flat.sum(0) / counts
    m.row_bias_ulp = float(np.nanmax(np.abs(rows))) if np.isfinite(rows).any() else float("nan")
    m.channel_bias_ulp = float(np.nanmax(np.abs(cols))) if np.isfinite(cols).any() else float("nan")
    return cols, counts, ok is None


def _span_rms(m: Measurement, o, figures: _ExactFigures) -> None:
    rms_o = np.sqrt(np.mean(o.reshape(-1, figures.span) ** 2, -1))
    if figures.live_rms.size:
        m.span_rms_err = float(np.max(np.abs(rms_o[figures.live] / figures.live_rms - 1.0)))
