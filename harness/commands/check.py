"""`normdiff check`: run the user's implementation over every suite case of its op, under the
convention it claims, and say whether it agrees and, if not, which bug it has.

The cases are all of the suite's cases for the op, re-targeted to the claimed convention (the same
inputs, judged against that convention's contract), so a convention with few cases of its own in
the suite is still checked over every regime. Each runs at its own eps: the convention's config eps,
or `eps` when given (the user's model eps), and the other eps values the suite has.

Verdicts (engine/verdict.py decides them, as it does a run's), and the exit status each gives:
  agrees     0  every case that ran agrees (rows a known finding explains count as agreeing)
  disagrees  1  some case disagrees (with a diagnosis)
  error      2  nothing ran: the target cannot be loaded or called (the reason is said)
  partial    3  everything that ran agrees, and some cases could not run (each named with why)
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field

import numpy as np

from normdiff.cases import suites
from normdiff.cases.model import Case
from normdiff.harness import api
from normdiff.harness.analysis import answer, diagnosis
from normdiff.harness.commands import on_device
from normdiff.harness.commands.usercode import TargetError
from normdiff.harness.data.conventions import get_contract
from normdiff.harness.data.dtypes import get_format
from normdiff.harness.data import inputs
from normdiff.harness.data.errors import UsageError
from normdiff.harness.data.names import several
from normdiff.harness.data.outcomes import FAILED_TO_RUN, OUTCOMES, PASSING
from normdiff.harness.engine import columns as table_columns
from normdiff.harness.engine.columns import C
from normdiff.harness.engine import verdict as verdicts
from normdiff.harness.engine.tables import repro_command
from normdiff.harness.data.ops import OPS
from normdiff.implementations.entry import Implementation
from normdiff.implementations.frameworks import FRAMEWORKS
from normdiff.implementations.user import MISSING_OPERAND, per_head
from normdiff.reports import messages
from normdiff.reports import worst as sides
from normdiff.text import clipped, columns, general
from normdiff import wording
from normdiff.wording import against_a_budget

EXIT_CODES = {"agrees": 0, "disagrees": 1, "error": 2, "partial": 3}


@dataclass
class CheckResult:
    """What `check` found: the verdict (agrees, disagrees, partial, error), the case counts, the
    diagnosis, the worst case (with its repro command), the margin of an agreeing check, what could
    not run, and a row per case; `report` is the full Report."""

    verdict: str  # agrees | disagrees | partial | error
    op: str
    convention: str
    implementation: str
    framework: str
    cases: dict
    diagnosis: diagnosis.Diagnosis = field(default_factory=diagnosis.Diagnosis)
    worst_case: dict = field(default_factory=dict)
    margin: dict = field(default_factory=dict)  # an agreeing check's worst case against its budget
    not_run: list = field(default_factory=list)  # {dtype, cases, reason}: cases that could not run
    rows: list = field(default_factory=list)  # one per case: its outcome, error, budget and repro command
    output_dtype: str = ""  # when it is not the input's
    message: str = ""
    # the suite's cases in a memory layout its framework cannot give it (no strides), left out
    layouts_skipped: str = ""
    eps_note: str = ""  # code that takes no eps: at which eps it was judged
    operand_note: str = ""  # a module without a weight or bias parameter: judged with the identity only
    call_note: str = ""  # how the code was called, where that hides a bug of its caller's (a module per head)
    backward_note: str = ""  # why the backward pass was not checked, where it was asked for and the suite has it
    # a Triton kernel's run compiled on a GPU beside the interpreter's, or why not (on_device.py); {} otherwise
    device: dict = field(default_factory=dict)
    # the known findings its rows show (engine/verdict.py): {explanation, cases, example}
    known_findings: list = field(default_factory=list)
    report: object = None  # the full Report, for the curious

    @property
    def exit_code(self) -> int:
        return EXIT_CODES.get(self.verdict, 2)

    @property
    def bug(self) -> str:
        """The diagnosed bug's id: the first match, when it explains enough of the cases to be named
        (a weaker one is only 'the closest'); '' otherwise."""
        best = self.diagnosis.matches[0] if self.diagnosis.matches else None
        return best.name if best is not None and best.convincing else ""

    def _repr_html_(self) -> str:
        """How Jupyter shows a check: its answer first, as `describe` gives it (describe_html)."""
        return describe_html(self)

    def as_dict(self) -> dict:
        return {"verdict": self.verdict, "exit_code": self.exit_code, "op": self.op, "convention": self.convention,
                "implementation": self.implementation, "framework": self.framework, "cases": self.cases,
                "diagnosis": [m.as_dict() for m in self.diagnosis.matches],
                "fits": [f.as_dict() for f in self.diagnosis.fits], "worst_case": self.worst_case,
                "margin": self.margin, "not_run": self.not_run, "output_dtype": self.output_dtype,
                "message": self.message, "layouts_skipped": self.layouts_skipped,
                "known_findings": self.known_findings, "eps_note": self.eps_note,
                "operand_note": self.operand_note, "call_note": self.call_note, "backward_note": self.backward_note,
                "device": self.device, "rows": self.rows}


def check_suite(suite: str | suites.Suite, op: str, convention: str, eps: float | None = None, dtypes=(),
                regimes=()) -> suites.Suite:
    """The suite's cases of `op` (a suite's name or path, or the Suite loaded), re-targeted to
    `convention`; at `eps` where they run at their convention's config eps (the user's model eps),
    their own eps elsewhere. `dtypes` and `regimes` select (a regime by its full name,
    tiny_rms:1e-3, or its family, tiny_rms); a value no case has is a usage error that lists the
    ones there are."""
    dtypes, regimes = several(dtypes, "dtypes"), several(regimes, "regimes")
    full = api.check_suite(suite)
    of_op = [c for c in full.cases if c.op == op]
    if not of_op:
        raise UsageError(f"suite {full.name!r} has no {op} cases")
    wanted_dtypes = {get_format(d).name for d in dtypes}
    _known("dtype", wanted_dtypes, {c.dtype for c in of_op}, full.name)
    _known("regime", set(regimes), {c.regime for c in of_op} | {c.regime.split(":")[0] for c in of_op}, full.name)
    cases: dict[str, Case] = {}
    for c in of_op:
        if (wanted_dtypes and c.dtype not in wanted_dtypes) or \
                (regimes and c.regime not in regimes and c.regime.split(":")[0] not in regimes):
            continue
        case = dataclasses.replace(c, convention=convention, eps=c.eps if c.eps is not None else eps)
        cases.setdefault(case.id, case)
    if not cases:
        raise UsageError(f"suite {full.name!r} has no {op} case of dtype {' or '.join(sorted(wanted_dtypes))} in "
                         f"regime {' or '.join(sorted(regimes))}")
    return suites.Suite(f"{full.name}[{op}@{convention}]", full.description, tuple(cases.values()), full.path)


def _at_the_eps_it_takes(report, impl: Implementation, op: str, convention: str, eps: float | None):
    """The report, and what to say of it: code that takes no eps (its call and constructor bind no
    eps-like parameter, as its worker found when it loaded it) is judged at the convention's eps (or
    the user's --eps) only: it cannot be given the suite's other eps values, and a literal that is
    right for its model is not a bug. Code that takes eps and ignores it is still judged at all of
    them (and disagrees: eps-hardcoded)."""
    takes = (report.meta.get("takes") or {}).get(impl.name)
    if takes is None or "eps" in takes:
        return report, ""
    at = eps if eps is not None else get_contract(op, convention).eps
    keep = report.results[C.eps].astype(float) == float(at)
    if keep.all():
        return report, f"takes no eps: judged at {general(at)}, the eps it was given"
    report = _only(report, keep)
    return report, (f"takes no eps: judged at {general(at)} only ({int((~keep).sum())} cases at other eps values "
                    "left out; give --eps for its model's value)")


# the operands whose identity a case can hold (w = ones, b = zeros): code without them is judged there
IDENTITY_OPERANDS = ("weight", "bias")


def _with_the_operands_it_has(report, impl: Implementation, op: str):
    """The report without the rows of operands the code cannot take, and what to say of it: a
    function whose call binds no weight or bias (jax.nn.standardize), a module without such a
    parameter (a LayerNorm built without a bias: implementations/user.py MISSING_OPERAND). Like code
    that takes no eps, it is judged where it can be, at the operand's identity (w = ones, b =
    zeros), which the suite has; code that cannot take a case's operand is not wrong for its model.
    Nothing is left out when no row would remain."""
    rows = report.results
    found = rows[C.detail].fillna("").astype(str).str.extract(MISSING_OPERAND)
    missing = found[0].fillna(found[1])
    left_out = missing.notna() & (rows[C.outcome].astype(str) == "error")
    takes = (report.meta.get("takes") or {}).get(impl.name)
    for operand in OPS[op].operands if takes is not None else ():
        if operand.name in IDENTITY_OPERANDS and operand.name not in takes:
            # another value than the identity, or the gradient of an operand it never received
            other = (rows[operand.column].astype(str) != operand.default) | (rows[C.output] == operand.gradient)
            missing = missing.where(~other | missing.notna(), operand.name)
            left_out |= other
    if not left_out.any() or left_out.all():
        return report, ""
    names = sorted(set(missing[left_out]))
    report = _only(report, ~left_out)
    return report, (f"takes no {' or '.join(names)}: judged with the identity only "
                    f"({int(left_out.sum())} cases that need one left out)")


def _only(report, keep):
    """The report's rows where `keep`, and the cases, outputs and pairs of those rows."""
    ids = set(report.results.loc[keep, C.case_id])
    return dataclasses.replace(report, results=report.results[keep].reset_index(drop=True),
                               pairs=report.pairs[report.pairs["case_id"].isin(ids)].reset_index(drop=True),
                               outputs={k: v for k, v in report.outputs.items() if k[0] in ids},
                               cases=tuple(c for c in report.cases if c.id in ids))


def _laid_out_for(impl: Implementation, cases: suites.Suite) -> tuple[suites.Suite, str]:
    """The cases without those in a memory layout the implementation's framework cannot give it
    (cases/layouts.py), and what was left out and why ("" when nothing was)."""
    skipped = [c for c in cases.cases if impl.layout_problem(c.layout)]
    if not skipped or len(skipped) == len(cases.cases):
        return cases, ""
    kept = tuple(c for c in cases.cases if not impl.layout_problem(c.layout))
    layouts = ", ".join(sorted({c.layout for c in skipped}))
    why = f"{len(skipped)} case(s) in non-contiguous layouts ({layouts}) not run: {impl.framework} arrays have no strides"
    return suites.Suite(cases.name, cases.description, kept, cases.path), why


def _passes(impl: Implementation, asked: str) -> str:
    """The pass `check` runs: the one asked, narrowed to those the implementation has."""
    if asked not in suites.PASS_CHOICES:
        raise UsageError(f"passes must be one of {', '.join(suites.PASS_CHOICES)}; got {asked!r}")
    has = impl.passes
    if asked != "both" and asked not in has:
        why = ("its first parameter is the upstream gradient dy, so it is a backward" if has == ("backward",) else
               f"normdiff cannot differentiate {impl.framework} code: give an explicit backward whose first "
               "parameter is dy")
        raise UsageError(f"{impl.name} has no {asked} pass: {why}")
    return asked if asked != "both" else (has[0] if len(has) == 1 else "both")


def _backward_not_checked(impl: Implementation, asked: str, op: str, cases: suites.Suite) -> str:
    """Why the backward pass is not checked, when both passes were asked for, the suite has backward
    cases of the op and the implementation runs only its forward ("" otherwise): normdiff
    differentiates torch and JAX code only (flax nnx module classes not yet), and a command is a
    forward unless --pass says it has the backward call too."""
    if asked != "both" or impl.passes != ("forward",) or not any(c.pass_ == "backward" for c in cases.cases):
        return ""
    if impl.framework == "command":
        return ("backward not checked: a --command is taken for a forward; if it answers the backward call too "
                "(docs/other-languages.md), say so with --pass both")
    explicit = (f"give an explicit backward, a function whose first parameter is dy "
                f"({OPS[op].backward_signature}), and check it with --pass backward")
    target = impl.target
    if target is not None and target.is_class and FRAMEWORKS[impl.framework].differentiate is not None:
        return (f"backward not checked: normdiff does not differentiate {impl.framework} module classes; give a "
                f"function, or {explicit}")
    return f"backward not checked: {impl.framework} code has no autograd here; {explicit}"


def _how_called(impl: Implementation, cases: suites.Suite) -> str:
    """How a module class was called, where that hides what its caller does: per head (user.py
    `per_head`), it never sees the heads together, so a norm its caller takes over all of them
    (qk-norm-full-vector) cannot show. "" otherwise (a function gets the whole row and num_heads)."""
    if impl.target is None or not impl.target.is_class:
        return ""
    heads = [c for c in cases.cases if per_head(c.span, c.width, c.contract.weight_span)]
    if not heads:
        return ""
    dims = ", ".join(str(d) for d in sorted({c.head_dim for c in heads}))
    return (f"called per head: your module receives x viewed as (..., heads, head_dim), one head's vector of "
            f"head_dim {dims} on its last axis; a norm taken over all heads in the caller cannot show here (check "
            "the caller's norm as a function of the whole row and num_heads)")


def _known(what: str, asked: set, there: set, suite: str) -> None:
    unknown = sorted(asked - there)
    if unknown:
        raise UsageError(f"suite {suite!r} has no {what} {', '.join(map(repr, unknown))} among its cases of the op; "
                         f"it has: {', '.join(sorted(there))}")


def check_arguments(impl, timeout, eps, dtypes, regimes, keep_calling, passes, one_convention: bool = True) -> None:
    """check's (and identify's) arguments, each checked before any work: a UsageError names the
    argument, what it got and what it takes."""
    if not isinstance(impl, Implementation):
        raise UsageError("impl must be an Implementation, e.g. usercode.user_implementation('my_norm.py:rms_norm', "
                         f"'rms_norm', 'qwen3'); got {impl!r} ({type(impl).__name__})")
    if one_convention and len(impl.op_conventions) != 1:
        raise UsageError(f"check judges an implementation of one op under one convention; {impl.name} implements "
                         f"{len(impl.op_conventions)}: give usercode.user_implementation(TARGET, OP, CONVENTION)")
    api.check_timeout(timeout)
    if eps is not None:
        inputs.positive(eps, "eps")
    several(dtypes, "dtypes")
    several(regimes, "regimes")
    inputs.flag(keep_calling, "keep_calling")
    api.check_passes(passes)


def check(impl: Implementation, suite: str = "default", timeout: float = 60.0, eps: float | None = None,
          dtypes=(), regimes=(), keep_calling: bool = False, passes: str = "both") -> CheckResult:
    """`passes`: "forward", "backward" or "both", of those the implementation runs (an explicit
    backward runs only the backward pass; a forward in a framework without autograd only the forward).
    `suite`: a name, a path to a .toml file (a string or a pathlib.Path) or a Suite. Every argument
    is checked before any work (UsageError)."""
    check_arguments(impl, timeout, eps, dtypes, regimes, keep_calling, passes)
    ((op, convention),) = impl.op_conventions
    cases, skipped, notes = check_cases(impl, suite, op, convention, eps, dtypes, regimes, passes)
    report = api.run_suite(cases, [impl], timeout=timeout, keep_outputs=True, keep_calling=keep_calling, diagnose=False)
    result = judged(report, impl, op, convention, eps, skipped, notes)
    result.device = on_device.beside(impl, cases, report, timeout, keep_calling,
                                     judge=lambda compiled, twin: judged(compiled, twin, op, convention, eps))
    return result


def check_cases(impl: Implementation, suite: str | suites.Suite, op: str, convention: str,
                eps: float | None = None, dtypes=(), regimes=(), passes: str = "both") -> tuple[suites.Suite, str, tuple]:
    """The cases check runs `impl` on under `convention`: the suite's cases of `op` re-targeted to
    it (check_suite), of the pass asked that `impl` has, without those in a memory layout its
    framework cannot give it; what was left out for that ("" when nothing was); and the notes on how
    it was called and whether its backward is checked (_how_called, _backward_not_checked)."""
    every = check_suite(suite, op, convention, eps, dtypes, regimes)
    cases, skipped = _laid_out_for(impl, suites.for_pass(every, _passes(impl, passes)))
    return cases, skipped, (_how_called(impl, cases), _backward_not_checked(impl, passes, op, every))


def of_convention(report, convention: str):
    """The report's rows of one convention's cases (and their cases, outputs and pairs)."""
    return _only(report, report.results[C.convention] == convention)


def judged(report, impl: Implementation, op: str, convention: str, eps: float | None = None,
           skipped: str = "", notes: tuple[str, str] = ("", ""), diagnose=None) -> CheckResult:
    """check's result from the report of its cases under `convention` (`check` runs them; identify.py
    runs every convention's at once and judges each one's rows here): the verdict, the counts, the
    diagnosis of a disagreement, the worst case or the margin, and the notes (`skipped`: the cases
    left out for their memory layout, _laid_out_for; `notes`: how it was called and whether its
    backward is checked, check_cases). `diagnose(rows, outputs)`: the diagnosis of the disagreeing
    rows, when the caller has it (identify.py: one made under a convention with the same contract);
    None: answer.diagnose_rows."""
    report, eps_note = _at_the_eps_it_takes(report, impl, op, convention, eps)
    report, operand_note = _with_the_operands_it_has(report, impl, op)
    rows = report.results
    outcome = rows[C.outcome].astype(str)
    said = verdicts.row_verdicts(rows)
    excused = np.array([v == verdicts.EXCUSED for v in said], dtype=bool)
    judged = np.array(verdicts.has_output(rows), dtype=bool)  # an error that returned an output ran
    failed = outcome.isin(FAILED_TO_RUN) & ~judged
    disagreeing = answer.disagreeing(rows)
    counts = {"total": len(rows), "agree": int((outcome.isin(PASSING) | (excused & ~failed)).sum()),
              "identical": int((outcome == "identical").sum()), "disagree": int(disagreeing.sum()),
              "error": int(failed.sum()), "known_finding": int(sum(excused))}
    result = CheckResult(verdicts.check(rows), op, convention, impl.name, impl.framework, counts, report=report)
    result.eps_note, result.operand_note = eps_note, operand_note
    result.call_note, result.backward_note = notes
    result.output_dtype = _output_dtype(rows)
    result.layouts_skipped = skipped
    result.rows = case_rows(rows, impl)
    if result.verdict == "error":  # nothing ran: the target cannot be loaded or called
        result.message = _first_detail(rows)
        return result
    result.not_run = _not_run(rows[failed])
    if result.verdict == "disagrees":
        outputs = {cid: out for (cid, name), out in report.outputs.items() if name == impl.name}
        result.diagnosis = (diagnose or functools.partial(answer.diagnose_rows, op=op, convention=convention))(
            rows, outputs)
        result.worst_case = _worst(rows[disagreeing], report, impl)  # cases that could not run: not_run
        # the rows say it as a run's do (results.csv `diagnosis`, a report written with --out)
        rows = rows.assign(**{C.diagnosis: np.where(disagreeing, bug_line(result), rows[C.diagnosis])})
        result.report = report = dataclasses.replace(report, results=rows)
    if result.verdict != "disagrees":
        result.margin = _margin(rows[~failed & ~excused])  # a known finding's rows are said apart
    result.known_findings = _known_findings(rows[excused])
    return result


# pass and output beside the id, so that a user reads a gradient row without parsing `dy=`/`out=` out of it
ROW_FIELDS = (C.case_id, C.pass_, C.output, C.dtype, C.regime, C.eps, C.outcome, C.max_ulp, C.tolerance_ulp, C.detail,
              C.known_finding, C.repro)


def case_rows(rows, impl: Implementation) -> list[dict]:
    """One plain dict per case, as --json prints them (NaN as None; the headline the text shows;
    every row's repro command, a passing one's too)."""
    out = []
    for r in table_columns.rows(rows):
        row = {k: _plain(getattr(r, "pass_" if k == C.pass_ else k)) for k in ROW_FIELDS}
        row[C.outcome] = str(r.outcome)
        row[C.repro] = row[C.repro] or repro_command(row[C.case_id], impl)
        row["headline"] = messages.headline(r)
        out.append(row)
    return out


def _plain(value):
    if isinstance(value, (float, np.floating)):
        return None if np.isnan(value) else float(value)
    if isinstance(value, np.integer):
        return int(value)
    return "" if value is None else value


def _first_detail(rows) -> str:
    """Why nothing ran: the first reason that is not a consequence of another (after a hang, the
    other calls' "not run" points at the one that hung), with how many cases it cost."""
    details = [d for d in rows[C.detail].astype(str) if d and d != "nan"]
    if not details:
        return "the implementation produced no output"
    cause = clipped(next((d for d in details if not d.startswith("not run:")), details[0]))
    skipped = sum(d.startswith("not run:") for d in details)
    return cause + (f"; the other {skipped} calls were not made (--keep-calling makes them)" if skipped else "")


def _not_run(failed) -> list[dict]:
    """The cases that could not run, grouped by dtype and reason."""
    groups = failed.assign(reason=[messages.detail(r) or str(r[C.outcome]) for _, r in failed.iterrows()])
    return [{"dtype": dtype, "cases": int(len(g)), "reason": reason, "example": str(g[C.case_id].iloc[0])}
            for (dtype, reason), g in groups.groupby([C.dtype, "reason"], sort=True)]


def _known_findings(excused) -> list[dict]:
    """The known findings the excused rows show, each with how many cases and one of them."""
    return [{"explanation": text, "cases": int(len(g)), "example": str(g[C.case_id].iloc[0])}
            for text, g in excused.groupby(C.known_finding, sort=True)]


def _output_dtype(rows) -> str:
    ran = rows[rows[C.output_dtype].fillna("").astype(str) != ""]
    other = ran[ran[C.output_dtype].astype(str) != ran[C.dtype].astype(str)]
    if other.empty:
        return ""
    outputs = other[C.output] if C.output in other else ["y"] * len(other)
    pairs: dict[str, set] = {}
    for o, i, name in zip(other[C.output_dtype], other[C.dtype], outputs):
        pairs.setdefault(f"{o} for {i} input", set()).add(str(name))
    # which output (dw in float32 is what training kernels return; y in float32 is a finding)
    return "returns " + ", ".join(f"{pair} ({', '.join(sorted(names))})" for pair, names in sorted(pairs.items()))


def _margin(ran) -> dict:
    judged = ran[ran[C.max_ulp].notna() & (ran[C.tolerance_ulp] > 0)]
    if judged.empty:
        return {}
    share = judged[C.max_ulp] / judged[C.tolerance_ulp]
    top = judged.loc[share.idxmax()]
    return {"worst_ulp": float(top[C.max_ulp]), "budget_ulp": float(top[C.tolerance_ulp]),
            "share_of_budget": float(share.max()), "case_id": str(top[C.case_id]),
            "identical": int((ran[C.outcome].astype(str) == "identical").sum()), "of": int(len(ran))}


def _worst(rows, report, impl: Implementation) -> dict:
    """The worst row: the worst outcome (a NaN where the reference is finite beats any finite
    error), then the largest error; with the `normdiff repro` command that replays it (`replay`,
    the Python expression of its inputs, kept for those who read it)."""
    rank = rows[C.outcome].astype(str).map({o: i for i, o in enumerate(OUTCOMES)})
    worst = (rows.assign(_rank=rank).sort_values(["_rank", C.max_ulp], ascending=[False, False], na_position="first")
             .iloc[0])
    info = {k: (None if isinstance(v, float) and np.isnan(v) else v) for k, v in worst[
        [C.case_id, C.outcome, C.max_ulp, C.rel_l2, C.max_abs, C.cosine, C.detail]].items()}
    info["replay"] = f"Case.from_id({worst[C.case_id]!r}).inputs()"
    info[C.repro] = repro_command(worst[C.case_id], impl)
    info["headline"] = messages.headline(worst)
    info.update(sides.as_values(sides.side_by_side(report.outputs, worst[C.case_id], impl.name)))
    return info


def describe(result: CheckResult, target: str) -> str:
    """The check as text for a terminal, the answer first: the verdict, the bug (its id and what
    differs), the worst case and the `normdiff repro` command that replays it; then the details
    (cases that could not run, notes, margin, the diagnosis's evidence, the worst case side by side).
    The target, names, case ids and the text of what failed come from the user's code: their
    control characters print as escapes (normdiff.text.printable), and a name or case id stays on
    its line."""
    from normdiff.text import printable

    head = f"normdiff check {_one(target)}: {_one(result.op)}@{_one(result.convention)} ({_one(result.framework)})"
    if result.verdict == "error":
        return printable(f"{head}\n  cannot run it: {result.message}")
    lines = [head, f"  {_counts_line(result)}"]
    lines += answer_lines(result) + note_lines(result) + _diagnosis_lines(result) + _side_by_side_lines(result)
    return printable("\n".join(lines))  # a reason (an exception's text) may span lines; nothing else acts


def _counts_line(result: CheckResult) -> str:
    """'DISAGREES: 79 of 115 cases agree, 36 disagree, 0 could not run': the verdict and its counts."""
    c = result.cases
    known = f", {c['known_finding']} explained by a known finding" if c.get("known_finding") else ""
    return (f"{result.verdict.upper()}: {c['agree']} of {c['total']} cases agree, {c['disagree']} disagree, "
            f"{c['error']} could not run{known}")


SHOWN_ROWS = 5  # rows of describe_html's table


def describe_html(result: CheckResult, target: str | None = None) -> str:
    """The check as a notebook shows it (CheckResult._repr_html_), in describe's order: the verdict
    and its counts, the bug with its sentence, the worst case and the command that replays it, the
    notes; then the worst rows as a table, the worst case side by side, and describe's whole text
    folded away. `target`: what was checked (the implementation's name when not given). Every value
    is escaped (reports/markup.py)."""
    from normdiff.reports import markup, notebook
    from normdiff.reports.views.worst import side_by_side_html
    from normdiff.harness.engine.tables import ranked

    target = result.implementation if target is None else target
    esc = markup.esc
    head = (f"<p><b>normdiff check</b> <code>{esc(target)}</code>: <code>{esc(result.op)}@{esc(result.convention)}"
            f"</code> ({esc(result.framework)})</p>")
    if result.verdict == "error":
        return notebook.block(head + notebook.banner(False, f"ERROR: cannot run it: {result.message}"))
    parts = [head, notebook.banner(result.verdict == "agrees", _counts_line(result))]
    w = result.worst_case
    if result.verdict == "disagrees" and w:
        best = result.diagnosis.matches[0] if result.diagnosis.matches else None
        parts.append(f"<p><b>{esc(bug_line(result))}</b></p>")
        if best is not None and best.symptom:
            parts.append(f"<p>{esc(best.symptom)}</p>")
        parts.append(f"<p>worst case: {esc(w['headline'])}<br>{notebook.replay(w[C.repro])}</p>")
    notes = [line.strip() for line in note_lines(result)]
    if notes:
        parts.append("<ul>" + "".join(f"<li>{esc(line)}</li>" for line in notes) + "</ul>")
    report = result.report
    if report is not None and len(report.results):
        prefix = notebook.uuid()
        rows = ranked(report.results).head(SHOWN_ROWS)
        parts.append(f"<p>The {len(rows)} worst of its {len(report.results)} rows:</p>"
                     + notebook.rows_table(report, rows, prefix, "rows"))
        if w.get(C.case_id) and result.implementation:
            parts.append(side_by_side_html(report, str(w[C.case_id]), result.implementation, prefix))
    parts.append(f"<details><summary>the whole answer, as <code>normdiff check</code> prints it</summary>"
                 f"<pre>{esc(describe(result, target))}</pre></details>")
    return notebook.block("".join(parts))


def summary(result: CheckResult, target: str) -> str:
    """The check in one line, for pytest's short summary: the verdict and the bug's id."""
    from normdiff.text import printable

    counts = {"disagrees": "disagree", "partial": "error", "agrees": "agree"}
    count = result.cases.get(counts.get(result.verdict, ""), 0)
    reason = (result.message.splitlines() or [""])[0]  # one line: the rest is in the body
    return printable(wording.check_summary(target, result.verdict, result.bug, count, result.cases.get("total", 0),
                                           reason), newlines=False)


def _one(value) -> str:
    """A user-given name or id as text on one line (its control characters escaped)."""
    from normdiff.text import printable

    return printable(value, newlines=False)


def answer_lines(result: CheckResult) -> list[str]:
    """What a user acts on, right under the verdict: the bug, the worst case and the command that
    replays it (a disagreeing check only: an agreeing one's answer is its verdict and margin)."""
    w = result.worst_case
    if result.verdict != "disagrees" or not w:
        return []
    lines = [f"  {bug_line(result)}", f"  worst case: {_one(w['headline'])}", f"  repro: {_one(w[C.repro])}"]
    if w.get("detail"):  # what the row says of itself: a write into an input, an output dtype
        lines.append(f"    detail: {_one(w['detail'])}")
    return lines


def bug_line(result: CheckResult) -> str:
    """The diagnosis in one line (analysis/answer.py: a run's rows say the same)."""
    return answer.bug_line(result.diagnosis, result.report.results, result.convention)


def note_lines(result: CheckResult) -> list[str]:
    """The cases that could not run or were excused, and what the check assumed (eps, operands,
    output dtype, layouts), then an agreeing check's margin."""
    lines = []
    for group in result.not_run:
        lines.append(f"  could not run, {_one(group['dtype'])} ({group['cases']} case(s), "
                     f"e.g. {_one(group['example'])}): {group['reason']}")
    for finding in result.known_findings:
        lines.append(f"  known finding, {finding['cases']} case(s), e.g. {_one(finding['example'])}: "
                     f"{finding['explanation']}")
    if result.eps_note:
        lines.append(f"  eps: {result.eps_note}")
    if result.operand_note:
        lines.append(f"  operands: {result.operand_note}")
    lines += [f"  {note}" for note in (result.call_note, result.backward_note) if note]
    if result.output_dtype:
        lines.append(f"  output dtype: {_one(result.output_dtype)}")
    if result.layouts_skipped:
        lines.append(f"  layouts: {result.layouts_skipped}")
    if result.margin:
        m = result.margin
        lines.append(f"  margin: worst {against_a_budget(m['worst_ulp'], m['budget_ulp'])} "
                     f"({_one(m['case_id'])}); {m['identical']} of {m['of']} cases bit-identical to the exact result "
                     "rounded")
    return lines + on_device.lines(result.device)


def _diagnosis_lines(result: CheckResult) -> list[str]:
    """The diagnosis's evidence, under the bug line: the fits, how much the best match explains,
    its symptom, the runners-up. The fix is here only when the bug line could not name it."""
    d = result.diagnosis
    if result.verdict != "disagrees":
        return []
    lines = [f"  fitted: {f.says}" for f in d.fits]
    if d.matches:
        best = d.matches[0]
        if best.convincing:
            lines.append(f"  diagnosis: looks like {best.name} -- matches {best.matched} of the {best.of} disagreeing "
                         "cases examined, within rounding")
        else:
            lines.append(f"  diagnosis: closest is {best.name}, which explains only {best.matched} of the {best.of} "
                         "disagreeing cases examined")
        if best.symptom:
            lines.append(f"    {best.symptom}")
        if not best.convincing:
            lines.append(f"    fix: {best.fix}")
        lines += [f"    also possible: {m.name} ({m.matched}/{m.of})" for m in d.matches[1:3]]
    return lines


def _side_by_side_lines(result: CheckResult) -> list[str]:
    """The worst case's worst row beside the reference, element by element."""
    w = result.worst_case
    if "yours" not in w:
        return []
    lines = [f"  worst case side by side: row {w['row']}, columns {_one(', '.join(w['columns']))}"]
    shown = ((w["input"], w["input"]),) if w["input"] else ()
    return lines + [f"    {name:<10} {columns(w[key], 10, 4)}" for name, key in
                    shown + (("reference", "reference"), ("yours", "yours"), ("ulp error", "ulp_error"))]


__all__ = ["check", "CheckResult", "describe", "summary", "TargetError"]
