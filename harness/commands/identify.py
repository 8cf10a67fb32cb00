"""`normdiff check TARGET --op OP` without --convention: which conventions the code computes.

The code is checked under every convention that defines a contract for the op
(conventions.defining), each on the cases `check` would run under it (check.check_cases), all in
one run: its worker loads the code once, and a call is made once for every convention whose call it
is. The cases' inputs do not depend on the convention (their seeds are per case), and all a Python
function is told of a contract is its eps and its span (a module class also the weight's span and
offset: each adapter's `sees` in implementations/user.py; a command is told the whole contract), so
the cases of several conventions with the same inputs and those knobs are one call, its output
judged against each convention's own exact reference (runner.call_key). Each convention's rows are
then judged as `check` judges them (check.judged): its verdict, its counts, its margin or worst
case, and the diagnosis of its disagreement.

The answer is the conventions it agrees with; when none, the closest (wording.CLOSEST_RULE, `_rank`)
and what differs from it. Exit status, as check's:
  0  it agrees with at least one convention
  1  it agrees with none (the closest is named)
  3  none agrees on every case; some agree on every case that ran, others could not run
  2  nothing ran: the target cannot be loaded or called
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from normdiff import wording
from normdiff.cases import suites
from normdiff.harness import api
from normdiff.harness.analysis import answer, diagnosis
from normdiff.harness.commands import check
from normdiff.harness.data.bugs import BUGS
from normdiff.harness.data.conventions import defining, get_contract
from normdiff.harness.data.outcomes import DISAGREEING, PASSING
from normdiff.harness.engine.columns import C
from normdiff.implementations.entry import Implementation
from normdiff.text import printable

EXIT_CODES = {"agrees": 0, "disagrees": 1, "error": 2, "partial": 3}


@dataclass
class Identification:
    op: str
    target: str
    implementation: str
    framework: str
    results: dict = field(default_factory=dict)  # convention -> its CheckResult, in conventions.py's order
    calls: dict = field(default_factory=dict)  # {"made", "shared"}: the calls of the code, and those reused
    seconds: float = 0.0  # the whole identification: the run, then each convention judged and diagnosed
    message: str = ""  # why nothing ran
    report: object = None  # the run's full Report (every convention's rows)

    def _where(self, verdict: str) -> list[str]:
        return [name for name, r in self.results.items() if r.verdict == verdict]

    @property
    def agrees(self) -> list[str]:
        """The conventions under which every case agrees."""
        return self._where("agrees")

    @property
    def verdict(self) -> str:
        if self.agrees:
            return "agrees"
        if self._where("partial"):
            return "partial"
        return "disagrees" if self._where("disagrees") else "error"

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.verdict]

    @property
    def closest(self) -> list[str]:
        """When none agrees, even where its cases ran: the conventions that rank first by `_rank`,
        all of those that tie."""
        if self.verdict != "disagrees":
            return []
        ran = [name for name, r in self.results.items() if r.verdict == "disagrees"]
        best = min(_rank(self.results[name]) for name in ran)
        return [name for name in ran if _rank(self.results[name]) == best]

    def differs(self) -> str:
        """What differs from the first closest convention: its diagnosis, as check words it."""
        result = self.results[self.closest[0]]
        best = result.diagnosis.matches[0] if result.diagnosis.matches else None
        if best is None or not best.convincing:
            return check.bug_line(result)
        return wording.differs_by(best.name if best.name in BUGS else "", best.fix)

    def answer(self) -> str:
        """The first line: the conventions it agrees with, or the closest and what differs."""
        if self.verdict == "agrees":
            return wording.agrees_with(self.agrees, self.op)
        if self.verdict == "partial":
            return wording.agrees_where_it_ran(self._where("partial"), self.op)
        if self.verdict == "error":
            return f"cannot run it: {self.message or _first_message(self.results)}"
        return wording.agrees_with_none(self.op, self.closest, self.differs())

    def as_dict(self) -> dict:
        closest = self.closest
        return {"verdict": self.verdict, "exit_code": self.exit_code, "op": self.op, "target": self.target,
                "implementation": self.implementation, "framework": self.framework, "answer": self.answer(),
                "agrees": self.agrees, "closest": closest, "closest_rule": wording.CLOSEST_RULE,
                "bug": self.results[closest[0]].bug if closest else "", "differs": self.differs() if closest else "",
                "calls": self.calls, "seconds": self.seconds, "message": self.message,
                "conventions": [_convention_dict(r) for r in self.results.values()]}


def _first_message(results: dict) -> str:
    return next((r.message for r in results.values() if r.message), "the implementation produced no output")


# The closest convention (wording.CLOSEST_RULE says it to the user). How much of the suite agrees
# comes first: every case is a regime the code must get right, and the share that agrees is what a
# porting user keeps by choosing that convention. Among equals, a disagreement the diagnosis explains
# (check's bug: a catalogued bug or one knob change matching the outputs) is the one a fix is known
# for. Then how far it is: the worst case's error as a multiple of its budget (a NaN where the
# reference has none is infinitely far). Conventions with the same contract (up to an eps the cases
# give) have the same rows, so they tie and are named together.
def _rank(result: check.CheckResult) -> tuple:
    c = result.cases
    share = c["agree"] / c["total"] if c.get("total") else 0.0
    return (-share, not result.bug, _worst(result)[2])


def _worst(result: check.CheckResult) -> tuple:
    """(max_ulp, budget, max_ulp / budget) of the judged row farthest out of its budget; a NaN where
    the reference has none is infinitely far (its max_ulp None). (None, None, 0) when none was judged."""
    judged = [row for row in result.rows if row[C.outcome] in PASSING + DISAGREEING]
    if not judged:
        return None, None, 0.0
    row = max(judged, key=_how_far)
    return row[C.max_ulp], row[C.tolerance_ulp], _how_far(row)


def _how_far(row: dict) -> float:
    error, budget = row[C.max_ulp], row[C.tolerance_ulp]
    if error is None or row[C.outcome] == "nan_mismatch":
        return math.inf
    return error / budget if budget else 0.0


def _diagnosis(result: check.CheckResult) -> str:
    """A disagreeing convention's diagnosis, short: the bug's id (or the change in words), or what
    check says when none is convincing; "" for the others."""
    if result.verdict != "disagrees":
        return ""
    return result.bug or check.bug_line(result).removeprefix("bug: ")


def _convention_dict(result: check.CheckResult) -> dict:
    error, budget, far = _worst(result)
    c = result.cases
    return {"convention": result.convention, "verdict": result.verdict, "passed": c.get("agree", 0),
            "total": c.get("total", 0), "disagree": c.get("disagree", 0), "error": c.get("error", 0),
            "worst_ulp": error, "budget_ulp": budget, "share_of_budget": None if math.isinf(far) else far,
            "bug": result.bug, "diagnosis": _diagnosis(result), "message": result.message}


def identify(impl: Implementation, suite: str = "default", timeout: float = 60.0, eps: float | None = None,
             dtypes=(), regimes=(), keep_calling: bool = False, passes: str = "both",
             target: str = "") -> Identification:
    """Check `impl` (usercode.identifying_implementation: one Implementation of every convention
    that defines its op) under each of its conventions in one run; the keywords are check's."""
    check.check_arguments(impl, timeout, eps, dtypes, regimes, keep_calling, passes, one_convention=False)
    start = time.perf_counter()
    op = next(iter(impl.op_conventions))[0]
    conventions = [name for name in defining(op) if (op, name) in impl.op_conventions]
    full, cases, skipped, notes = api.check_suite(suite), [], {}, {}
    for name in conventions:
        one, skipped[name], notes[name] = check.check_cases(impl, full, op, name, eps, dtypes, regimes, passes)
        cases += one.cases
    every = suites.Suite(f"{one.name.partition('[')[0]}[{op}@{len(conventions)} conventions]", one.description,
                         tuple(cases), one.path)
    report = api.run_suite(every, [impl], timeout=timeout, keep_outputs=True, keep_calling=keep_calling,
                           diagnose=False)  # judged below, per convention
    results, diagnosed = {}, {}
    for name in conventions:
        results[name] = check.judged(check.of_convention(report, name), impl, op, name, eps, skipped[name],
                                     notes[name], _shared(diagnosed, op, name))
    return Identification(op, target or impl.name, impl.name, impl.framework, results, report.meta.get("calls", {}),
                          time.perf_counter() - start, report=report)


def _shared(diagnosed: dict, op: str, name: str):
    """The diagnosis of `name`'s disagreeing rows: made once for each contract and reworded for the
    other conventions with that contract (diagnosis.reworded), since the same contract gives the
    same cases, outputs and references (ten conventions define rms_norm with four contracts; the
    diagnosis is most of a disagreeing convention's time). Made afresh wherever the disagreeing
    cases are not the same ones (code that answers differently to the same call)."""
    contract = get_contract(op, name)

    def diagnose(rows, outputs):
        cases = _disagreeing_cases(rows, name)
        first = diagnosed.get(contract)
        if first is not None and first[1] == cases:
            return diagnosis.reworded(first[2], first[0], name)
        found = answer.diagnose_rows(rows, outputs, op, name)
        diagnosed.setdefault(contract, (name, cases, found))
        return found
    return diagnose


def _disagreeing_cases(rows, name: str) -> frozenset:
    """The disagreeing rows' case ids with the convention's name taken out, and their outputs' digests."""
    bad = rows[answer.disagreeing(rows)]
    return frozenset((cid.replace(f"@{name}/", "@/", 1), digest) for cid, digest
                     in zip(bad[C.case_id], bad[C.output_digest]))


def describe(found: Identification) -> str:
    """The identification as text: the answer first, then one line per convention (its verdict,
    the cases that agree, its worst case against its budget, its diagnosis), then the rule that
    named the closest and, under the first convention of the answer, check's notes and worst case.
    Names from the user's code print with their control characters escaped."""
    head = f"normdiff check {found.target}: {found.op} under each convention that defines it ({found.framework})"
    if found.verdict == "error":
        return printable(f"{found.answer()}\n{head}")
    lines = [found.answer(), head + _calls(found.calls), *_table(found.results)]
    first = (found.agrees or found.closest or [next(iter(found.results))])[0]
    if found.closest:
        lines.append(f"  {wording.CLOSEST_RULE}")
    # check's notes and worst case under it (its bug line is the answer's, line 1)
    under = check.note_lines(found.results[first]) + check.answer_lines(found.results[first])[1:]
    if under:
        lines += [f"  under {first}:"] + [f"  {line}" for line in under]
    return printable("\n".join(lines))


def _calls(calls: dict) -> str:
    if not calls:
        return ""
    made, shared = calls.get("made", 0), calls.get("shared", 0)
    return f"; {made} calls of your code judged {made + shared} times"


COLUMNS = ("convention", "verdict", "agree", "worst against its budget", "diagnosis")


def _table(results: dict) -> list[str]:
    rows = [COLUMNS] + [_table_row(r) for r in results.values()]
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS) - 1)]
    return ["  " + "  ".join([*(cell.ljust(w) for cell, w in zip(row, widths)), row[-1]]).rstrip() for row in rows]


def _table_row(result: check.CheckResult) -> tuple:
    error, budget, far = _worst(result)
    worst = "-" if budget is None else "NaN/Inf mismatch" if math.isinf(far) else wording.with_budget(error, budget)
    c = result.cases
    return (result.convention, result.verdict, f"{c.get('agree', 0)}/{c.get('total', 0)}", worst,
            _diagnosis(result) or ("-" if result.verdict != "error" else result.message))


__all__ = ["identify", "Identification", "describe"]
