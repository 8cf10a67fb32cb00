"""The `normdiff` command line. Exit codes: 0 all agree, 1 a non-mutant implementation disagrees
(or, with --baseline, a regression since the baseline), 2 usage error (unknown suite, op,
convention or implementation; malformed suite file; unusable baseline file; for `check`, a target
that cannot run at all), 3 for `check` a partial result (everything that ran agrees, some cases
could not run), 70 an internal error (a bug in normdiff: the traceback is printed so that it can be
reported).

Subcommands import what they need when they run, so `normdiff list` never pays for pandas or a
framework.
"""
from __future__ import annotations

import argparse
import json
import signal
import sys
import traceback

from normdiff.harness.data.errors import UsageError
from normdiff.harness.data.ops import OPS
from normdiff.implementations.frameworks import user_frameworks

USAGE_ERROR = 2
INTERNAL_ERROR = 70  # EX_SOFTWARE (sysexits.h)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="normdiff", description="Differential testing of LLM normalization layers.")
    sub = p.add_subparsers(dest="subcommand", required=True)
    run = sub.add_parser("run", help="run a suite over every available implementation and write a report")
    run.add_argument("--suite", default="default", help="suite name (normdiff list suites) or path to a .toml file")
    run.add_argument("--out", default="normdiff-report", help="report folder (default: %(default)s)")
    run.add_argument("--implementation", "-i", action="append", dest="implementations", metavar="NAME",
                     help="run only this implementation (repeatable)")
    run.add_argument("--timeout", type=float, default=60.0, help="seconds one call may take (default: %(default)s)")
    run.add_argument("--quiet", "-q", action="store_true", help="print nothing but errors")
    run.add_argument("--save-baseline", metavar="FILE", help="save this run's outcomes and errors as a "
                                                             "regression baseline (JSON)")
    run.add_argument("--baseline", metavar="FILE", help="compare with a saved baseline; exit 1 on a regression, "
                                                        "2 when FILE is unusable")
    repro = sub.add_parser("repro", help="replay one case against one implementation (a results.csv row)")
    repro.add_argument("case_id", metavar="CASE_ID", help="a case id from results.csv, e.g. "
                                                          "'rms_norm@qwen3/bf16/8x1024/normal/w=trained'")
    repro.add_argument("--implementation", "-i", required=True, metavar="NAME", help="registered implementation")
    repro.add_argument("--script", metavar="FILE.py", help="also write a self-contained Python script that "
                                                           "replays it without normdiff's runner")
    repro.add_argument("--timeout", type=float, default=60.0, help="seconds the call may take (default: %(default)s)")
    check = sub.add_parser("check", help="judge your own implementation and diagnose its bug")
    check.add_argument("target", nargs="?", help="FILE.py:NAME or package.module:NAME (a function or a module class)")
    check.add_argument("--op", required=True, help=", ".join(OPS))
    check.add_argument("--convention", required=True, help="the convention it claims (normdiff list conventions)")
    check.add_argument("--suite", default="default", help="suite whose cases of the op are run (default: %(default)s)")
    check.add_argument("--framework", choices=list(user_frameworks()), help="force the framework (default: detected)")
    check.add_argument("--command", help="an implementation in any language: a command normdiff runs with "
                                         "INPUT.safetensors OUTPUT.safetensors appended (README)")
    check.add_argument("--eps", type=float, help="your model's eps: the cases that run at the convention's config "
                                                 "eps run at this one (the suite's other eps values still run)")
    check.add_argument("--timeout", type=float, default=60.0, help="seconds one call may take (default: %(default)s)")
    check.add_argument("--json", action="store_true", help="print exactly one JSON object")
    explain = sub.add_parser("explain", help="teaching view of a catalogued bug (no argument: the table)")
    explain.add_argument("bug", nargs="?", help="bug id (normdiff list bugs)")
    explain.add_argument("--suite", default="default", help="suite whose cases are run (default: %(default)s)")
    explain.add_argument("--plot", metavar="FILE.png", help="also draw the error against the input regime")
    lst = sub.add_parser("list", help="list implementations, conventions, suites, ops or bugs")
    lst.add_argument("what", choices=["implementations", "conventions", "suites", "ops", "bugs"])
    lst.add_argument("--json", action="store_true", help="print JSON instead of a table")
    return p


def main(argv: list[str] | None = None) -> int:
    if hasattr(signal, "SIGPIPE"):  # `normdiff list bugs | head` ends quietly
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    args = _parser().parse_args(argv)
    try:
        return {"run": _run, "list": _list, "explain": _explain, "check": _check,
                "repro": _repro}[args.subcommand](args)
    except UsageError as exc:  # unknown names and malformed suites: the message says what to fix
        print(f"normdiff: error: {exc}", file=sys.stderr)
        return USAGE_ERROR
    except Exception:  # a bug of ours: say so, with the traceback to report
        traceback.print_exc()
        print("normdiff: internal error (a bug in normdiff, not in your input); please report it with the "
              "traceback above", file=sys.stderr)
        return INTERNAL_ERROR


def _run(args) -> int:
    from normdiff.cases import suites
    from normdiff.harness import api
    from normdiff.reports.progress import progress_printer

    impls = api.select(args.implementations)
    suite, base = suites.load(args.suite), None
    if args.baseline or args.save_baseline:
        from normdiff.reports import baseline
    if args.baseline:  # an unusable baseline stops the run before it starts (exit 2)
        base = baseline.load(args.baseline)
        baseline.check_suite(base, suite.name)
    report = api.run_suite(suite, impls, timeout=args.timeout, keep_outputs="worst",
                           progress=None if args.quiet else progress_printer())
    from normdiff.reports import render

    comparison = baseline.attach(report, base) if base is not None else None
    out = render.write(report, args.out)
    if args.save_baseline:
        baseline.save(report, args.save_baseline)
    if not args.quiet:
        print(render.terminal(report))
        if comparison is not None:
            print(comparison.terminal())
        print(f"{report.meta['cases']} cases in {report.meta['seconds']:.1f} s; report written to {out}/"
              + (f"; baseline saved to {args.save_baseline}" if args.save_baseline else ""))
    elif comparison is not None and (comparison.warnings or comparison.exit_code):
        print(comparison.terminal(), file=sys.stderr)
    return report.meta["exit_code"]


def _repro(args) -> int:
    from normdiff.harness.commands import repro

    case, impl = repro.resolve(args.case_id, args.implementation)
    replay = repro.replay(case, impl, timeout=args.timeout)
    print(repro.describe(replay))
    if args.script:
        path = repro.write_script(case, impl, args.script, replay)
        print(f"\nscript written to {path}; run it with: python {path}")
    return replay.exit_code


def _check(args) -> int:
    from normdiff.harness.commands import check, usercode

    target = args.target or args.command
    try:
        if args.command and args.target:
            raise usercode.TargetError("give either a target or --command, not both")
        if args.command:
            from normdiff.implementations.command import command_implementation, command_problem

            problem = command_problem(args.command)
            if problem:  # fail fast: no suite run for a program that cannot start
                raise usercode.TargetError(problem)
            impl = command_implementation(args.command, args.op, args.convention, timeout=args.timeout)
        elif args.target:
            impl = usercode.user_implementation(args.target, args.op, args.convention, args.framework)
        else:
            raise usercode.TargetError("nothing to check: give FILE.py:NAME or --command")
        result = check.check(impl, args.suite, timeout=args.timeout, eps=args.eps)
    except usercode.TargetError as exc:
        result = check.CheckResult("error", args.op, args.convention, str(target),
                                   "command" if args.command else (args.framework or "detected"),
                                   {"total": 0, "agree": 0, "disagree": 0, "error": 0}, message=str(exc))
    if args.json:
        print(json.dumps(result.as_dict(), default=_json_default))
    else:
        print(check.describe(result, target or ""))
    return result.exit_code


def _json_default(value):
    import numpy as np

    return value.item() if isinstance(value, np.generic) else str(value)


def _explain(args) -> int:
    from normdiff.harness.commands import explain

    print(explain.explain(args.bug, args.suite, args.plot) if args.bug else explain.bug_table())
    return 0


def _list(args) -> int:
    from normdiff.cases import suites
    from normdiff.harness.data.conventions import CONVENTIONS
    from normdiff.implementations import registry

    if args.what == "implementations":
        rows = [{"name": i.name, "kind": i.kind, "framework": i.framework,
                 "available": i.unavailable_reason() is None, "reason": i.unavailable_reason() or "",
                 "op_conventions": sorted(f"{op}@{conv}" for op, conv in i.op_conventions),
                 "description": i.description}
                for i in registry.implementations()]
    elif args.what == "conventions":
        rows = [{"name": c.name, "summary": c.summary,
                 "contracts": {op: {"formula": k.describe(), **k.knobs()} for op, k in c.contracts.items()}}
                for c in CONVENTIONS.values()]
    elif args.what == "bugs":
        from normdiff.harness.data.bugs import BUGS

        rows = [{"name": b.id, **b.as_dict()} for b in BUGS.values()]
    elif args.what == "ops":
        rows = [{"name": o.name, "signature": o.signature, "summary": o.summary, "inputs": list(o.inputs),
                 "knobs": list(o.knobs)} for o in OPS.values()]
    else:
        rows = []
        for name in suites.available():
            suite = suites.load(name)
            rows.append({"name": name, "cases": len(suite), "description": suite.description})
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        for row in rows:
            print(_list_line(args.what, row))
    return 0


def _list_line(what: str, row: dict) -> str:
    if what == "implementations":
        state = "available" if row["available"] else f"unavailable: {row['reason']}"
        return f"{row['name']:<12} {row['kind']:<9} {row['framework']:<6} {len(row['op_conventions']):>3} op@conventions  {state}"
    if what == "conventions":
        ops = "; ".join(f"{op}: {c['formula']}" for op, c in row["contracts"].items())
        return f"{row['name']:<11} {row['summary']}\n{'':<11} {ops}"
    if what == "ops":
        return f"{row['signature']:<40} {row['summary']}"
    if what == "bugs":
        return f"{row['id']:<25} {row['op'] + '@' + row['convention']:<24} {row['symptom']}"
    return f"{row['name']:<10} {row['cases']:>4} cases  {row['description']}"


if __name__ == "__main__":
    sys.exit(main())
