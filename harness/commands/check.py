"""`normdiff check`: run the user's implementation over every suite case of its op, under the
convention it claims, and say whether it agrees and, if not, which bug it has.

The cases are all of the suite's cases for the op, re-targeted to the claimed convention (the same
inputs, judged against that convention's contract), so a convention with few cases of its own in
the suite is still checked over every regime.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from normdiff.cases import suites
from normdiff.cases.model import Case
from normdiff.harness import api
from normdiff.harness.commands import diagnosis
from normdiff.harness.commands.usercode import TargetError
from normdiff.harness.data.errors import UsageError
from normdiff.harness.data.outcomes import DISAGREEING, FAILED_TO_RUN, PASSING
from normdiff.implementations.entry import Implementation
from normdiff.reports import messages
from normdiff.reports import worst as sides


@dataclass
class CheckResult:
    verdict: str  # agrees | disagrees | error
    op: str
    convention: str
    implementation: str
    framework: str
    cases: dict
    diagnosis: list = field(default_factory=list)
    worst_case: dict = field(default_factory=dict)
    message: str = ""
    report: object = None  # the full Report, for the curious

    @property
    def exit_code(self) -> int:
        return {"agrees": 0, "disagrees": 1}.get(self.verdict, 2)

    def as_dict(self) -> dict:
        return {"verdict": self.verdict, "op": self.op, "convention": self.convention,
                "implementation": self.implementation, "framework": self.framework, "cases": self.cases,
                "diagnosis": [m.as_dict() for m in self.diagnosis], "worst_case": self.worst_case,
                "message": self.message}


def check_suite(suite: str, op: str, convention: str) -> suites.Suite:
    full = suites.load(suite)
    cases: dict[str, Case] = {}
    for c in full.cases:
        if c.op == op:
            case = dataclasses.replace(c, convention=convention)
            cases.setdefault(case.id, case)
    if not cases:
        raise UsageError(f"suite {full.name!r} has no {op} cases")
    return suites.Suite(f"{full.name}[{op}@{convention}]", full.description, tuple(cases.values()), full.path)


def check(impl: Implementation, suite: str = "default", timeout: float = 60.0) -> CheckResult:
    ((op, convention),) = impl.op_conventions
    report = api.run_suite(check_suite(suite, op, convention), [impl], timeout=timeout, keep_outputs=True)
    rows = report.results
    outcome = rows["outcome"].astype(str)
    counts = {"total": len(rows), "agree": int(outcome.isin(PASSING).sum()),
              "disagree": int(outcome.isin(DISAGREEING).sum()), "error": int(outcome.isin(FAILED_TO_RUN).sum())}
    result = CheckResult("agrees", op, convention, impl.name, impl.framework, counts, report=report)
    if counts["error"] == counts["total"]:  # nothing ran: the target cannot be loaded or called
        result.verdict, result.message = "error", _first_detail(rows)
        return result
    if counts["disagree"] or counts["error"]:
        result.verdict = "disagrees"
        bad = rows[outcome.isin(DISAGREEING)]
        outputs = {cid: report.outputs[(cid, impl.name)] for cid in bad["case_id"] if (cid, impl.name) in report.outputs}
        result.diagnosis = diagnosis.diagnose(outputs, op, convention) if outputs else []
        result.worst_case = _worst(rows[~outcome.isin(PASSING)], report, impl.name)
        if counts["error"]:
            result.message = f"{counts['error']} case(s) failed to run: {_first_detail(rows[outcome.isin(FAILED_TO_RUN)])}"
    return result


def _first_detail(rows) -> str:
    details = [d for d in rows["detail"].astype(str) if d and d != "nan"]
    return details[0] if details else "the implementation produced no output"


def _worst(rows, report, impl: str) -> dict:
    worst = rows.sort_values("max_ulp", ascending=False, na_position="first").iloc[0]
    info = {k: (None if isinstance(v, float) and np.isnan(v) else v) for k, v in worst[
        ["case_id", "outcome", "max_ulp", "rel_l2", "max_abs", "cosine", "detail"]].items()}
    info["replay"] = f"Case.from_id({worst['case_id']!r}).inputs()"
    info["headline"] = messages.headline(worst)
    info.update(sides.as_values(sides.side_by_side(report.outputs, worst["case_id"], impl)))
    return info


def describe(result: CheckResult, target: str) -> str:
    c = result.cases
    head = f"normdiff check {target}: {result.op}@{result.convention} ({result.framework})"
    if result.verdict == "error":
        return f"{head}\n  cannot run it: {result.message}"
    lines = [head, f"  {result.verdict.upper()}: {c['agree']} of {c['total']} cases agree, {c['disagree']} disagree, "
                   f"{c['error']} failed to run"]
    if result.message:
        lines.append(f"  {result.message}")
    if result.diagnosis:
        best = result.diagnosis[0]
        lines.append(f"  diagnosis: looks like {best.name} -- matches {best.matched} of the {best.of} disagreeing "
                     "cases examined, within rounding")
        if best.symptom:
            lines.append(f"    {best.symptom}")
        lines.append(f"    fix: {best.fix}")
        lines += [f"    also possible: {m.name} ({m.matched}/{m.of})" for m in result.diagnosis[1:3]]
    elif result.verdict == "disagrees":
        lines.append("  diagnosis: no catalogued bug, single knob change or other convention matches its outputs")
    w = result.worst_case
    if w:
        lines.append(f"  worst case: {w['headline']}")
        if "x" in w:
            fmt = lambda v: " ".join(f"{a:>10.4g}" for a in v)
            lines += [f"    row {w['row']}, columns {', '.join(w['columns'])}", f"    x          {fmt(w['x'])}",
                      f"    reference  {fmt(w['reference'])}", f"    yours      {fmt(w['yours'])}",
                      f"    ulp error  {fmt(w['ulp_error'])}"]
    return "\n".join(lines)


__all__ = ["check", "CheckResult", "describe", "TargetError"]
