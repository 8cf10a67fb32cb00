"""`normdiff weights CHECKPOINT [--against ORIGINAL]`: what a checkpoint's norm weights are, and
what a conversion did to them.

Per norm tensor: its statistics, the storage they suggest (zero-centred w with a gain of 1 + w,
whose trained values sit around 0 and go negative; or a plain gain w, around 1 and positive), the
storage its HF class expects (from config.json: the family table's contract, 1 + w or w), and for a
zero-centred tensor how many of its gains 1 + w change when folded into bf16 (the seed's example:
bf16 stores 1 + 0.001 as 1.0, while 0.001 itself as 0.000999).

Against the original, each tensor's change is read elementwise: the same values, + 1, + 2, or
anything else, each within one rounding to the converted dtype. A conversion folds the +1 of the
zero-centred tensors for a runtime that multiplies by w, or leaves them all as they are; so, with
the original's classes (or, without a config, its statistics) saying which tensors are
zero-centred: a zero-centred one left as it is while others were folded is "fold missing", one
folded twice "double-folded" (as GGUF conversions have shipped), a plain gain folded "fold where
none belongs" (Qwen3.5's gated norm stays plain: llama.cpp's converter leaves
linear_attn.norm.weight out), and a norm tensor the conversion dropped "missing". Exit 1 for any
of those, 0 otherwise; a changed dtype is reported, not an error.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from normdiff.harness.commands import checkpoint as ckpt
from normdiff.harness.data.dtypes import get_format

ZERO_CENTRED, PLAIN, UNCLEAR = "zero-centred (1 + w)", "plain (w)", "unclear"
NONFINITE = "NaN or Inf"  # a verdict with or without an original: a norm gain no token passes unharmed
WRONG = ("fold missing", "double-folded", "fold where none belongs", "missing", "changed", NONFINITE)


@dataclass
class NormWeight:
    name: str
    dtype: str
    shape: tuple[int, ...]
    mean: float
    min: float
    max: float
    std: float
    looks: str  # the storage the statistics suggest
    expects: str = ""  # the storage its class expects ("" without a config)
    cls: str = ""
    bf16_gains_changed: int | None = None  # zero-centred: gains 1 + w that bf16 does not hold exactly
    bf16_gain_max_rel: float | None = None
    change: str = ""  # against an original: same | +1 | +2 | changed | missing | new
    original_name: str = ""  # against an original whose names differ (a GGUF from HF): the tensor there
    verdict: str = ""  # against an original: ok | fold missing | double-folded | ...; NaN or Inf always
    nonfinite: int = 0  # values that are NaN or Inf (the statistics are the finite ones')

    def as_dict(self) -> dict:
        return dict(vars(self), shape=list(self.shape))


@dataclass
class WeightsReport:
    checkpoint: str
    model_type: str
    weights: list[NormWeight]
    original: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def wrong(self) -> list[NormWeight]:
        return [w for w in self.weights if w.verdict in WRONG]

    @property
    def exit_code(self) -> int:
        return 1 if self.wrong else 0

    def as_dict(self) -> dict:
        return {"checkpoint": self.checkpoint, "original": self.original, "model_type": self.model_type,
                "weights": [w.as_dict() for w in self.weights], "wrong": len(self.wrong), "notes": self.notes,
                "exit_code": self.exit_code}


def storage_suggested(values: np.ndarray) -> str:
    """Zero-centred when the values go negative or sit around 0 (a gain 1 + w of trained weights,
    e.g. Qwen3.5 layer 0's [-0.11, 1.00] around 0.24, its final norm's [-0.78, 5.31]); plain when
    they are all positive around 1 or above. A plain gain rarely goes negative (it would flip the
    feature); the rest is a judgement, which the class's expectation (`expects`) settles."""
    if values.size == 0:
        return UNCLEAR
    median = float(np.median(values))
    if values.min() < 0 or abs(median) < 0.5:
        return ZERO_CENTRED
    return PLAIN if median >= 0.5 else UNCLEAR


def _expects(holder) -> str:
    if holder is None or holder.offset is None:
        return ""
    return ZERO_CENTRED if holder.offset == 1.0 else PLAIN


def describe_tensor(t: ckpt.Tensor, holder=None) -> NormWeight:
    """A tensor's statistics and storage. NaN or Inf in a norm's gain is the checkpoint's defect
    (every token through that norm turns NaN): it is counted and judged wrong (exit 1), and the
    statistics describe the finite values, so the rest of the report still reads."""
    everything = t.values.ravel()
    v = everything[np.isfinite(everything)]
    stats = (float(v.mean()), float(v.min()), float(v.max()), float(v.std())) if v.size else (float("nan"),) * 4
    w = NormWeight(t.name, t.dtype, t.shape, *stats, storage_suggested(v), _expects(holder),
                   holder.cls if holder else "", nonfinite=int(everything.size - v.size))
    if (w.expects or w.looks) == ZERO_CENTRED:
        bf16 = get_format("bfloat16")
        gains = 1.0 + v
        folded = bf16.round(gains)
        w.bf16_gains_changed = int(np.count_nonzero(folded != gains))
        with np.errstate(divide="ignore", invalid="ignore"):
            rel = np.abs(folded - gains) / np.abs(gains)
        w.bf16_gain_max_rel = float(np.nanmax(np.where(gains != 0, rel, 0.0)))
    return w


GGUF_HOLDER = ckpt.Holder("", "llama.cpp", offset=0.0)  # its norms multiply by the stored w (folds at conversion)


def norm_tensors(checkpoint: str) -> tuple[dict[str, ckpt.Tensor], dict, str]:
    """(tensors, {name: Holder}, model type) of a checkpoint's norms, in one read: the tensors of
    its model's norm modules (config.json) and those named as norms."""
    holders, model_type = ckpt.holders(checkpoint)
    tensors = ckpt.read(checkpoint, lambda name, shape: name in holders or ckpt.named_as_norm(name, shape))
    return tensors, holders, model_type


def analyse(checkpoint: str, against: str | None = None) -> WeightsReport:
    tensors, holders, model_type = norm_tensors(checkpoint)
    if ckpt.is_gguf(checkpoint):
        holders, model_type = {name: GGUF_HOLDER for name in tensors}, "gguf"
    report = WeightsReport(str(checkpoint), model_type,
                           [describe_tensor(t, holders.get(n)) for n, t in sorted(tensors.items())])
    if not holders:
        report.notes.append("no config.json beside the checkpoint: norm tensors found by name, and their storage "
                            "judged by their statistics alone")
    if against is not None:
        compare(report, tensors, against)
    for w in report.weights:
        if w.nonfinite:
            w.verdict = NONFINITE
    return report


# ---- against the original --------------------------------------------------------------------------

def change_of(original: ckpt.Tensor, converted: ckpt.Tensor) -> str:
    """same, +1 or +2 when every element of `converted` is the original's (plus that) within one
    rounding to the coarser of the two dtypes (a fold may be rounded in the original's dtype before
    a cast); changed otherwise."""
    if original.shape != converted.shape:
        return "changed"
    formats = [get_format(ckpt.FLOAT_CODES[t.dtype]) for t in (original, converted)]
    for k, name in ((0.0, "same"), (1.0, "+1"), (2.0, "+2")):
        target = original.values + k
        magnitude = np.maximum(np.abs(target), np.abs(converted.values))
        ulp = np.maximum(*(fmt.ulp(magnitude) for fmt in formats))
        if np.all(np.abs(converted.values - target) <= ulp):
            return name
    return "changed"


def compare(report: WeightsReport, tensors: dict[str, ckpt.Tensor], against: str) -> None:
    """Each tensor's change against the original and its verdict (the module's rule); `tensors`:
    the converted checkpoint's norm tensors."""
    originals, held, _ = norm_tensors(against)
    report.original = str(against)
    # a GGUF converted from an HF checkpoint names its tensors as llama.cpp's converter does
    renamed = ckpt.gguf_names(report.checkpoint, originals) if ckpt.is_gguf(report.checkpoint) and \
        not ckpt.is_gguf(against) else {}
    by_name = {w.name: w for w in report.weights}
    zero_centred = {}
    for name, t in originals.items():
        expects = _expects(held.get(name)) or storage_suggested(t.values.ravel())
        there = renamed.get(name, name)
        zero_centred[there] = expects == ZERO_CENTRED
        if there not in by_name:
            report.weights.append(NormWeight(name, t.dtype, t.shape, *(float("nan"),) * 4, "", change="missing",
                                             verdict="missing"))
            continue
        w = by_name[there]
        w.change = change_of(t, tensors[there])
        if there != name:
            w.original_name = name
        if w.dtype != t.dtype:
            report.notes.append(f"{there}: dtype {t.dtype} -> {w.dtype}")
    folds = any(w.change == "+1" and zero_centred.get(w.name) for w in report.weights)
    for w in report.weights:
        if w.verdict == "missing":
            continue
        if w.name not in zero_centred:
            w.change = w.verdict = "new"
            continue
        w.verdict = _verdict(w.change, zero_centred[w.name], folds)
    report.notes.append("the conversion folds the +1 of zero-centred norms" if folds else
                        "the conversion leaves zero-centred norms as they are (a runtime must add the 1)")


def _verdict(change: str, zero_centred: bool, folds: bool) -> str:
    if change == "changed":
        return "changed"
    if change == "+2":
        return "double-folded"
    if not zero_centred:
        return "fold where none belongs" if change == "+1" else "ok"
    if folds and change == "same":
        return "fold missing"
    return "ok"


# ---- text ------------------------------------------------------------------------------------------

def describe(report: WeightsReport) -> str:
    from normdiff.text import number, printable

    def one(value) -> str:
        return printable(value, newlines=False)

    head = f"normdiff weights {one(report.checkpoint)}" + (f" against {one(report.original)}" if report.original else "")
    lines = [head + (f" ({one(report.model_type)})" if report.model_type else "")]
    for w in report.weights:
        if w.verdict == "missing":
            lines.append(f"  {one(w.name)}: MISSING from the converted checkpoint")
            continue
        stats = (f"{w.dtype} {'x'.join(map(str, w.shape))}  mean {number(w.mean)}  range [{number(w.min)}, "
                 f"{number(w.max)}]  std {number(w.std)}")
        storage = f"looks {w.looks}" + (f", {one(w.cls)} expects {w.expects}" if w.expects else "")
        if w.expects and w.expects != w.looks:
            storage += "  <- the statistics do not look like what the class expects"
        was = f"  (from {one(w.original_name)})" if w.original_name else ""
        lines.append(f"  {one(w.name)}{was}\n      {stats}\n      {storage}")
        if w.nonfinite:
            lines.append(f"      {w.nonfinite} of {int(np.prod(w.shape))} values are NaN or Inf (the statistics are the "
                         "finite ones'): every token through this norm would turn NaN  ->  NAN OR INF")
        if w.bf16_gains_changed is not None:
            lines.append(f"      1 + w in bf16: {w.bf16_gains_changed} of {int(np.prod(w.shape))} gains change "
                         f"(at most {number(w.bf16_gain_max_rel)} relative)")
        if w.change:
            lines.append(f"      against the original: {w.change}" + (f"  ->  {w.verdict.upper()}"
                                                                        if w.verdict in WRONG else ""))
    lines += [f"  note: {one(n)}" for n in report.notes]
    broken = [w for w in report.weights if w.nonfinite]
    if broken and not report.original:
        lines.append(f"{len(broken)} norm tensor{'s hold' if len(broken) != 1 else ' holds'} NaN or Inf")
    if report.original:
        bad = report.wrong
        lines.append(f"{len(bad)} norm tensor{'s' if len(bad) != 1 else ''} converted wrong" if bad else
                     "every norm tensor converted consistently")
    return "\n".join(lines)
