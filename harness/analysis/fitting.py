"""Diagnosis by fitting numbers: what eps, what per-channel scale and what statistic do an
implementation's outputs imply?

The knob search (diagnosis.py) names discrete mistakes; continuous ones need a number. For every
normalised span (a row, or a head of a row) the outputs give the denominator the code really divided
by: y_i = x_i * s_i * g_i / D, so D = median(x_i s_i g_i / y_i) over the span's larger elements
(s the scale, g the gate after the norm). Then
  - the effective eps is D^2 - stat, read on spans where eps moves D by more than the output's
    rounding can hide, and compared with relations a real bug produces: the case's own eps, one
    constant whatever the case says (an ignored eps argument; named when it is a library default),
    eps times the width (eps added to the mean where the sum is meant), eps times max|x|^2 (an
    anti-overflow rescale), eps outside the square root, no eps;
  - the effective per-channel scale is the median over spans of y_i D / (x_i g_i), compared with w,
    1 + w, 2 + w and 1 + w rounded to the input dtype;
  - the effective statistic is D^2 - eps, compared with mean(x^2), sum(x^2) and the variance.
A fit is reported only when another relation explains clearly more spans (or channels) than the
convention's own, and it says how many. Ops that rotate after the norm are not fitted (the rotation
mixes channel pairs): the knob search covers them.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from normdiff.harness.data.bugs import LIBRARY_EPS
from normdiff.harness.data.dtypes import get_format
from normdiff.text import general, number

MIN_FRACTION = 0.8  # of the informative spans (or channels) a relation must explain to be said
MIN_SPANS = 3

# library defaults an ignored eps argument often is
KNOWN_EPS = {1e-5: "Llama 2/3's and Mistral's config value", 1e-6: "the HF default (Qwen, Gemma, OLMo2 configs; keras layers.RMSNormalization and flax RMSNorm "
                   "default to it too)", **LIBRARY_EPS}


@dataclass
class Fit:
    kind: str  # "eps" | "scale" | "statistic"
    relation: str  # which relation fits ("constant", "width", "max_square", "outside", "none", "factor", ...)
    says: str  # one line for a person
    matched: int  # spans (or channels) the relation explains
    of: int  # informative spans (or channels)
    value: float | None = None

    def as_dict(self) -> dict:
        return {"kind": self.kind, "relation": self.relation, "says": self.says, "matched": self.matched,
                "of": self.of, "value": self.value}


@dataclass
class _Spans:
    """One case's spans: everything a fit needs, float64, shape (spans, span width)."""

    x: np.ndarray  # what the norm normalises (x, or x * act(gate) for gate-then-norm)
    y: np.ndarray  # the output
    scale: np.ndarray  # the convention's per-channel scale (offset + w; 1 without a weight)
    weight: np.ndarray | None  # w itself, for the scale candidates
    post: np.ndarray  # what multiplies after the norm (the gate, or 1)
    eps: float
    statistic: str
    rel_precision: float  # the output dtype's half ulp, relative
    dtype: str


def _act(z, kind: str):
    return z / (1.0 + np.exp(-z)) if kind == "silu" else 1.0 / (1.0 + np.exp(-z))


def spans(case, inputs, out) -> _Spans | None:
    """The case as spans, or None for an op the fits do not read (one that rotates)."""
    c = case.contract
    if c.record.applies("rope_order"):
        return None
    a = inputs.arrays
    x = np.asarray(a["x"], dtype=np.float64)
    y = np.asarray(out, dtype=np.float64)
    if y.shape != x.shape:
        return None
    width = x.shape[-1]
    post = np.ones_like(x)
    if "gate" in a:
        g = _act(np.asarray(a["gate"], dtype=np.float64), c.gate_activation)
        x, post = (x * g, post) if c.gate_order == "gate_then_norm" else (x, g)
    weight = None
    scale = np.ones(width)
    if "weight" in a:
        weight = _widened(np.asarray(a["weight"], dtype=np.float64), width)
        scale = c.weight_offset + weight
    n = case.span
    as_spans = lambda v: np.broadcast_to(v, x.shape).reshape(-1, n)  # noqa: E731
    xs, ys = as_spans(x), as_spans(y)
    if c.centre:  # a LayerNorm: what it divides is x - mean(x), and its output carries the bias on top
        xs = xs - xs.mean(axis=-1, keepdims=True)
        if "bias" in a and c.bias_order == "after_scale":
            ys = ys - as_spans(_widened(np.asarray(a["bias"], dtype=np.float64), width))
    fmt = get_format(case.dtype)
    return _Spans(xs, ys, as_spans(scale), None if weight is None else as_spans(weight),
                  as_spans(post), c.eps, c.statistic, 2.0 ** -(fmt.mantissa_bits + 1), case.dtype)


def _widened(v: np.ndarray, width: int) -> np.ndarray:
    """A per-head operand (weight, bias) across the whole row."""
    return v if v.shape[-1] == width else np.tile(v, width // v.shape[-1])


def _statistic(x: np.ndarray, kind: str) -> np.ndarray:
    if kind == "sum_square":
        return np.sum(x * x, axis=-1)
    if kind == "variance":
        return np.var(x, axis=-1)
    return np.mean(x * x, axis=-1)


def denominators(s: _Spans, scale: np.ndarray | None = None):
    """Per span: the denominator D the output implies (with `scale`, default the convention's),
    its relative uncertainty, and whether it could be read at all."""
    scale = s.scale if scale is None else scale
    num = s.x * scale * s.post
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = num / s.y
    big = np.abs(num) >= np.median(np.abs(num), axis=-1, keepdims=True)
    usable = big & np.isfinite(ratio) & (s.y != 0) & (ratio > 0)
    d = np.array([np.median(r[u]) if u.sum() >= 4 else np.nan for r, u in zip(ratio, usable)])
    spread = s.rel_precision * 2.0 / np.sqrt(np.maximum(usable.sum(-1), 1))  # median of roundings
    return d, spread


def fit_eps(items: list[_Spans]) -> Fit | None:
    rows = []  # (effective eps, uncertainty, case eps, stat, width, max x^2)
    for s in items:
        d, rel = denominators(s)
        stat = _statistic(s.x, s.statistic)
        eff = d * d - stat
        sigma = 2.0 * d * d * rel + 4.0 * 2.0 ** -24 * stat  # the output's rounding, float32 noise
        peak = np.max(s.x * s.x, axis=-1)
        for e, sg, st, pk in zip(eff, sigma, stat, peak):
            if np.isfinite(e) and st > 0 and sg < 0.25 * max(s.eps, abs(e)):
                rows.append((e, sg, s.eps, st, s.x.shape[-1], pk))
    if len(rows) < MIN_SPANS:
        return None
    eff, sigma, eps, stat, width, peak = (np.array(v, dtype=np.float64) for v in zip(*rows))
    constant = float(np.median(eff))
    known = min(KNOWN_EPS, key=lambda k: abs(np.log(k / constant)) if constant > 0 else np.inf)
    factor = float(np.median(eff / eps))
    relations = {
        "case": eps,
        "none": np.zeros_like(eps),
        "outside": 2.0 * eps * np.sqrt(stat) + eps * eps,
        "width": eps * width,
        "per_width": eps / width,
        "max_square": eps * peak,
        "constant": np.full_like(eps, known if abs(known / constant - 1) < 0.05 else constant)
        if constant > 0 else np.full_like(eps, constant),
        "factor": eps * factor,
    }
    scores = {name: int(np.sum(np.abs(eff - pred) <= 3 * sigma + 0.1 * np.abs(pred))) for name, pred in relations.items()}
    best = max(relations, key=lambda k: (scores[k], -list(relations).index(k)))
    if best == "case" or scores[best] < MIN_FRACTION * len(rows) or scores[best] <= scores["case"] + 1:
        return None
    return Fit("eps", best, _eps_text(best, relations[best], eps, width, constant, factor, known),
               scores[best], len(rows), float(np.median(relations[best])))


def _eps_text(relation, predicted, eps, width, constant, factor, known) -> str:
    case_eps = ", ".join(general(e) for e in sorted(set(eps)))
    widths = sorted(set(int(w) for w in width))
    if relation == "constant":
        value = float(np.median(predicted))
        name = KNOWN_EPS.get(value)
        return (f"your eps behaves like {number(value)} on every case, whatever its eps ({case_eps}): the eps "
                f"argument is ignored" + (f"; {general(value)} is {name}" if name else ""))
    if relation == "width":
        w, e = widths[0], float(np.min(eps))
        where = f"on every width ({', '.join(map(str, widths))})" if len(widths) > 1 else f"at width {w}"
        return (f"your eps behaves like n x eps (e.g. {number(w * e)} = {w} x {general(e)}) {where}: eps is added "
                f"to the mean where the sum is meant")
    if relation == "per_width":
        return "your eps behaves like eps / n: eps is added to the sum where the mean is meant"
    if relation == "max_square":
        return ("your eps grows with max|x|^2: an anti-overflow rescale (x / max|x| around the statistic) "
                "turns eps into eps * max|x|^2")
    if relation == "outside":
        return "your eps acts outside the square root: x / (sqrt(stat) + eps)"
    if relation == "none":
        return "your eps is 0: no eps at all (an all-zero row gives 0/0)"
    return f"your eps behaves like {number(factor)} x the case's eps ({case_eps})"


def fit_scale(items: list[_Spans]) -> Fit | None:
    """The per-channel scale, on spans where eps does not matter, from cases with a weight."""
    usable = [s for s in items if s.weight is not None and s.x.shape[0] >= 4]
    if not usable:
        return None
    counts, total = {}, 0
    names = ("w", "1 + w", "2 + w", "1 + w rounded to the input dtype")
    for s in usable:
        stat = _statistic(s.x, s.statistic)
        quiet = stat > 100.0 * s.eps  # eps moves D by < 0.5 %: below what a scale mistake shows
        if quiet.sum() < 4:
            continue
        d = np.sqrt(stat[quiet] + s.eps)[:, None]
        with np.errstate(divide="ignore", invalid="ignore"):
            measured = s.y[quiet] * d / (s.x[quiet] * s.post[quiet])
        per_channel = np.nanmedian(np.where(np.abs(s.x[quiet]) > 0, measured, np.nan), axis=0)
        w = s.weight[0]
        low = get_format(s.dtype).round(1.0 + w)
        candidates = dict(zip(names, (w, 1.0 + w, 2.0 + w, low)))
        tol = 4.0 * s.rel_precision / np.sqrt(quiet.sum()) + 2.0 ** -20
        ok = np.isfinite(per_channel) & (np.abs(w) > 1e-3)
        for name, cand in candidates.items():
            close = np.abs(per_channel - cand) <= tol * np.maximum(np.abs(cand), 1e-30)
            counts[name] = counts.get(name, 0) + int(np.sum(close & ok))
        total += int(ok.sum())
    if not total:
        return None
    claimed = _claimed_scale(usable[0])
    top = max(counts.values())
    # the simplest candidate that explains about as many channels as the best (1 + w rounded to
    # the dtype is 1 + w wherever the rounding is exact)
    best = next(k for k in names if counts[k] >= top - max(2, 0.02 * total))
    if best == claimed or counts[best] < MIN_FRACTION * total or counts[best] <= counts.get(claimed, 0) + 2:
        return None
    return Fit("scale", best, f"your per-channel scale is {best} (on {counts[best]} of {total} channels), where "
                              f"the convention multiplies by {claimed}", counts[best], total)


def _claimed_scale(s: _Spans) -> str:
    offset = float(np.median(s.scale[0] - s.weight[0]))
    return {0.0: "w", 1.0: "1 + w", 2.0: "2 + w"}.get(round(offset, 6), f"{general(offset)} + w")


def fit_statistic(items: list[_Spans]) -> Fit | None:
    counts = {"mean_square": 0, "sum_square": 0, "variance": 0}
    total, claimed = 0, items[0].statistic if items else "mean_square"
    for s in items:
        d, rel = denominators(s)
        implied = d * d - s.eps
        for kind in counts:
            stat = _statistic(s.x, kind)
            close = np.abs(implied - stat) <= (4.0 * rel * d * d + 1e-6 * stat)
            counts[kind] += int(np.sum(close & np.isfinite(implied) & (stat > 100.0 * s.eps)))
        total += int(np.sum(np.isfinite(implied) & (_statistic(s.x, claimed) > 100.0 * s.eps)))
    best = max(counts, key=counts.get)
    if not total or best == claimed or counts[best] < MIN_FRACTION * total or counts[best] <= counts[claimed] + 2:
        return None
    words = {"mean_square": "the mean of x^2", "sum_square": "the sum of x^2", "variance": "the variance"}
    return Fit("statistic", best, f"you normalise by {words[best]} (on {counts[best]} of {total} spans), where the "
                                  f"convention uses {words[claimed]}", counts[best], total)


def fit(examined) -> list[Fit]:
    """`examined`: (case, inputs, output) triples of the disagreeing cases. The fits that say
    something the convention's own relation does not explain."""
    items = [s for s in (spans(c, i, o) for c, i, o in examined) if s is not None]
    if not items:
        return []
    return [f for f in (fit_eps(items), fit_scale(items), fit_statistic(items)) if f is not None]
