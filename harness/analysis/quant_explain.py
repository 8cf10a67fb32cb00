"""The teaching view of a quantizing bug (`normdiff explain quant-...`): the mutant's own q and scale
on the suite's cases, set beside the contract's exact ones (ops/quantize.py) and judged as the
judge judges them (engine/quant_judge.py). Every number is measured on those cases.

  grid        one element: y / scale with the contract's scale and with the mutant's, the format's
              representable values on either side of each quotient, what the contract writes, what
              the mutant wrote, and how far apart, in ULPs of the format
  saturation  how many quotients of a case pass the contract's max with each scale, the largest,
              and what the mutant wrote there (NaN past E4M3FN's 464, 448 clamped, 240 where the
              contract stops at 224)
  amax table  the blocks of every call binned by where their amax lands on the format with the
              mutant's scale (amax / (scale x max): 1 is the max, above it saturates), with each
              bin's dequantized error against the exact y, the mutant's beside the contract's

`call_rows` also gives explain the rows it picks its cases from: one per call (the q case's row,
with its scale's judgement beside it), so that the case shown is a q output, never a scale row.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, partial

import numpy as np
import pandas as pd

from normdiff.cases.model import Case
from normdiff.harness.data import quant
from normdiff.harness.data.ops import quantize
from normdiff.harness.data.outcomes import DISAGREEING
from normdiff.harness.engine import quant_judge
from normdiff.harness.engine.columns import C
from normdiff.harness.engine.runner import prepare
from normdiff.text import general, number, precise

# knobs whose bugs are about the clamp and the range: their view says where saturation bites even
# where a case has nothing past the max
RANGE_KNOBS = ("saturate", "quant_max", "scale_rounding", "amax_bound", "amax_floor", "scale_from")
PAST = 2.0 ** -20  # a quotient passes the max by more than this share of it: y / (amax / max) is
# the max itself, and a float32 scale's rounding (2^-24 of it) lands it a hair either side
STEPS_SHOWN = 0.01  # the dequantized difference is said in the contract's steps from this many
BINS = 3  # quantile bins of the amax table (plus one edge at the max, where saturation starts)
SPREAD = 1.05  # below this max / min of amax / (scale x max) the table bins by the amax itself


@dataclass
class Call:
    """One quantizing call of the mutant: its q and scale beside the contract's exact ones."""

    case: Case  # the call's q case
    ref: quant_judge.QuantReference
    q: np.ndarray  # the mutant's q as numbers, shaped like y
    given: np.ndarray  # the mutant's scale as numbers, (rows, blocks)
    scale: np.ndarray  # what its q is judged as divided by (its scale where it is one; quant_judge.divisor)

    @property
    def fmt(self) -> quant.QuantFormat:
        return self.ref.fmt

    @cached_property
    def contract_scale(self) -> np.ndarray:
        """What the contract divides y by: its scale (1 / t, or s / g, under a per-tensor scale)."""
        return self.ref.divisor(self.ref.scale)

    @property
    def contract(self):
        return self.ref.contract

    @property
    def y(self) -> np.ndarray:
        return self.ref.y

    def per_element(self, s: np.ndarray) -> np.ndarray:
        """A (rows, blocks) array spread over each block's elements, shaped like y."""
        return np.repeat(s, self.y.shape[-1] // s.shape[-1], axis=-1)

    @cached_property
    def quotient(self) -> np.ndarray:
        """y / the mutant's scale, shaped like y."""
        return quantize.quotient(self.y, self.scale, self.contract).reshape(self.y.shape)

    @cached_property
    def contract_quotient(self) -> np.ndarray:
        return quantize.quotient(self.y, self.contract_scale, self.contract).reshape(self.y.shape)

    @cached_property
    def once(self) -> np.ndarray:
        """y / the mutant's scale rounded once by the contract's rule: what the judge counts from."""
        return quantize.rounded(self.quotient, self.contract).reshape(self.y.shape)

    @cached_property
    def dequantized(self) -> np.ndarray:
        with np.errstate(invalid="ignore"):
            return self.q * self.per_element(self.scale)

    @cached_property
    def contract_dequantized(self) -> np.ndarray:
        with np.errstate(invalid="ignore"):
            return self.ref.q * self.per_element(self.contract_scale)

    @cached_property
    def contract_step(self) -> np.ndarray:
        """The contract's step at each element: the format's spacing at its q times its scale."""
        return self.fmt.spacing(np.where(np.isfinite(self.ref.q), self.ref.q, 0.0)) * self.per_element(self.contract_scale)

    @cached_property
    def steps(self) -> np.ndarray:
        """|mutant's q * scale - the contract's| in the contract's steps; inf where one is NaN or inf
        and the other is not, or where the contract's step is 0 (a zero row) and they differ."""
        a, b = self.dequantized, self.contract_dequantized
        same = (a == b) | (np.isnan(a) & np.isnan(b))
        with np.errstate(invalid="ignore", divide="ignore"):
            d = np.abs(a - b) / self.contract_step
        return np.where(same, 0.0, np.where(np.isfinite(d), d, np.inf))

    @cached_property
    def legal(self) -> tuple[np.ndarray, np.ndarray]:
        """The lowest and highest code a legal float32 pipeline writes with the mutant's scale."""
        return quant_judge.legal_codes(self.ref, self.scale)

    @cached_property
    def past(self) -> np.ndarray:
        """Which quotients pass the contract's max with the mutant's scale."""
        return _past(self.quotient, self.contract)

    @cached_property
    def outside(self) -> np.ndarray:
        """Which codes the judge finds outside the legal ones (given the mutant's own scale)."""
        return quant_judge.outside_codes(self.q, *self.legal)

    def worst_element(self) -> tuple[int, int]:
        """The element to show: one the judge finds outside the legal codes where there is one, the
        furthest from the contract's (in its steps) among those, then the largest quotient."""
        size = np.abs(np.nan_to_num(self.quotient, nan=0.0, posinf=np.inf, neginf=np.inf))
        first = np.lexsort((-size.ravel(), -self.steps.ravel(), ~self.outside.ravel()))[0]
        row, col = np.unravel_index(first, self.y.shape)
        return int(row), int(col)


def call_of(case_id: str, outputs: dict, impl: str) -> Call | None:
    """The call of a q case with the mutant's q and scale as the run kept them; None where either
    was not kept or cannot be read as the format's numbers."""
    case = Case.from_id(case_id)
    q, scale = outputs.get((case_id, impl)), outputs.get((case.with_output("scale").id, impl))
    if q is None or scale is None:
        return None
    ref = prepare(case).expected["q"].ref
    try:
        values = quant.decode(q, ref.fmt)
        given = quant_judge.scale_shaped(quant.decode(scale, quantize.scale_encoding(scale, ref.contract)), ref)
    except (ValueError, TypeError):
        return None
    if values.shape != ref.y.shape:
        return None
    return Call(case, ref, values, given, ref.divisor(quant_judge.usable_scale(scale, ref)))


def call_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per call: its q case's row, with its scale case's judgement beside it (scale_outcome,
    call_scale_ratio, scale_off) and `outcome` the call's: disagreeing where either output is (the q's
    own in q_outcome)."""
    q = rows[rows[C.output] == "q"].copy()
    scale = rows[rows[C.output] == "scale"]
    by_call = {Case.from_id(cid).call_id: r for cid, r in zip(scale[C.case_id], scale.to_dict("records"))}
    found = [by_call.get(Case.from_id(cid).call_id, {}) for cid in q[C.case_id]]
    q["q_outcome"] = q[C.outcome]
    q["scale_outcome"] = [s.get(C.outcome, "") for s in found]
    q["call_scale_ratio"] = [s.get(C.scale_ratio, np.nan) for s in found]
    q["scale_off"] = [s.get(C.off_chain, np.nan) for s in found]
    scale_caught = q["scale_outcome"].isin(DISAGREEING) & ~q["q_outcome"].isin(DISAGREEING)
    q[C.outcome] = np.where(scale_caught, q["scale_outcome"], q["q_outcome"])
    return q


def described(row) -> str:
    """A call's judgement in a few words: its q's and its scale's."""
    nan = int(row[C.nan_count] + row[C.inf_count])
    return (f"q: {row['q_outcome']}{f', {nan} NaN or Inf' if nan else ''}, rel_l2 "
            f"{number(row[C.rel_l2], missing='nan')} and cosine {number(row[C.cosine], 6, missing='nan')} "
            f"of q * scale to the exact y; scale: {row['scale_outcome'] or 'not judged'}, "
            f"{number(row['call_scale_ratio'], 4, missing='nan')} x the contract's")


def judged(rows: pd.DataFrame, indent: str = "  ") -> list[str]:
    """The judge's own numbers on these calls: its scales against the contract's (scale_ratio, the
    share outside the legal bracket) and its q with its own scale (off_chain, NaN)."""
    calls = call_rows(rows)
    if calls.empty:
        return []
    n = len(calls)
    scales = calls[calls["scale_outcome"] != ""]
    q_caught = int(calls["q_outcome"].isin(DISAGREEING).sum())
    s_caught = int(scales["scale_outcome"].isin(DISAGREEING).sum())
    bad = int(calls[C.nan_count].sum() + calls[C.inf_count].sum())
    lines = []
    if len(scales):
        lines.append(f"{indent}its scale: {_span(scales['call_scale_ratio'], 4)} x the contract's (each case's median), "
                     f"{_span(scales['scale_off'], percent=True)} of a case's scales outside what a legal "
                     f"float32 pipeline gives; caught on {s_caught}/{len(scales)}")
    lines.append(f"{indent}its q, judged with its own scale: {_span(calls[C.off_chain], percent=True)} of a case's "
                 f"codes outside the legal ones, {bad} NaN or Inf; caught on {q_caught}/{n}")
    return lines


# ---- one element on the format's grid -------------------------------------------------------------

def grid(call: Call, indent: str = "    ") -> list[str]:
    """The format's grid around the call's worst element (module docstring)."""
    fmt, c = call.fmt, call.contract
    row, col = call.worst_element()
    block = col // (call.y.shape[-1] // call.scale.shape[-1])
    y = float(call.y[row, col])
    s_c, s_m = float(call.contract_scale[row, block]), float(call.scale[row, block])
    t_c, t_m = float(call.contract_quotient[row, col]), float(call.quotient[row, col])
    q_c, q_m, once = float(call.ref.q[row, col]), float(call.q[row, col]), float(call.once[row, col])
    d_c, d_m = float(call.contract_dequantized[row, col]), float(call.dequantized[row, col])
    where = f"row {row}, column {col}" + (f" (block {block})" if call.scale.shape[-1] > 1 else "")
    said = "its worst element" if call.steps[row, col] > 0 else "its largest quotient (every code the contract's)"
    wrote = f"q {_code(q_m)}{_clamped(t_m, c)}" if _same(q_m, once) else f"by the contract's rule {_code(once)}{_clamped(t_m, c)}; it wrote {_code(q_m)}"
    lines = [f"{indent}{fmt.name} around {said}: {where}, exact y = {precise(y)}",
             f"{indent}  contract  scale {_scale(s_c)}, y / scale = {_on_grid(y, s_c, t_c, fmt)} -> "
             f"q {_code(q_c)}{_clamped(t_c, c)}, q * scale {number(d_c, 4, missing='NaN')}",
             f"{indent}  mutant    scale {_scale(s_m)}, y / scale = {_on_grid(y, s_m, t_m, fmt)} -> "
             f"{wrote}, q * scale {number(d_m, 4, missing='NaN')}"]
    if s_c > 0 and precise(s_m / s_c) != "1":
        lines.append(f"{indent}  its scale is {precise(s_m / s_c)} x the contract's")
    if not np.isfinite(q_m) and s_m == 0:
        lines.append(f"{indent}  it wrote {_code(q_m)} where the contract writes {_code(q_c)} for a zero scale "
                     f"(0 / 0 without that guard is NaN)")
    elif not np.isfinite(q_m) and np.isfinite(once):
        lines.append(f"{indent}  it wrote {_code(q_m)} where y / its scale rounds to {_code(once)}"
                     + (f": {fmt.name} has no inf, and a cast past {general(overflow(fmt))} is NaN without the clamp"
                        if abs(t_m) > overflow(fmt) and fmt.overflow == "nan" else ""))
    elif np.isfinite(q_m):
        unit = float(fmt.spacing(max(abs(q_m), abs(once)))) if np.isfinite(once) else float("nan")
        off = abs(q_m - once) / unit if np.isfinite(once) else float("inf")
        step = float(call.contract_step[row, col])
        lo, hi = float(call.legal[0][row, col]), float(call.legal[1][row, col])
        legal = "inside" if lo <= q_m <= hi else "outside"
        lines.append(f"{indent}  in ULPs of {fmt.name}: its q is {number(off)} from what the contract's rule writes for y / its scale, "
                     f"{legal} the codes a legal float32 pipeline writes with its scale ({_code(lo)} .. {_code(hi)})")
        if step > 0 and abs(d_m - d_c) >= STEPS_SHOWN * step:
            nearer = "nearer 0 than" if abs(d_m) < abs(d_c) else "further from 0 than"
            lines.append(f"{indent}  its q * scale is {number(abs(d_m - d_c) / step, 4)} of the contract's steps {nearer} "
                         f"the contract's (a step there: {_code(float(fmt.spacing(q_c)))} x the contract's scale = "
                         f"{number(step, 4)})")
    return lines


def _on_grid(y: float, s: float, t: float, fmt: quant.QuantFormat) -> str:
    """A quotient and the format's values around it: '3.30078 (3.25 | 3.5)'."""
    if s == 0 and y == 0:
        return "0 / 0 (a zero scale)"
    return f"{precise(t)} ({neighbours(t, fmt)})"


def neighbours(t: float, fmt: quant.QuantFormat) -> str:
    """The format's representable values on either side of a quotient: '3.25 | 3.5', '448 | NaN
    beyond' past the max, 'on the grid' where it is one."""
    if np.isnan(t):
        return "no value: 0 / 0"
    beyond = {"nan": "NaN beyond", "inf": "inf beyond", "saturate": "nothing beyond"}[fmt.overflow]
    if t > fmt.max:
        return f"{_code(fmt.max)} | {beyond}"
    if t < fmt.low:
        return f"{beyond} | {_code(fmt.low)}"
    mag = abs(t)
    spacing = float(fmt.spacing(mag))
    low = np.floor(mag / spacing) * spacing
    if low == mag:
        return f"on the grid: {_code(t)}"
    high = low + spacing
    return f"{_code(low)} | {_code(high)}" if t > 0 else f"{_code(-high)} | {_code(-low)}"


def overflow(fmt: quant.QuantFormat) -> float:
    """The least magnitude an unclamped cast does not round to the max: the max plus half its
    spacing (464 for E4M3FN, 248 for E4M3FNUZ)."""
    return fmt.max + float(fmt.spacing(fmt.max)) / 2.0


def _clamped(t: float, contract) -> str:
    low, high = quantize.clamp_range(contract)
    return " (clamped)" if contract.saturate and not np.isnan(t) and (t > high or t < low) else ""


def _code(v: float) -> str:
    """A value of the format as printed, exactly: '448', '0.005859375', 'NaN', '-inf' (every value
    of these formats is a few bits times a power of two: 12 digits write each in full)."""
    return "NaN" if np.isnan(v) else number(v, 12)


def _past(t: np.ndarray, contract) -> np.ndarray:
    low, high = quantize.clamp_range(contract)
    with np.errstate(invalid="ignore"):
        return (t > high * (1 + PAST)) | (t < low * (1 + PAST))


def _same(a: float, b: float) -> bool:
    return a == b or (np.isnan(a) and np.isnan(b))


def _scale(s: float) -> str:
    """A scale, and as a power of two where it is one: '0.125 = 2^-3'."""
    if not np.isfinite(s) or s <= 0:
        return number(s, 4, missing="nan")
    mantissa, exponent = np.frexp(s)
    return number(s, 4) + (f" = 2^{int(exponent) - 1}" if mantissa == 0.5 else "")


# ---- where saturation bites -------------------------------------------------------------------------

def saturation(call: Call, changes=(), indent: str = "    ") -> list[str]:
    """Where the call's quotients pass the contract's max, with the mutant's scale and the
    contract's, and what the mutant wrote there. Empty where neither passes it, unless the bug
    turns a knob of the range (`changes`)."""
    fmt, c = call.fmt, call.contract
    high = quantize.clamp_range(c)[1]
    past, past_c = call.past, _past(call.contract_quotient, c)
    if not past.any() and not past_c.any() and not set(changes) & set(RANGE_KNOBS):
        return []
    limit = general(high) + ("" if high == fmt.max else f" (the contract's max; {fmt.name}'s is {general(fmt.max)})")
    lines = [f"{indent}Where saturation bites here ({call.y.size} elements, {fmt.name}):"]
    largest = _largest(call.quotient)
    if not past.any() and not past_c.any():
        return lines + [f"{indent}  no quotient |y / scale| passes {limit} with either scale (the largest with its "
                        f"scale: {precise(largest)}; with the contract's: {precise(_largest(call.contract_quotient))})"]
    lines.append(f"{indent}  with its scale {int(past.sum())} quotients |y / scale| pass {limit}, the largest "
                 f"{precise(largest)}; with the contract's scale {int(past_c.sum()) or 'none'}"
                 + (f", the largest {precise(_largest(call.contract_quotient))}" if past_c.any() else ""))
    if past.any():
        lines.append(f"{indent}  there it wrote {_values(call.q[past])}; the contract, with its own scale, "
                     f"{_values(call.ref.q[past])}")
        if np.isnan(call.q[past]).any() and fmt.overflow == "nan":
            lines.append(f"{indent}  ({fmt.name} has no inf: an unclamped cast rounds up to "
                         f"{general(overflow(fmt))} to {general(fmt.max)} and gives NaN past it)")
        finite = past & np.isfinite(call.q)
        if finite.any():
            with np.errstate(invalid="ignore", divide="ignore"):
                kept = call.dequantized[finite] / call.y[finite]
                kept_c = call.contract_dequantized[finite] / call.y[finite]
            lines.append(f"{indent}  its q * scale keeps {_span(kept, 3)} of y there (the contract's "
                         f"{_span(kept_c, 3)})")
    return lines


def _largest(t: np.ndarray) -> float:
    finite = np.abs(t[np.isfinite(t)])
    return float(finite.max()) if finite.size else float("nan")


def _values(q: np.ndarray) -> str:
    """What a set of codes is, in a few words: 'NaN for 27, +-448 for 17', or a range of magnitudes."""
    parts = []
    for name, mask in (("NaN", np.isnan(q)), ("inf", np.isinf(q))):
        if mask.any():
            parts.append(f"{name} for {int(mask.sum())}")
    finite = np.abs(q[np.isfinite(q)])
    values, counts = np.unique(finite, return_counts=True)
    if 0 < len(values) <= 3:
        signed = "+-" if (q[np.isfinite(q)] < 0).any() else ""
        parts += [f"{signed}{_code(v)} for {int(n)}" for v, n in sorted(zip(values, counts), key=lambda p: -p[1])]
    elif len(values):
        parts.append(f"magnitudes {_code(values[0])}-{_code(values[-1])} for {int(counts.sum())}")
    return ", ".join(parts)


def _span(values, digits: int = 3, percent: bool = False) -> str:
    """'lo-hi' of a set of numbers (one number where they agree); as percentages with `percent`."""
    v = np.asarray(pd.to_numeric(pd.Series(np.asarray(values).ravel()), errors="coerce"), dtype=np.float64)
    v = v[~np.isnan(v)]
    if not v.size:
        return "-"
    ends = [f"{number(100 * e, digits)}%" if percent else number(e, digits) for e in (v.min(), v.max())]
    return ends[0] if ends[0] == ends[1] else "-".join(ends)


# ---- the error against the block's amax -------------------------------------------------------------

@dataclass
class Blocks:
    """Every block of some calls, one entry each."""

    key: np.ndarray  # what the table bins by: amax / (the mutant's scale x max), or the amax
    key_name: str
    amax: np.ndarray
    ratio: np.ndarray  # the mutant's scale / the contract's
    scale_off: np.ndarray  # its scale outside the legal bracket (bool)
    past: np.ndarray  # quotients past the contract's max, with its scale (count)
    nan: np.ndarray  # NaN or inf codes (count)
    off: np.ndarray  # codes outside the legal ones with its own scale (count): the judge's off_chain
    err: np.ndarray  # sum of the squared error of q * scale against y (NaN or inf as 0, as rel_l2)
    err_c: np.ndarray  # the contract's
    energy: np.ndarray  # sum of y squared

    @property
    def error(self) -> np.ndarray:
        """Each block's relative error, the mutant's (NaN for a zero block)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.sqrt(self.err / self.energy)

    @property
    def contract_error(self) -> np.ndarray:
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.sqrt(self.err_c / self.energy)


def blocks(calls: list[Call]) -> Blocks:
    """The blocks of `calls`, measured (Blocks)."""
    parts = []
    for call in calls:
        c = call.contract
        by_block = partial(quantize.blocks, group=c.quant_group)  # (rows, blocks, n)
        amax = np.abs(by_block(call.y)).max(axis=-1)
        with np.errstate(invalid="ignore", divide="ignore"):
            fill = amax / (call.scale * c.quant_max)
            ratio = call.given / call.ref.scale
        off = quant_judge.outside_codes(call.q, *call.legal)
        past = call.past
        with np.errstate(invalid="ignore"):
            scale_off = ~((call.given >= call.ref.scale_lo) & (call.given <= call.ref.scale_hi))
        err = np.where(np.isfinite(call.dequantized), call.dequantized, 0.0) - call.y
        err_c = np.where(np.isfinite(call.contract_dequantized), call.contract_dequantized, 0.0) - call.y
        parts.append((fill, amax, ratio, scale_off, by_block(past).sum(-1), by_block(~np.isfinite(call.q)).sum(-1),
                      by_block(off).sum(-1), (by_block(err) ** 2).sum(-1), (by_block(err_c) ** 2).sum(-1),
                      (by_block(call.y) ** 2).sum(-1)))
    cols = [np.concatenate([np.ravel(p[i]) for p in parts]) for i in range(10)]
    fill, amax = cols[0], cols[1]
    live = np.isfinite(fill) & (amax > 0)
    spread = live.any() and fill[live].max() > SPREAD * fill[live].min()
    maxes = {general(call.contract.quant_max) for call in calls}
    name = f"amax / (its scale x {'/'.join(sorted(maxes))})" if spread else "block amax"
    return Blocks(fill if spread else amax, name, amax, *cols[2:])


def amax_table(calls: list[Call], indent: str = "  ") -> list[str]:
    """The blocks of `calls` binned by where their amax lands with the mutant's scale (or by the
    amax itself, where that is the same for every block), each bin's error (module docstring)."""
    if not calls:
        return []
    b = blocks(calls)
    fitted = "amax /" in b.key_name
    rows = _bins(b, fitted)
    head = (f"{indent}Error against the block's amax, over {len(calls)} calls ({b.key.size} blocks), binned by "
            + ("where each block's amax lands with its scale (1: at the max; above it saturates)" if fitted else
               "the block's amax (its scale puts every block's amax at the same place)") + ":")
    header = [b.key_name, "blocks", "its scale / contract's", "scales off", "past max", "NaN/inf", "codes off",
              "its error", "contract's"]
    table = [header] + rows
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    lines = [head]
    lines += [indent + "  " + "  ".join(cell.rjust(w) if i else cell.ljust(w) for i, (cell, w) in
                                        enumerate(zip(r, widths))).rstrip() for r in table]
    lines += [f"{indent}  (error: rel_l2 of q * scale to the exact y over the bin's blocks, NaN or inf counted as 0;",
              f"{indent}  codes off: outside what a legal float32 pipeline writes with its own scale, as the judge counts)"]
    return lines


def _bins(b: Blocks, fitted: bool) -> list[list[str]]:
    live = np.isfinite(b.key) & (b.amax > 0)
    rows = []
    if (~live).any():
        rows.append(_bin_row(b, ~live, "amax 0" if (b.amax[~live] == 0).all() else "no scale"))
    if not live.any():
        return rows
    key = b.key[live]
    edges = np.unique(np.quantile(key, np.linspace(0.0, 1.0, BINS + 1)))
    at_max = 1.0 + PAST  # (a block at the max with a float32 scale may land a hair past 1)
    if fitted and key.min() < at_max < key.max():
        edges = np.unique(np.append(edges, at_max))
    index = np.clip(np.searchsorted(edges, b.key, side="left") - 1, 0, max(len(edges) - 2, 0))
    for i in range(max(len(edges) - 1, 1)):
        inside = live & (index == i)
        if inside.any():
            lo, hi = b.key[inside].min(), b.key[inside].max()
            rows.append(_bin_row(b, inside, number(lo) if lo == hi else f"{number(lo)}-{number(hi)}"))
    return rows


def _bin_row(b: Blocks, inside: np.ndarray, label: str) -> list[str]:
    with np.errstate(invalid="ignore", divide="ignore"):
        error = np.sqrt(b.err[inside].sum() / b.energy[inside].sum())
        error_c = np.sqrt(b.err_c[inside].sum() / b.energy[inside].sum())
    return [label, str(int(inside.sum())), _span(b.ratio[inside], 3), str(int(b.scale_off[inside].sum())),
            str(int(b.past[inside].sum())), str(int(b.nan[inside].sum())), str(int(b.off[inside].sum())),
            number(error, missing="-"), number(error_c, missing="-")]


def amax_points(calls: list[Call]) -> dict:
    """What the plot's amax panel draws: {"xlabel", "max" (1 where x is amax / (scale x max), else
    None), "mutant": (x, error), "contract": (x, error)}, one point per block with a nonzero amax."""
    b = blocks(calls)
    live = np.isfinite(b.key) & (b.amax > 0)
    return {"xlabel": b.key_name, "max": 1.0 if "amax /" in b.key_name else None,
            "mutant": (b.key[live], b.error[live]), "contract": (b.key[live], b.contract_error[live])}
