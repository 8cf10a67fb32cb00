"""Judge one implementation's output against the oracle: error figures, detectors, outcome.

Outcomes (ordered from best to worst):
  identical     every element equals the correctly rounded reference
  agree         within the dtype's ULP budget everywhere
  disagree      finite, beyond the budget somewhere
  nan_mismatch  NaN/Inf where the (rounded) reference has none, or the reverse
  error         the implementation raised, or returned something unusable (shape, dtype)
  crashed       its worker process died
  timeout       it did not return within the per-call limit
  unsupported   it does not implement this (op, convention)
  unavailable   its framework or class is not installed here
Detectors are the catalogue's: they see what max-abs and cosine miss (a constant rescale, a per-head
RMS error, a coherent per-row or per-channel bias, outputs flushed to zero).
"""
from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass

import numpy as np

from normdiff.harness.budgets import channel_bias_budget
from normdiff.harness.dtypes import FloatFormat, format_of

OUTCOMES = ("identical", "agree", "disagree", "nan_mismatch", "error", "crashed", "timeout",
            "unsupported", "unavailable")
PASSING = ("identical", "agree")
NOT_RUN = ("unsupported", "unavailable")


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
    # plausibility: what a quick look would say (the mutants look right by these)
    cosine: float = float("nan")  # cosine similarity to the reference
    rms_ratio: float = float("nan")  # rms(out) / rms(ref)
    assert_close: bool | None = None  # would torch.testing.assert_close's default tolerances pass?
    output_dtype: str = ""
    output_digest: str = ""
    detail: str = ""

    def as_row(self) -> dict:
        return asdict(self)


def failure(outcome: str, detail: str) -> Measurement:
    return Measurement(outcome=outcome, detail=detail)


def digest(array: np.ndarray) -> str:
    """A short hash of the output's bits: equal digests mean bit-identical outputs."""
    return hashlib.blake2b(np.ascontiguousarray(array).tobytes(), digest_size=8).hexdigest()


def judge(out, ref: np.ndarray, fmt: FloatFormat, budget: float, num_heads: int = 1) -> Measurement:
    """Compare `out` (any array the implementation returned) with the float64 reference."""
    out = np.asarray(out)
    if out.shape != ref.shape:
        return failure("error", f"wrong-shaped output {out.shape}; expected {ref.shape} (the shape of x)")
    try:
        out_fmt = format_of(out)
    except ValueError as exc:
        return failure("error", str(exc))
    m = Measurement(outcome="", tolerance_ulp=budget, output_dtype=out_fmt.name, output_digest=digest(out))
    if out_fmt.name != fmt.name:
        m.detail = f"returns {out_fmt.name} for {fmt.name} input"
    o = out.astype(np.float64)
    rounded = fmt.round(ref)
    m.nan_count, m.inf_count = int(np.isnan(o).sum()), int(np.isinf(o).sum())
    finite = np.isfinite(o)
    if not np.array_equal(finite, np.isfinite(rounded)) or not np.array_equal(o[~finite], rounded[~finite], equal_nan=True):
        m.outcome = "nan_mismatch"
        bad = int((finite != np.isfinite(rounded)).sum())
        m.detail = f"{bad} element(s) non-finite in one of output/reference only ({m.nan_count} NaN, {m.inf_count} Inf in output)"
    _errors(m, o, ref, fmt, finite, num_heads)
    if not m.outcome:
        if np.array_equal(o[finite], rounded[finite]):
            m.outcome = "identical"
        else:
            m.outcome = "agree" if m.max_ulp <= budget else "disagree"
    _judge_channel_bias(m, ref)
    return m


def _judge_channel_bias(m: Measurement, ref: np.ndarray) -> None:
    rows = int(np.prod(ref.shape[:-1]))
    limit = channel_bias_budget(rows)
    if limit is None:
        return
    m.channel_bias_budget = limit
    if m.outcome == "agree" and m.channel_bias_ulp > limit:
        m.outcome = "disagree"
        m.detail = (f"coherent per-channel scale error: a channel's mean error is {m.channel_bias_ulp:.2f} ulp "
                    f"over {rows} rows (budget {limit:.2f}), while every element is within {m.max_ulp:.2f} ulp")


def _errors(m: Measurement, o: np.ndarray, ref: np.ndarray, fmt: FloatFormat, finite, num_heads) -> None:
    ok = finite & np.isfinite(ref)
    if not ok.any():
        return
    diff = np.where(ok, o - ref, 0.0)
    ulps = diff / fmt.ulp(ref)
    abs_ulps = np.abs(ulps[ok])
    m.max_ulp = float(abs_ulps.max())
    m.p99_ulp = float(np.percentile(abs_ulps, 99))
    m.max_abs = float(np.abs(diff).max())
    # sums of squares rather than np.linalg.norm: BLAS dot is slow under this machine's
    # OPENBLAS_CORETYPE setting, and these are small arrays
    diff_norm = float(np.sqrt(np.sum(diff * diff)))
    ref_ok = np.where(ok, ref, 0.0)
    ref_norm = float(np.sqrt(np.sum(ref_ok * ref_ok)))
    m.rel_l2 = diff_norm / ref_norm if ref_norm else diff_norm
    m.zero_excess = float(((o == 0) & (ref != 0) & ok).mean())
    _plausibility(m, np.where(ok, o, 0.0), ref_ok, o, ref, fmt)
    _ratio(m, o, ref, ok)
    # signed by the reference: a coherent scale error (low-precision statistics, bf16(1 + w))
    # shows as a mean away from 0, while correct rounding averages out
    _biases(m, np.where(ok, ulps * np.sign(ref), 0.0), ok)
    _span_rms(m, np.where(ok, o, 0.0), np.where(ok, ref, 0.0), num_heads)


# torch.testing.assert_close's default (rtol, atol) per dtype, from its documentation; the test
# tests/harness/test_compare.py checks this copy against torch itself
ASSERT_CLOSE_DEFAULTS = {"float32": (1.3e-6, 1e-5), "bfloat16": (1.6e-2, 1e-5), "float16": (1e-3, 1e-5),
                         "float64": (1e-7, 1e-7)}


def _plausibility(m: Measurement, o_ok, ref_ok, o, ref, fmt: FloatFormat) -> None:
    norms = np.sqrt(np.sum(o_ok * o_ok)) * np.sqrt(np.sum(ref_ok * ref_ok))
    m.cosine = float(np.sum(o_ok * ref_ok) / norms) if norms else float("nan")
    ref_rms = np.sqrt(np.mean(ref_ok * ref_ok))
    m.rms_ratio = float(np.sqrt(np.mean(o_ok * o_ok)) / ref_rms) if ref_rms else float("nan")
    # assert_close(actual=out, expected=a correct output: the reference rounded to the dtype),
    # judged on values alone (its check_dtype is left out: output_dtype records that)
    rtol, atol = ASSERT_CLOSE_DEFAULTS[fmt.name]
    expected = fmt.round(ref)
    with np.errstate(invalid="ignore"):
        close = np.abs(o - expected) <= atol + rtol * np.abs(expected)
    close |= o == expected  # equal infinities pass; NaN never does (equal_nan=False)
    m.assert_close = bool(close.all())


def _ratio(m: Measurement, o, ref, ok) -> None:
    big = ok & (np.abs(ref) > 1e-30)
    if big.sum() >= 2:
        ratio = o[big] / ref[big]
        lo, med, hi = np.percentile(ratio, [1, 50, 99])
        m.scale_ratio = float(med)
        m.ratio_spread = float((hi - lo) / abs(med)) if med else float("inf")


def _biases(m: Measurement, ulps, ok) -> None:
    flat = ulps.reshape(-1, ulps.shape[-1])
    mask = ok.reshape(flat.shape)
    with np.errstate(invalid="ignore", divide="ignore"):
        rows = flat.sum(-1) / mask.sum(-1)
        cols = flat.sum(0) / mask.sum(0)
    m.row_bias_ulp = float(np.nanmax(np.abs(rows))) if np.isfinite(rows).any() else float("nan")
    m.channel_bias_ulp = float(np.nanmax(np.abs(cols))) if np.isfinite(cols).any() else float("nan")


def _span_rms(m: Measurement, o, ref, num_heads) -> None:
    spans = o.shape[-1] // num_heads if o.shape[-1] % num_heads == 0 else o.shape[-1]
    shape = (-1, spans)
    rms_o = np.sqrt(np.mean(o.reshape(shape) ** 2, -1))
    rms_r = np.sqrt(np.mean(ref.reshape(shape) ** 2, -1))
    live = rms_r > 0
    if live.any():
        m.span_rms_err = float(np.max(np.abs(rms_o[live] / rms_r[live] - 1.0)))
