"""Which bug an implementation's disagreeing rows look like, and the line that says it: the answer
`normdiff check` gives first, and the one a run gives each failing row of a user's implementation
(results.csv `diagnosis`), from one place so that the two say the same.

The rows are one implementation's rows of a results table (its op and convention); the outputs are
its kept outputs by case id. Which rows disagree is the verdict module's (engine/verdict.py); which
bug they show is diagnosis.py's knob search and fits, backward_diagnosis.py's catalogued backward
bugs, and the faults no contract knob names (a layout, a write into an input).
"""
from __future__ import annotations

import numpy as np

from normdiff import wording
from normdiff.cases.layouts import DEFAULT as CONTIGUOUS
from normdiff.cases.model import Case
from normdiff.harness.analysis import backward_diagnosis, diagnosis
from normdiff.harness.data.outcomes import DISAGREEING, PASSING
from normdiff.harness.engine import verdict
from normdiff.harness.engine.columns import C
from normdiff.implementations.entry import USER_KIND


def disagreeing(rows) -> np.ndarray:
    """The rows that fail and ran: a disagreement, or an error that still returned an output (a call
    that wrote into its input, judged all the same); not the rows that could not run."""
    outcome = rows[C.outcome].astype(str)
    judged = np.array(verdict.has_output(rows), dtype=bool)
    fails = np.array([v == verdict.FAILS for v in verdict.row_verdicts(rows)], dtype=bool)
    return np.asarray((outcome.isin(DISAGREEING) | judged) & fails, dtype=bool)


def diagnose(outputs: dict, op: str, convention: str, agreeing=()) -> diagnosis.Diagnosis:
    """Cases that are wrong only in a non-contiguous layout (their contiguous twin among `agreeing`)
    first: no contract explains them. Then forward cases against the knob search; backward ones (ids
    naming dy=) against the catalogued backward-only bugs, when no forward case fails."""
    layout = diagnosis.layout_match(list(outputs), agreeing)
    if layout is not None:
        others = {cid: out for cid, out in outputs.items() if Case.from_id(cid).layout == CONTIGUOUS}
        found = diagnose(others, op, convention) if others else diagnosis.Diagnosis()
        layout.of = len(outputs)
        found.matches = sorted([layout] + found.matches, key=lambda m: -m.share)[:5]
        found.examined = max(found.examined, min(len(outputs), diagnosis.MAX_CASES))
        return found
    backward = {cid: out for cid, out in outputs.items() if Case.from_id(cid).pass_ == "backward"}
    forward = {cid: out for cid, out in outputs.items() if cid not in backward}
    found = diagnosis.diagnose(forward, op, convention) if forward else diagnosis.Diagnosis()
    tail = diagnosis.masked_tail_match(list(outputs), agreeing)
    if tail is not None:  # no contract knob says it: before what the numbers come closest to
        found.matches = [tail] + found.matches[:4]
    # a backward-only bug is considered only where the forward agrees: a wrong forward explains its
    # own gradients too (the derivative of a wrong function), and is the bug to name first
    if backward and not forward:
        with np.errstate(all="ignore"):
            matches = backward_diagnosis.diagnose(backward, op, convention)
        missing = diagnosis.gradient_missing_match(backward)  # a backward bug no catalogued one says
        found.matches = sorted(matches + found.matches + ([missing] if missing else []), key=lambda m: -m.share)[:5]
        found.examined = max(found.examined, min(len(backward), diagnosis.MAX_CASES))
    return found


def diagnose_rows(rows, outputs: dict, op: str, convention: str) -> diagnosis.Diagnosis:
    """The diagnosis of one implementation's rows: its disagreeing rows whose output is itself wrong,
    by the outputs kept for them (case id -> array); a write into an input named first."""
    bad = rows[disagreeing(rows)]
    wrong = bad[[diagnosis.output_wrong(o, d) for o, d in zip(bad[C.outcome].astype(str), bad[C.detail])]]
    kept = {cid: outputs[cid] for cid in wrong[C.case_id] if cid in outputs}
    agreeing = rows.loc[rows[C.outcome].astype(str).isin(PASSING), C.case_id]
    found = diagnose(kept, op, convention, agreeing)
    written = diagnosis.input_written_match(dict(zip(bad[C.case_id], bad[C.detail].fillna("").astype(str))))
    if written is not None:  # no contract knob says it; the numbers, where they err too, after it
        found.matches = [written] + found.matches[:4]
    return found


def bug_line(found: diagnosis.Diagnosis, rows, convention: str) -> str:
    """The diagnosis in one line: the bug and its fix, or that none is identified and what came
    closest, or, where every disagreeing case failed on the rounding chain alone, that."""
    if found.matches:
        best = found.matches[0]
        return wording.the_bug(best.name, best.fix) if best.convincing else \
            wording.closest_bug(best.name, best.matched, best.of)
    if found.fits:
        return wording.fitted_bug(found.fits[0].says)
    chain_only = _chain_only(rows)
    return wording.chain_bug(convention, chain_only) if chain_only else wording.NO_BUG


def _chain_only(rows) -> int:
    """How many cases disagree, when every one of them is off the rounding chain (engine/chain.py)
    or within one rounding more than its budget (an extra rounding costs up to 1 ulp: the same
    allowance diagnosis gives two rounded outputs); 0 otherwise."""
    failing = rows[rows[C.outcome].astype(str) == "disagree"]
    on_chain = failing[C.detail].fillna("").astype(str).str.startswith(wording.OFF_CHAIN)
    one_more = failing[C.max_ulp].astype(float) <= failing[C.tolerance_ulp].astype(float) + 1.0
    return len(failing) if len(failing) and (on_chain | one_more).all() else 0


def diagnosed(results, outputs: dict):
    """The results with `diagnosis` set on each disagreeing row of every user implementation that
    disagrees (its op and convention's: a user's implementation claims one pair), as check says it,
    from the outputs a run kept of those rows ((case id, implementation) -> array:
    engine/tables.py keeps them). Other rows, and a table that kept none of them, are left as they are."""
    if C.kind not in results or not (results[C.kind] == USER_KIND).any():
        return results
    results = results.copy()
    for name, rows in results[results[C.kind] == USER_KIND].groupby(C.implementation, sort=True):
        if verdict.implementation(rows) != "disagrees":
            continue
        mine = {cid: out for (cid, impl), out in outputs.items() if impl == name}
        bad = disagreeing(rows)
        if not mine or not bad.any():
            continue
        op, convention = str(rows[C.op].iloc[0]), str(rows[C.convention].iloc[0])
        line = bug_line(diagnose_rows(rows, mine, op, convention), rows, convention)
        results.loc[rows.index[bad], C.diagnosis] = line
    return results
