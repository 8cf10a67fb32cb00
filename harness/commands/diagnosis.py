"""Diagnosis: which wrong contract does a disagreeing implementation actually compute?

Conventions and bugs share one knob space, so diagnosis is a search: every single-knob variant of
the convention's contract (the catalogued bugs among them), the other conventions' contracts for
the op, and, when no single change explains everything, pairs of the best single changes. Each
candidate is computed in the case dtype by our NumPy implementation (which honours every knob,
rounding knobs included) and compared with the implementation's outputs on the cases where it
disagrees. The candidate matching the most cases within rounding wins; ties go to the one with fewer knobs
turned, then to the closer one.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from normdiff.cases.model import Case
from normdiff.harness.data.budgets import budget_for
from normdiff.harness.data.bugs import BUGS
from normdiff.harness.data.contracts import Contract
from normdiff.harness.data.conventions import CONVENTIONS, get_contract
from normdiff.harness.data.dtypes import get_format
from normdiff.harness.data.knobs import DERIVED_KNOBS, KNOBS
from normdiff.harness.engine.judge import ulp_distance
from normdiff.implementations import numpy_own

MAX_CASES = 30  # disagreeing cases examined per candidate, spread over regimes and dtypes
PAIR_SEEDS = 8  # pairs are formed from this many best single changes



def tried_knobs(contract: Contract) -> dict[str, tuple]:
    """The knobs diagnosis turns for `contract`'s op (its record's knob groups; the weight's span
    follows from the inputs), each with the values it tries."""
    return {name: KNOBS[name].candidates for name in contract.record.knobs
            if name not in DERIVED_KNOBS and KNOBS[name].candidates}


# one line per knob: how to write it the way the convention means
FIXES = {
    "weight_offset": lambda v, c: {0.0: "multiply by w, not (1 + w): this convention stores the plain gamma",
                                   1.0: "multiply by (1 + w): the stored weight is zero-centred (w - 1)"}.get(
        v, f"multiply by ({v:g} + w)"),
    "eps_placement": lambda v, c: {"inside": f"put eps inside the square root: x * rsqrt({_stat(c)} + eps)",
                                   "clamp": "divide by max(norm, eps)"}.get(v, f"eps placement {v}"),
    "eps": lambda v, c: f"use eps = {v:g} (the model config's value)",
    "statistic": lambda v, c: f"normalise by {_stat(c)} (no mean subtracted)",
    "scope": lambda v, c: ("normalise each head's head_dim slice: view x as (..., heads, head_dim) first"
                           if v == "head" else "normalise the whole H*D vector at once, as OLMo2 does"),
    "gate_activation": lambda v, c: f"gate with {v}(z)",
    "gate_order": lambda v, c: ("normalise x first, then multiply by the gate" if v == "norm_then_gate"
                                else "multiply x by the gate, then normalise"),
    "cast": lambda v, c: ("round the normalised value to the input dtype, then multiply by the weight (Llama cast)"
                          if v == "llama" else "multiply by the weight in float32 and round once at the end"),
    "stats_dtype": lambda v, c: f"compute {_stat(c)} in float32: x.float()",
    "offset_dtype": lambda v, c: "compute 1 + w in float32: (1 + w.float())",
    "inverted": lambda v, c: "divide by the RMS (multiply by rsqrt), do not multiply by it",
    "rope_order": lambda v, c: "apply the norm before RoPE",
    "weight_span": lambda v, c: f"the weight spans the {v}",
}


def _stat(c: Contract) -> str:
    return "sum(x^2)" if c.statistic == "sum_square" else "mean(x^2)"


def fix_for(knob: str, right, contract: Contract) -> str:
    """How to write `knob` the way the convention means (its right value is `right`)."""
    return FIXES.get(knob, lambda v, c: f"{knob} = {v!r}")(right, contract)


@dataclass
class Candidate:
    name: str  # a bug id, "convention NAME", or the knobs turned
    contract: Contract
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

    def as_dict(self) -> dict:
        return {"bug": self.name, "matched": self.matched, "of": self.of, "changes": self.changes,
                "fix": self.fix, "symptom": self.symptom, "mean_ulp_distance": self.distance}


def candidates(op: str, convention: str) -> list[Candidate]:
    base = get_contract(op, convention)
    bugs = {tuple(sorted(b.changes.items())): b for b in BUGS.values() if (b.op, b.convention) == (op, convention)}
    found: dict[Contract, Candidate] = {}

    def add(changes: dict, name: str = "", symptom: str = ""):
        contract = base.replace(**changes)
        if contract == base or contract in found:
            return
        bug = bugs.get(tuple(sorted(changes.items())))
        if bug:
            name, symptom = bug.id, bug.symptom
        found[contract] = Candidate(name or ", ".join(f"{k}={v!r}" for k, v in changes.items()),
                                    contract, changes, symptom)

    for bug in bugs.values():
        add(dict(bug.changes))
    for knob, values in tried_knobs(base).items():
        for value in values:
            add({knob: value})
    for conv in CONVENTIONS.values():
        other = conv.contracts.get(op)
        if conv.name != convention and other is not None and other != base:
            changes = {k: v for k, v in other.knobs().items() if base.knobs()[k] != v}
            add(changes, f"convention {conv.name}", f"you implemented {conv.name}'s {op}: {conv.summary}")
    return list(found.values())


def _distance(a: np.ndarray, b: np.ndarray, fmt) -> float:
    """Max ULP distance between two outputs (inf when their NaN/Inf patterns differ)."""
    dist, same = ulp_distance(a, b, fmt)
    return dist if same else float("inf")


def _spread(case_ids: list[str]) -> list[str]:
    """Up to MAX_CASES ids, taken round-robin over (dtype, regime) so no regime crowds out another."""
    groups: dict[tuple, list[str]] = {}
    for cid in case_ids:
        c = Case.from_id(cid)
        groups.setdefault((c.dtype, c.regime), []).append(cid)
    picked = []
    for batch in itertools.zip_longest(*groups.values()):
        picked += [cid for cid in batch if cid]
    return picked[:MAX_CASES]


def diagnose(outputs: dict[str, np.ndarray], op: str, convention: str, top: int = 5) -> list[Match]:
    """`outputs`: case id -> the implementation's output, for the cases where it disagrees."""
    ids = _spread(sorted(outputs))
    cases = [(cid, Case.from_id(cid)) for cid in ids]
    inputs = {cid: c.inputs() for cid, c in cases}
    base = get_contract(op, convention)

    def score(cand: Candidate) -> Match:
        matched, dists = 0, []
        for cid, case in cases:
            fmt = get_format(case.dtype)
            with np.errstate(all="ignore"):
                expected = numpy_own.run(op, cand.contract, inputs[cid])
            d = _distance(outputs[cid], expected, fmt)
            if d <= budget_for(case.dtype, op, case.span) + 1.0:  # both sides rounded: one ulp of slack
                matched += 1
                dists.append(d)
        fix = "; ".join(fix_for(k, getattr(base, k), base) for k in cand.changes)
        return Match(cand.name, cand.changes, matched, len(cases), float(np.mean(dists)) if dists else float("inf"),
                     fix, cand.symptom)

    singles = [score(c) for c in candidates(op, convention)]
    ranked = sorted(singles, key=_rank)
    if ranked and ranked[0].matched < len(cases):
        ranked = sorted(ranked + _pairs(ranked[:PAIR_SEEDS], base, score), key=_rank)
    return [m for m in ranked if m.matched][:top]


def _pairs(seeds: list[Match], base: Contract, score) -> list[Match]:
    out = []
    for a, b in itertools.combinations([s for s in seeds if s.matched], 2):
        if set(a.changes) & set(b.changes):
            continue
        changes = {**a.changes, **b.changes}
        out.append(score(Candidate(f"{a.name} + {b.name}", base.replace(**changes), changes,
                                   "two changes at once")))
    return out


def _rank(m: Match):
    # most cases explained first; then the simplest explanation (fewest knobs turned); then the
    # closest in ULPs
    return (-m.matched, len(m.changes), m.distance)
