"""Diagnosis: which wrong contract does a disagreeing implementation actually compute?

Two views of the same outputs.

The knob search. Conventions and bugs share one knob space, so it is a search: every single-knob
variant of the convention's contract (the catalogued bugs among them), the other conventions'
contracts for the op, and pairs of single changes (those that explain the most cases, or that
bring the output nearest when none explains any: a two-change bug's halves may each explain nothing). Each candidate is computed on every
examined case, at that case's own eps, by our NumPy implementation (which honours every knob,
rounding knobs included), and explains a case when it lands within the budget (plus the 1 ulp two
rounded outputs may be apart) of the implementation's output there, and closer than the convention
itself (by the max ULP distance, then the mean: a fixed per-channel error moves every element). A candidate that is bit-identical to the convention on every examined case changes nothing
and is dropped. The most cases explained wins; ties go to fewer knobs turned, then to the closer. A
pair is shown only when it explains clearly more than its best single change (at least
PAIR_MARGIN of the cases more, and at least 2), and says so; a pair is named "a + b", a
catalogued bug's id first. "Looks like" needs COVERAGE of the examined cases;
below it the best is only "closest". A change equal to a catalogued bug's (the same knob moved from
the same value to the same value, whatever the op and convention) carries the bug's id.

The fits (fitting.py): the effective eps, per-channel scale and statistic the outputs imply, for
mistakes no discrete knob names (eps times the width, an inflated eps).
"""
from __future__ import annotations

import itertools
import math
import re
import warnings
from dataclasses import dataclass, field, replace

import numpy as np

from normdiff.cases.layouts import DEFAULT as CONTIGUOUS
from normdiff.cases.model import Case
from normdiff.harness.analysis import fitting
from normdiff.harness.data.budgets import budget_for, rounding_rule
from normdiff.harness.data.outcomes import DISAGREEING
from normdiff.harness.data.bugs import BUGS, Bug, constant_eps_bug
from normdiff.harness.data.contracts import Contract
from normdiff.harness.data.conventions import CONVENTIONS, get_contract
from normdiff.harness.data.dtypes import get_format
from normdiff.harness.data.knobs import DERIVED_KNOBS, KNOBS
from normdiff.harness.data.ops import OPS
from normdiff.harness.engine import chain, oracle, quant_judge
from normdiff.harness.engine.judge import output_format, ulp_apart
from normdiff.implementations import numpy_own

MAX_CASES = 30  # disagreeing cases examined per candidate, spread over regimes, dtypes and eps
PAIR_SEEDS = 8  # pairs start from this many best single changes, each paired with every other
PAIR_MARGIN = 0.1  # a pair must explain this share of the examined cases more than its best single
COVERAGE = 0.5  # "looks like" needs this share of the examined cases explained


def tried_knobs(contract: Contract) -> dict[str, tuple]:
    """The knobs diagnosis turns for `contract`'s op (its record's knob groups; the weight's span
    follows from the inputs), each with the values it tries."""
    return {name: KNOBS[name].candidates for name in contract.record.knobs
            if name not in DERIVED_KNOBS and KNOBS[name].candidates}


@dataclass
class Candidate:
    name: str  # a bug id, "convention NAME", or the knobs turned
    changes: dict
    symptom: str = ""


@dataclass
class Match:
    name: str
    changes: dict
    matched: int
    of: int
    distance: float  # mean over matched cases of the max ULP distance to the candidate
    fix: str
    symptom: str = ""
    explained: frozenset = frozenset()  # the indices of the examined cases it explains
    nearer: int = 0  # examined cases where it is closer to the output than the convention, in budget or not

    @property
    def share(self) -> float:
        return self.matched / self.of if self.of else 0.0

    @property
    def convincing(self) -> bool:
        return self.share >= COVERAGE

    def as_dict(self) -> dict:
        return {"bug": self.name, "matched": self.matched, "of": self.of, "changes": self.changes,
                "fix": self.fix, "symptom": self.symptom, "mean_ulp_distance": self.distance,
                "convincing": self.convincing}


@dataclass
class Diagnosis:
    matches: list[Match] = field(default_factory=list)  # best first
    fits: list[fitting.Fit] = field(default_factory=list)
    examined: int = 0

    def __bool__(self) -> bool:
        return bool(self.matches or self.fits)

    def as_dict(self) -> dict:
        return {"matches": [m.as_dict() for m in self.matches], "fits": [f.as_dict() for f in self.fits],
                "examined": self.examined}


def catalogued(changes: dict, base: Contract) -> Bug | None:
    """The catalogued bug whose change this is: the same knobs moved from the same values (the base's)
    to the same values, the base's op's own bug first (an L2 norm's eps outside the root is
    l2-eps-outside, not the RMSNorm's eps-outside-sqrt), then under any op or convention. A constant
    eps is named by where the constant comes from (bugs.constant_eps_bug)."""
    if changes.keys() == {"eps"}:
        return constant_eps_bug(changes["eps"], base.eps)
    for bug in sorted(BUGS.values(), key=lambda b: b.op != base.op):
        if bug.changes.keys() != changes.keys() or any(bug.changes[k] != v for k, v in changes.items()):
            continue
        home = get_contract(bug.op, bug.convention)
        if all(getattr(home, k) == getattr(base, k) for k in changes if k != "eps"):
            return bug
    return None


def fix_for(changes: dict, base: Contract, convention: str) -> str:
    """What the change is, in words: what the code does, and what the convention does instead."""
    return "; ".join(f"yours: {KNOBS[k].text(v)}{_theirs(convention)}{_base_text(k, base)}" for k, v in changes.items())


def in_words(changes: dict, base: Contract, convention: str) -> str:
    """A change no catalogued bug is, said as a person would: what the code does, where the
    convention does otherwise ('the normalised value rounded to the input dtype before the weight
    multiply (Llama cast), where gemma3 rounds once ...'), never a raw knob."""
    return "; ".join(f"{KNOBS[k].text(v)}{_where(convention)}{_base_text(k, base)}" for k, v in changes.items())


def _theirs(convention: str) -> str:  # where fix_for names the convention
    return f"; {convention}: "


def _where(convention: str) -> str:  # where in_words names it
    return f", where {convention} has "


def reworded(found: Diagnosis, old: str, new: str) -> Diagnosis:
    """A diagnosis made under convention `old`, said under `new`, whose contract is the same: the same
    cases then have the same outputs and references, so the same matches; only the phrases of
    fix_for and in_words that name the convention change (in a pair's name, both halves')."""
    def said(text: str) -> str:
        return text.replace(_theirs(old), _theirs(new)).replace(_where(old), _where(new))
    matches = [replace(m, fix=said(m.fix), name=said(m.name)) for m in found.matches]
    return Diagnosis(matches, list(found.fits), found.examined)


def _base_text(knob: str, base: Contract) -> str:
    if knob == "eps":
        return "the model's eps, whatever it is (the case gives it)"
    return KNOBS[knob].text(getattr(base, knob))


def candidates(op: str, convention: str) -> list[Candidate]:
    base = get_contract(op, convention)
    found: dict[tuple, Candidate] = {}

    def add(changes: dict, name: str = "", symptom: str = ""):
        key = tuple(sorted(changes.items()))
        if not changes or key in found:
            return
        bug = catalogued(changes, base)
        if bug is not None:
            name, symptom = bug.id, bug.symptom
        found[key] = Candidate(name or in_words(changes, base, convention), dict(changes), symptom)

    # every catalogued change of the op, whatever convention it was filed under (catalogued() names
    # it when it moves the same knobs from the same values here): some turn knobs the op's own
    # search does not (a LayerNorm's centring in an RMSNorm)
    for bug in BUGS.values():
        if bug.op == op:
            add(dict(bug.changes))
    for knob, values in tried_knobs(base).items():
        for value in values:
            if knob == "eps" or value != getattr(base, knob):
                add({knob: value})
    for conv in CONVENTIONS.values():
        other = conv.contracts.get(op)
        if conv.name != convention and other is not None:
            changes = {k: v for k, v in other.knobs().items() if base.knobs()[k] != v and k != "eps"}
            add(changes, f"convention {conv.name}", f"you implemented {conv.name}'s {op}: {conv.summary}")
    return list(found.values())


def _apart(a: np.ndarray, b: np.ndarray) -> float:
    """The share of elements where two outputs of one dtype are not bit-identical (NaN equal NaN)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape or not a.size:
        return 1.0
    return float(np.count_nonzero(~((a == b) | (np.isnan(a) & np.isnan(b))))) / a.size


def _mean_distance(a: np.ndarray, b: np.ndarray, fmt) -> float:
    """Mean ULP distance over the elements both have finite: what tells a fixed per-channel error
    (every element an ulp off) from rounding noise (a few)."""
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if x.shape != y.shape:
        return float("inf")
    ok = np.isfinite(x) & np.isfinite(y)
    if not ok.any():
        return 0.0
    return float(np.mean(np.abs(x[ok] - y[ok]) / fmt.ulp(np.maximum(np.abs(x[ok]), np.abs(y[ok])))))


def _spread(case_ids: list[str]) -> list[str]:
    """Up to MAX_CASES ids, taken round-robin over (dtype, regime, eps) so none crowds out another."""
    groups: dict[tuple, list[str]] = {}
    for cid in case_ids:
        c = Case.from_id(cid)
        groups.setdefault((c.dtype, c.regime, c.eps), []).append(cid)
    picked = []
    for batch in itertools.zip_longest(*groups.values()):
        picked += [cid for cid in batch if cid]
    return picked[:MAX_CASES]


def _budget(case: Case, inputs) -> float:
    """How far, in ULPs of its output's format, a candidate may be from the output and still explain
    it: the case's budget; for a quantizing op's q one code (a legal rounding apart moves a quotient
    across one boundary at most, where y is float32), for its scale the half-width of the scale's
    legal bracket (engine/quant_judge.py)."""
    c = case.contract
    if case.output == "q":
        return 1.0
    if case.output == "scale":
        ref = quant_judge.reference(case, inputs, oracle.results(c, inputs.arrays, case.num_heads))
        return float(np.max(np.maximum(ref.scale_hi - ref.scale, ref.scale - ref.scale_lo)
                            / ref.scale_unit.ulp(ref.scale)))
    return budget_for(case.dtype, case.op, case.span, oracle.centring_condition(c, inputs.arrays, case.num_heads),
                      case.output, rounding_rule(c))


class _Examined:
    """The examined cases, their inputs, the implementation's outputs and the convention's own
    (NumPy) outputs, with a candidate's outputs computed on demand at each case's eps."""

    def __init__(self, outputs: dict[str, np.ndarray], op: str):
        self.op = op
        self.cases = [Case.from_id(cid) for cid in _spread(sorted(outputs))]
        self.inputs = [c.inputs() for c in self.cases]
        self.outputs = [outputs[c.id] for c in self.cases]
        self.base = [self.run(c, i, {}) for c, i in zip(self.cases, self.inputs)]
        self.budgets = [_budget(c, i) for c, i in zip(self.cases, self.inputs)]
        # cases whose outputs are within the budget of the convention's own: they failed on the
        # rounding chain (engine/chain.py) or a channel's mean, where the max says nothing
        self.chain_only = [c.dtype in chain.LOW_PRECISION and not c.record.quantizes
                           and ulp_apart(out, mine, get_format(c.dtype)) <= budget
                           for c, out, mine, budget in zip(self.cases, self.outputs, self.base, self.budgets)]
        # what every candidate is compared with, the output's distance from the convention's own, is
        # measured once; the last candidate's outputs are kept: a pair is scored on the cases its seed
        # leaves unexplained, then on all of them (keeping every candidate's would take gigabytes)
        self._from_base: dict[int, tuple] = {}
        self._expected: tuple[str, dict[int, np.ndarray]] = ("", {})

    def from_base(self, i: int) -> tuple:
        """(max ULP, mean ULP, share not bit-identical) of case i's output from the convention's own."""
        if i not in self._from_base:
            out, mine, fmt = self.outputs[i], self.base[i], output_format(self.cases[i])
            self._from_base[i] = (ulp_apart(out, mine, fmt), _mean_distance(out, mine, fmt), _apart(out, mine))
        return self._from_base[i]

    def expected(self, i: int, changes: dict) -> np.ndarray:
        """Case i's output under the convention with `changes`."""
        key = repr(sorted(changes.items()))
        if self._expected[0] != key:
            self._expected = (key, {})
        kept = self._expected[1]
        if i not in kept:
            kept[i] = self.run(self.cases[i], self.inputs[i], changes)
        return kept[i]

    def run(self, case: Case, inputs, changes: dict) -> np.ndarray:
        with np.errstate(all="ignore"):
            value = numpy_own.run(self.op, case.contract.replace(**changes), inputs)
        if isinstance(value, tuple):  # a fused add's (y, residual_out): the result this case judges
            value = dict(zip(case.record.results, value))[case.output]
        return value

    def score(self, cand: Candidate, base: Contract, convention: str, only=None) -> Match | None:
        """None when the candidate is bit-identical to the convention on every examined case.
        `only`: the indices of the cases to score it on (default: all)."""
        matched, nearer, dists, explained, differs = 0, 0, [], set(), False
        picked = range(len(self.cases)) if only is None else only
        for i in picked:
            case, out, mine = self.cases[i], self.outputs[i], self.base[i]
            expected = self.expected(i, cand.changes)
            differs = differs or not np.array_equal(expected, mine, equal_nan=True)
            fmt = output_format(case)
            d, mean = ulp_apart(out, expected, fmt), _mean_distance(out, expected, fmt)
            base_d, base_mean, base_apart = self.from_base(i)
            if self.chain_only[i]:  # judged on its rounding chain: the candidate must follow it bit for bit
                apart = _apart(out, expected)
                closer = apart < base_apart
                follows = apart <= chain.OFF_CHAIN_SHARE
            else:
                closer = (d, mean) < (base_d, base_mean)
                follows = True
            nearer += closer
            if d <= self.budgets[i] + 1.0 and closer and follows:
                matched += 1
                dists.append(d)
                explained.add(i)
        if not differs:
            return None
        return Match(cand.name, cand.changes, matched, len(picked),
                     float(np.mean(dists)) if dists else float("inf"), fix_for(cand.changes, base, convention),
                     cand.symptom, frozenset(explained), nearer)


def diagnose(outputs: dict[str, np.ndarray], op: str, convention: str, top: int = 5) -> Diagnosis:
    """`outputs`: case id -> the implementation's output, for the cases where it disagrees. Outputs
    may be Inf or NaN anywhere: NumPy's warnings about them are not the user's business. (Backward
    cases are backward_diagnosis.py's; check.py hands each pass its own.)"""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return _diagnose(outputs, op, convention, top)


def _diagnose(outputs: dict[str, np.ndarray], op: str, convention: str, top: int) -> Diagnosis:
    examined = _Examined(outputs, op)
    base = get_contract(op, convention)
    singles = [m for m in (examined.score(c, base, convention) for c in candidates(op, convention)) if m]
    ranked = sorted((m for m in singles if m.matched), key=_rank)
    n = len(examined.cases)
    best = ranked[0].matched if ranked else 0
    if best < n:
        need = best + max(2, math.ceil(PAIR_MARGIN * n))
        # a best single that explains only the cases failing on the rounding chain, leaving cases
        # beyond the budget unexplained, has not explained the failure: a pair that explains those
        # too needs no margin (MLX's Metal LayerNorm: three roundings on most cases, and a one-pass
        # variance whose cancellation is what NaNs the narrow rows)
        beyond = _beyond_budget_left(ranked[0], examined) if ranked else False
        floor = best + 1 if beyond else need
        pairs = [p for p in _pairs(_seeds(singles), singles, examined, base, convention, floor)
                 if p.matched >= need or (p.matched >= floor and _explains_beyond(p, ranked[0], examined))]
        ranked = sorted(ranked + pairs, key=_rank)
    fits = [] if OPS[op].quantizes else fitting.fit(list(zip(examined.cases, examined.inputs, examined.outputs)))
    return Diagnosis(ranked[:top], fits, n)


def _beyond_budget_left(m: Match, examined: _Examined) -> bool:
    """Whether `m` leaves unexplained a case that fails beyond its budget (not on the chain alone)."""
    return any(not examined.chain_only[i] for i in range(len(examined.cases)) if i not in m.explained)


def _explains_beyond(pair: Match, single: Match, examined: _Examined) -> bool:
    """Whether `pair` explains a case beyond the budget that `single` leaves unexplained."""
    return any(not examined.chain_only[i] for i in pair.explained - single.explained)


def _seeds(singles: list[Match]) -> list[Match]:
    """The single changes pairs start from: those that explain the most cases, then those that
    bring the output closest on the most (a two-change bug's halves may each explain no case on its
    own, only move toward it: AllenNLP's unbiased std with eps outside the root)."""
    return sorted(singles, key=lambda m: (-m.matched, -m.nearer, m.distance))[:PAIR_SEEDS]


def _pair_name(a: Match, b: Match) -> str:
    """'a + b', a catalogued bug's id before a change said in words."""
    first, second = sorted((a, b), key=lambda m: m.name not in BUGS)
    return f"{first.name} + {second.name}"


def _pairs(seeds: list[Match], singles: list[Match], examined: _Examined, base: Contract,
           convention: str, need: int) -> list[Match]:
    """Each seed with every other single change: tried first on the cases the seed leaves
    unexplained (the other half of a two-change bug may explain no case on its own), and scored in
    full only when those with the seed's own could reach `need` cases."""
    out, tried = [], set()
    for a in seeds:
        rest = [i for i in range(len(examined.cases)) if i not in a.explained]
        for b in singles:
            key = frozenset({a.name, b.name})
            if b is a or key in tried or set(a.changes) & set(b.changes):
                continue
            tried.add(key)
            candidate = Candidate(_pair_name(a, b), {**a.changes, **b.changes})
            first = examined.score(candidate, base, convention, only=rest)
            if first is None or not first.matched or first.matched + a.matched < need:
                continue
            m = examined.score(candidate, base, convention)
            if m is not None and m.matched:
                m.symptom = (f"two changes at once: explains {m.matched - a.matched} more of the {m.of} cases "
                             f"than {a.name} alone" if a.matched else
                             f"two changes at once: explains {m.matched} of the {m.of} cases, where neither "
                             "alone explains any")
                out.append(m)
    return out


# the worker's words for a call that wrote into its inputs (implementations/call_checks.py)
INPUT_WRITE_PREFIXES = ("modified its input", "changed its input")
INPUT_WRITTEN = "writes-into-input"
LAYOUT_DEPENDENT = "layout-dependent"


def output_wrong(outcome: str, detail) -> bool:
    """Whether a failing row's output itself is wrong (what the knob search can explain): a
    disagreement; or a call that wrote into its input and whose output, judged, disagrees too
    (engine/runner.py says which in the detail: "...; its output agree")."""
    if outcome != "error":
        return True
    said = re.search(r"; its output (\w+)", str(detail or ""))
    return said is not None and said.group(1) in DISAGREEING


def layout_match(disagreeing: list[str], agreeing) -> Match | None:
    """The fault no contract knob names: the output changes with how the same values lie in memory.
    A Match for the disagreeing cases in a non-contiguous layout whose contiguous twin (the same
    call, the same values: cases/layouts.py) agrees; None when there is none."""
    agreeing = set(agreeing)
    cases = [Case.from_id(cid) for cid in disagreeing]
    twinned = [c for c in cases if c.layout != CONTIGUOUS and replace(c, layout=CONTIGUOUS).id in agreeing]
    if not twinned:
        return None
    shown = sorted({c.layout for c in twinned})
    if shown == ["batched"]:  # a shape, not strides
        return _structural(LAYOUT_DEPENDENT, {"layout": shown}, len(twinned), len(cases),
                     "yours: wrong when x comes as a batch of sequences (rank 3), right on the same rows as a "
                     "matrix; the convention: the norm is over the last dimension whatever the leading ones "
                     "(rows = x.size // width, not x.shape[0])",
                     "takes the first dimension for the number of rows (FlagGems #5392), or flattens the leading "
                     "dimensions wrongly")
    return _structural(LAYOUT_DEPENDENT, {"layout": shown}, len(twinned), len(cases),
                 f"yours: wrong when its arrays are {', '.join(shown)} in memory, right on the same values "
                 "contiguous; the convention: the same output whatever the strides (read through the strides, "
                 "or make the input contiguous first)",
                 "reads memory as if it were contiguous (as a kernel handed a raw pointer does), or mishandles "
                 "a stride-0 weight")


MASKED_TAIL = "masked-tail"


def _power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def masked_tail_match(disagreeing: list[str], agreeing) -> Match | None:
    """The fault no contract knob names: right at every power-of-two width, wrong at the others. A
    kernel tiles a row in power-of-two blocks, and only a width that is not one leaves a block's
    tail masked: code that lets those lanes into a sum or a max (a load's `other` that is not the
    reduction's identity) or that stores them is wrong there alone. A Match when every disagreeing
    case is of such a width and some case of a power-of-two width agrees; None otherwise."""
    cases = [Case.from_id(cid) for cid in disagreeing]
    span = lambda c: c.head_dim if c.num_heads > 1 else c.width  # noqa: E731  (a head is its own row)
    if not cases or any(_power_of_two(span(c)) for c in cases):
        return None
    if not any(_power_of_two(span(Case.from_id(cid))) for cid in agreeing):
        return None
    widths = sorted({span(c) for c in cases})
    return _structural(MASKED_TAIL, {"widths": widths}, len(cases), len(cases),
                 f"yours: wrong at widths that are not a power of two ({', '.join(map(str, widths))}), right at "
                 "every power of two; the convention: the same at any width (a masked lane takes no part: load it "
                 "as the reduction's identity, 0 for a sum, and never store it)",
                 "a block's masked tail taken into the statistic or written out: as a kernel whose load gives "
                 "the lanes past the row's end a value that is not 0")


GRADIENT_MISSING = "gradient-missing"


def gradient_missing_match(outputs: dict[str, np.ndarray]) -> Match | None:
    """The fault no contract knob names: a gradient that is zero everywhere where the convention's is
    not (these outputs disagree): a custom autograd.Function whose backward returns None for it
    (autograd reads None as zero; unsloth's norms return None for the weight, which it freezes), or a
    parameter the forward detaches. A Match for the disagreeing backward cases whose output is all
    zeros, naming the operands; None when there is none."""
    cases = [Case.from_id(cid) for cid in outputs]
    zeros = [c for c in cases if c.pass_ == "backward" and np.size(outputs[c.id]) and not np.any(outputs[c.id])]
    if not zeros:
        return None
    names = sorted({c.operand for c in zeros})
    what = ", ".join(names)
    return _structural(GRADIENT_MISSING, {"gradients": names}, len(zeros), len(cases),
                 f"yours: no gradient for {what} (zeros everywhere); the convention: the norm's derivative with "
                 f"respect to {what} (a Function's backward must return it, not None: freezing a weight is the "
                 "optimizer's choice, not the norm's)",
                 f"the gradient of {what} is zero on every element: None from a custom autograd.Function's "
                 "backward, or a detached parameter")


def input_written_match(details: dict[str, str]) -> Match | None:
    """The fault no contract knob names: the call wrote into an input it was given (the worker
    compares every input's bits before and after the call; harness/engine/worker.py). A Match for the
    cases whose detail says so, naming the inputs written; None when there is none. `details`: case id
    -> the row's detail."""
    written = {cid: d for cid, d in details.items() if d.startswith(INPUT_WRITE_PREFIXES)}
    if not written:
        return None
    names = sorted({d.split("'")[1] for d in written.values() if d.count("'") >= 2})
    what = ", ".join(names) or "an input"
    return _structural(INPUT_WRITTEN, {"inputs": names}, len(written), len(details),
                 f"yours: writes into {what} while computing the output (the caller's tensor is overwritten: "
                 "a residual stream, a cached activation); the convention: inputs are read only (compute into "
                 "a new tensor: out-of-place ops, or a copy before an in-place one; an upcast such as .float() "
                 "is the same tensor when the input is already float32)",
                 f"the output may be right, but {what} comes back changed: an in-place op on the input or on an "
                 "upcast that is a no-op for its dtype")


def _structural(name: str, changes: dict, matched: int, of: int, fix: str, symptom: str) -> Match:
    """A fault no contract knob names, matching its first `matched` of `of` cases exactly."""
    return Match(name, changes, matched, of, 0.0, fix, symptom, frozenset(range(matched)))


def _rank(m: Match):
    # most cases explained first; then the simplest explanation (fewest knobs turned); then the
    # closest in ULPs
    return (-m.matched, len(m.changes), m.distance)
