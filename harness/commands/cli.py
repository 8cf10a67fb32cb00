"""The `normdiff` command line. Exit codes: 0 all agree, 1 a non-mutant implementation disagrees
(or, with --baseline, a regression since the baseline), 2 usage error (unknown suite, op,
convention or implementation; malformed suite file; unusable baseline file; for `check`, a target
that cannot run at all; a file or report the machine refused to write, a full disk: for `run` always,
the summary still printed, for a file `check`, `repro` or `explain` writes besides their answer
instead of 0), 3 for `check` a partial result (everything that ran agrees, some cases
could not run; without --convention: no convention agrees on every case, some on every case that
ran), and for `check` without --convention 0 when it agrees with a convention and 1 when with none,
70 an internal error (a bug in normdiff: the traceback is printed so that it can be
reported).

Subcommands import what they need when they run, so `normdiff list` never pays for pandas or a
framework.
"""
from __future__ import annotations

import argparse
import json
import math
import signal
import sys
import traceback

from normdiff import __version__, interrupts, processes
from normdiff.harness.data import inputs, names
from normdiff.harness.data.errors import OutputError, UsageError
from normdiff.harness.data.ops import OPS
from normdiff.implementations.frameworks import user_frameworks
from normdiff.text import general, printable, seconds, unbreakable_streams

USAGE_ERROR = 2
INTERNAL_ERROR = 70  # EX_SOFTWARE (sysexits.h)


# Old spellings of a flag, still read so that scripts keep working, each with a warning that names
# the new one (one dialect: `--target` is your code and `--command` a program, in every subcommand).
RENAMED = {"--with": "--target", "--with-command": "--command"}


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad command line is a UsageError like any other: main prints it once, as
    text or (with --json) as the one JSON object, and exits 2."""

    def error(self, message):
        raise _ParseError(f"{message} (normdiff {self.prog.partition(' ')[2] or ''} --help shows an example)"
                          .replace("normdiff  --help", "normdiff --help"), self.format_usage())


class _ParseError(UsageError):
    def __init__(self, message: str, usage: str):
        super().__init__(message)
        self.usage = usage


def _warn_renamed(option: str | None) -> None:
    if option in RENAMED:
        print(f"normdiff: warning: {option} is deprecated; write {RENAMED[option]} (same meaning)", file=sys.stderr)


class _Store(argparse.Action):
    """A plain store that warns when the flag was given by an old spelling."""

    def __call__(self, parser, namespace, value, option=None):
        _warn_renamed(option)
        setattr(namespace, self.dest, value)


class _With(argparse.Action):
    """`--target TARGET` / `--command CMD` start a user implementation for `run`; the options
    after it (--op, --convention, --call, ...) apply to it."""

    def __call__(self, parser, namespace, value, option=None):
        _warn_renamed(option)
        namespace.withs = (getattr(namespace, "withs", None) or []) + [{self.dest: value}]


class _ForWith(argparse.Action):
    def __call__(self, parser, namespace, value, option=None):
        withs = getattr(namespace, "withs", None)
        if not withs:
            parser.error(f"{option} applies to the --target before it: give --target TARGET (or --command CMD) first")
        if self.dest in withs[-1]:
            parser.error(f"{option} given twice for --target {next(iter(withs[-1].values()))}")
        withs[-1][self.dest] = value


def _seconds(text: str) -> float:
    """A --timeout: a finite number of seconds above 0, at most a day (nan, inf, 0, negatives and
    1e10, which would overflow a thread's wait, are refused)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds, e.g. 60") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: give a finite number of seconds above 0, e.g. 60")
    if value > inputs.MAX_SECONDS:
        raise argparse.ArgumentTypeError(f"{text!r}: give at most {inputs.MAX_SECONDS} seconds (one day)")
    return value


def _eps(text: str) -> float:
    """An --eps: a finite number above 0 (nan, inf, 0 and negatives are no eps)."""
    try:
        return inputs.positive(float(text), "--eps")
    except ValueError:  # not a number, or not one above 0 (a UsageError)
        raise argparse.ArgumentTypeError(f"{text!r}: give a finite number above 0, e.g. 1e-6") from None


def _path(what: str, noun: str = "path"):
    """An argparse type: a path, not empty (an empty --out would be the current folder; an empty
    --save-baseline or --script was dropped without a word; an empty checkpoint read the current
    folder). With `noun` "target" or "command", nor only spaces: an empty target names no code."""
    def parse(text: str) -> str:
        if not (text if noun == "path" else text.strip()):
            raise argparse.ArgumentTypeError(f"an empty {noun}: give {what}")
        return text
    parse.__name__ = noun
    return parse


_FOLDER = _path("a folder name, e.g. --out report")
_TARGET = _path("FILE.py:NAME, package.module:NAME or FILE.onnx", "target")
_COMMAND = _path("the program to run and its arguments, e.g. --command './my_norm --fast'", "command")
_CHECKPOINT = _path("a .safetensors or .gguf file, or a checkpoint's folder")


def _known(kind: str):
    """The names of `kind` a user may type, imported only when such a name is given."""
    if kind == "op":
        return OPS
    if kind == "convention":
        from normdiff.harness.data.conventions import CONVENTIONS
        return CONVENTIONS
    if kind == "implementation":
        from normdiff.implementations import registry
        return [i.name for i in registry.implementations()]
    if kind == "bug":
        from normdiff.harness.data.backward_bugs import BACKWARD_BUGS
        from normdiff.harness.data.bugs import BUGS
        return {**BUGS, **BACKWARD_BUGS}
    if kind == "suite":
        from normdiff.cases import suites
        return suites.available()
    if kind == "dtype":
        from normdiff.harness.data.dtypes import _ALIASES, FORMATS
        return [*FORMATS, *_ALIASES]
    from normdiff.cases.regimes import INPUT_REGIMES
    return INPUT_REGIMES


def resolve_name(kind: str, text: str) -> str:
    """The known name of `kind` that `text` means (case and -, _, ., spaces aside), or a UsageError
    suggesting the nearest. A suite may also be a .toml path, a regime carry its :parameter, and a
    dtype be an alias (bf16), read as the dtype it names."""
    if kind == "suite" and text.endswith(".toml"):
        return text
    if kind == "regime":
        name, sep, param = text.partition(":")
        return names.resolve("input regime", name, _known(kind)) + sep + param
    name = names.resolve(kind, text, _known(kind), f"normdiff list {kind}s")
    if kind == "dtype":
        from normdiff.harness.data.dtypes import get_format
        return get_format(name).name
    return name


def _name(kind: str, known=None):
    """An argparse type: a `kind` name (one of `known`, when given), resolved (argparse shows an
    ArgumentTypeError's message)."""
    def parse(text: str) -> str:
        try:
            return names.resolve(kind, text, known) if known else resolve_name(kind, text)
        except UsageError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    parse.__name__ = kind
    return parse


def _timeout_options(p) -> None:
    p.add_argument("--timeout", type=_seconds, default=60.0, help="seconds one call may take; importing an "
                   "implementation may take as long, at least 15 s (default: %(default)s)")
    p.add_argument("--keep-calling", action="store_true", help="after a call times out, still make that "
                   "implementation's other calls (default: they are reported as not run)")


def _pass_option(p, command: bool = True) -> None:
    """--pass; its help speaks of --command only where the subcommand has one."""
    p.add_argument("--pass", dest="passes", choices=["forward", "backward", "both"], default=None,
                   help="which pass to judge: the forward's y, the backward's gradients (dx, dw, dgate), or both "
                        "(default: both" + ("; a --command is a forward unless --pass says it also has a backward)"
                                            if command else ")"))


def _json_option(p) -> None:
    p.add_argument("--json", action="store_true", help="print exactly one JSON object (a usage error too: "
                                                       "{\"error\": ..., \"exit_code\": 2})")


def _sub(sub, name: str, summary: str, example: str):
    """A subcommand: its one-line summary in the top-level help, one example in its own."""
    return sub.add_parser(name, help=summary, description=f"{summary[0].upper()}{summary[1:]}.",
                          epilog=f"example:\n  {example}", formatter_class=argparse.RawDescriptionHelpFormatter)


def _command_passes(asked: str | None) -> tuple[str, ...]:
    """The passes a --command implements: the forward, unless --pass was given (the protocol's
    backward call is one a command must be written for: implementations/command.py)."""
    return {None: ("forward",), "both": ("forward", "backward")}.get(asked, (asked,))


def _user_code_options(p, action=None, what: str = "") -> None:
    """How a user's target is called: the same flags for check, repro and each run --with."""
    extra = {"action": action} if action else {}
    p.add_argument("--framework", choices=list(user_frameworks()), help=f"force the framework{what} (default: detected)",
                   **extra)
    p.add_argument("--call", metavar="TEMPLATE", help=f"how to call it{what}, e.g. 'f(x, scale=weight, axis=-1, "
                                                      "epsilon=eps)' (docs/check.md: calls)", **extra)
    p.add_argument("--init", metavar="TEMPLATE", help=f"how to build a class or a graph{what}, e.g. "
                                                      "'Cls(dim, epsilon=eps)'", **extra)
    p.add_argument("--weight-attr", metavar="NAME", help=f"the parameter that holds the gain{what} (default: the "
                                                         "one of the weight's shape)", **extra)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="normdiff", description="Differential testing of LLM normalization layers.",
                epilog="example:\n  normdiff check my_norm.py:rms_norm --op rms_norm --convention qwen3\n"
                       "normdiff SUBCOMMAND --help shows its flags and an example.",
                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"normdiff {__version__}")
    sub = p.add_subparsers(dest="subcommand", required=True, metavar="SUBCOMMAND")
    _run_parser(sub)
    _repro_parser(sub)
    _check_parser(sub)
    _explain_parser(sub)
    _fuzz_parser(sub)
    _weights_parser(sub)
    _model_parser(sub)
    _list_parser(sub)
    return p


def _run_parser(sub) -> None:
    run = _sub(sub, "run", "run a suite over every available implementation and write a report",
               "normdiff run --suite smoke -i numpy -i torch --out report")
    run.add_argument("--suite", default="default", type=_name("suite"),
                     help="suite name (normdiff list suites) or path to a .toml file")
    run.add_argument("--out", default="normdiff-report", type=_FOLDER, help="report folder (default: %(default)s)")
    run.add_argument("--implementation", "-i", action="append", dest="implementations", metavar="NAME",
                     type=_name("implementation"), help="run only this implementation (repeatable)")
    _timeout_options(run)
    _pass_option(run)
    run.add_argument("--quiet", "-q", action="store_true", help="print nothing but errors")
    run.add_argument("--dask", metavar="ADDRESS", help="shard the run over a Dask cluster: its scheduler's "
                     "address (tcp://HOST:8786), or 'local' for one on this machine (docs/dask.md; needs "
                     "`pip install 'normdiff[dask]'`)")
    run.add_argument("--save-baseline", metavar="FILE", type=_path("a file name, e.g. --save-baseline base.json"),
                     help="save this run's outcomes and errors as a regression baseline (JSON)")
    run.add_argument("--baseline", metavar="FILE", type=_path("the file --save-baseline wrote"),
                     help="compare with a saved baseline; exit 1 on a regression, 2 when FILE is unusable")
    run.add_argument("--full", action="store_true",
                     help="also run the runtimes of the full tier (keras, tinygrad, torch.compile, an HF export "
                          "through onnxruntime), whose imports and compilations would more than double the "
                          "default run (normdiff list implementations shows each one's tier)")
    run.add_argument("--target", "--with", action=_With, dest="target", metavar="TARGET", type=_TARGET,
                     help="also run your implementation (as for check; repeatable): --op and --convention, and "
                          "--call / --init / --framework / --weight-attr, follow it (--with: old spelling)")
    run.add_argument("--command", "--with-command", action=_With, dest="command", metavar="CMD", type=_COMMAND,
                     help="also run an implementation in any language (as check --command; repeatable; "
                          "--with-command: old spelling)")
    run.add_argument("--op", action=_ForWith, type=_name("op"), help="the op of the --target before it")
    run.add_argument("--convention", action=_ForWith, type=_name("convention"),
                     help="the convention the --target before it claims")
    _user_code_options(run, _ForWith, " (of the --target before it)")
    _json_option(run)
    run.set_defaults(withs=[])


def _repro_parser(sub) -> None:
    repro = _sub(sub, "repro", "replay one case against one implementation (a results.csv row)",
                 "normdiff repro 'rms_norm@qwen3/bf16/8x1024/normal/w=trained' -i numpy")
    repro.add_argument("case_id", metavar="CASE_ID", help="a case id from results.csv, e.g. "
                                                          "'rms_norm@qwen3/bf16/8x1024/normal/w=trained'")
    which = repro.add_mutually_exclusive_group(required=True)
    which.add_argument("--implementation", "-i", metavar="NAME", type=_name("implementation"),
                       help="registered implementation")
    which.add_argument("--target", type=_TARGET,
                       help="your implementation, as for check (FILE.py:NAME, package.module:NAME, FILE.onnx)")
    which.add_argument("--command", type=_COMMAND, help="an external command, as for check --command")
    repro.add_argument("--op", type=_name("op"), help="the case's op (optional: the case id says it)")
    repro.add_argument("--convention", type=_name("convention"),
                       help="the case's convention (optional: the case id says it)")
    _user_code_options(repro)
    repro.add_argument("--script", metavar="FILE.py", type=_path("a file name, e.g. --script replay.py"),
                       help="also write a self-contained Python script that replays it without normdiff's runner")
    repro.add_argument("--timeout", type=_seconds, default=60.0, help="seconds the call may take (default: %(default)s)")
    _pass_option(repro)
    _json_option(repro)


def _check_parser(sub) -> None:
    check = _sub(sub, "check", "judge your own implementation and diagnose its bug",
                 "normdiff check my_norm.py:rms_norm --op rms_norm --convention qwen3")
    check.add_argument("target", nargs="?", type=_TARGET, help="FILE.py:NAME, package.module:NAME (a function, a "
                       "module class or a graph factory) or FILE.onnx (or give it as --target)")
    check.add_argument("--target", dest="target_flag", metavar="TARGET", type=_TARGET, help="the same as the "
                       "positional TARGET (the spelling run, repro, fuzz and model take)")
    check.add_argument("--op", required=True, type=_name("op"), help=", ".join(OPS))
    check.add_argument("--convention", "-c", type=_name("convention"),
                       help="the convention it claims (normdiff list conventions). Without it, check identifies "
                            "the contract: it judges the code under every convention that defines the op and "
                            "names those it agrees with (exit 0), or the closest and what differs (exit 1)")
    check.add_argument("--suite", default="default", type=_name("suite"),
                       help="suite whose cases of the op are run (default: %(default)s)")
    _user_code_options(check)
    check.add_argument("--command", help="an implementation in any language: a command normdiff runs with "
                                         "INPUT.safetensors OUTPUT.safetensors appended (docs/other-languages.md)")
    check.add_argument("--eps", type=_eps, help="your model's eps: the cases that run at the convention's config "
                                                 "eps run at this one (the suite's other eps values still run)")
    _case_filters(check)
    _timeout_options(check)
    _pass_option(check)
    check.add_argument("--out", metavar="DIR", type=_FOLDER, help="also write the report folder run writes "
                                                                  "(results.csv, summary.md, report.html, junit.xml)")
    _json_option(check)


def _case_filters(p) -> None:
    """--dtype and --regime, as check and fuzz take them."""
    p.add_argument("--dtype", action="append", dest="dtypes", default=[], metavar="DTYPE", type=_name("dtype"),
                   help="only the cases of this dtype (bfloat16, float16, float32; repeatable)")
    p.add_argument("--regime", action="append", dest="regimes", default=[], metavar="REGIME", type=_name("regime"),
                   help="only the cases of this input regime (normal, tiny_rms, tiny_rms:1e-3, ...; repeatable)")


def _explain_parser(sub) -> None:
    explain = _sub(sub, "explain", "teaching view of a catalogued bug (no argument: the table)",
                   "normdiff explain eps-outside-sqrt")
    explain.add_argument("bug", nargs="?", type=_name("bug"), help="bug id (normdiff list bugs)")
    explain.add_argument("--suite", default="default", type=_name("suite"),
                         help="suite whose cases are run (default: %(default)s)")
    explain.add_argument("--plot", metavar="FILE.png", type=_path("a file name, e.g. --plot bug.png"),
                         help="also draw the error against the input regime")
    _pass_option(explain, command=False)
    _json_option(explain)


def _weights_parser(sub) -> None:
    wts = _sub(sub, "weights", "a checkpoint's norm weights: statistics, storage (w or 1 + w), and what a "
                               "conversion did to them", "normdiff weights model/ --against original/")
    wts.add_argument("checkpoint", type=_CHECKPOINT, help="a .safetensors file or a folder of them (with its "
                     "config.json, the model's classes say which storage each norm expects)")
    wts.add_argument("--against", metavar="ORIGINAL", type=_CHECKPOINT, help="the checkpoint it was converted from: "
                     "each norm tensor's fold (+1, +2, missing, where none belongs) is judged; exit 1 when one is "
                     "wrong")
    _json_option(wts)


def _list_parser(sub) -> None:
    lst = _sub(sub, "list", "list implementations, conventions, suites, ops, bugs, layouts or models "
                            "(normdiff model's families)", "normdiff list conventions")
    whats = ["implementations", "conventions", "suites", "ops", "bugs", "layouts", "models"]
    lst.add_argument("what", choices=whats, type=_name("list", whats), help=", ".join(whats))
    lst.add_argument("--json", action="store_true", help="print JSON instead of a table")


def main(argv: list[str] | None = None) -> int:
    if hasattr(signal, "SIGPIPE"):  # `normdiff list bugs | head` ends quietly
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    unbreakable_streams()  # a name in any script prints under LANG=C too
    try:
        with interrupts.handled():
            args = _parser().parse_args(argv)
            if hasattr(args, "passes"):
                args.command_passes, args.passes = _command_passes(args.passes), args.passes or "both"
            # as the normdiff program (not called from someone's process, whose other children are
            # not ours), adopt escaped grandchildren of the workers and end them all on the way out
            own_process = argv is None
            if own_process:
                processes.become_subreaper()
            try:
                return {"run": _run, "list": _list, "explain": _explain, "check": _check,
                        "repro": _repro, "fuzz": _fuzz, "weights": _weights, "model": _model}[args.subcommand](args)
            finally:
                if own_process:
                    processes.kill_descendants()
    except UsageError as exc:  # unknown names and malformed suites: the message says what to fix
        as_json = "--json" in (sys.argv[1:] if argv is None else argv)
        if getattr(exc, "kept", "") and not as_json:  # what was computed before a file was refused
            print(exc.kept)
        _usage_error(exc, as_json)
        return USAGE_ERROR
    except KeyboardInterrupt as exc:  # Ctrl-C, SIGTERM, SIGHUP: one line, the shell's exit status
        stop = interrupts.as_interrupted(exc)
        print(f"normdiff: stopped by {stop.name}; {getattr(stop, 'said', 'nothing was written')}", file=sys.stderr)
        return stop.exit_code
    except Exception:  # a bug of ours: say so, with the traceback to report
        traceback.print_exc()
        print("normdiff: internal error (a bug in normdiff, not in your input); please report it with the "
              "traceback above", file=sys.stderr)
        return INTERNAL_ERROR


def _usage_error(exc: UsageError, as_json: bool) -> None:
    """With --json, the one JSON object stdout promises (a script parses it, error or not); else
    the usage line of a bad command line and the message on stderr."""
    if as_json:
        print(json.dumps({"error": str(exc), "exit_code": USAGE_ERROR}))
        return
    if isinstance(exc, _ParseError):
        print(exc.usage, end="", file=sys.stderr)
    print(f"normdiff: error: {printable(exc)}", file=sys.stderr)


def _partial(stop: interrupts.Interrupted, out) -> None:
    """Write what a stopped run computed into `out`, marked incomplete, and say so in the one line
    the CLI prints. A second signal while writing leaves the folder as it was."""
    if stop.partial is None or not out:
        stop.said = "nothing was computed yet, nothing was written" if stop.partial is None else "nothing was written"
        return
    from normdiff.reports import render

    try:
        written = render.write(stop.partial, out)
    except KeyboardInterrupt:
        stop.said = f"stopped again while writing; {out} is as it was"
        return
    except OutputError as exc:  # a full disk: the stop is still what is reported (its exit status)
        stop.said = f"the partial results could not be written: {printable(exc, newlines=False)}"
        return
    stop.said = f"partial results ({stop.partial.meta['incomplete']}) written to {written}/, marked incomplete"


def _run(args) -> int:
    from normdiff.cases import suites
    from normdiff.harness import api
    from normdiff.reports import folder
    from normdiff.reports.progress import progress_printer

    folder.check_folder(args.out)  # before any work: a run must never be computed and then lost
    if args.save_baseline:
        folder.check_file(args.save_baseline, "--save-baseline")
    impls = api.select(args.implementations, full=args.full) + _with_implementations(args.withs, args.timeout,
                                                                                    args.command_passes)
    suite, base = suites.for_pass(suites.load(args.suite), args.passes), None
    if args.baseline or args.save_baseline:
        from normdiff.reports import baseline
    if args.baseline:  # an unusable baseline stops the run before it starts (exit 2)
        base = baseline.load(args.baseline)
        baseline.check_suite(base, suite.name)
    try:
        report = api.run_suite(suite, impls, timeout=args.timeout, keep_outputs="worst", passes=args.passes,
                               progress=None if args.quiet or args.json else progress_printer(),
                               keep_calling=args.keep_calling,
                               dask=args.dask)
    except interrupts.Interrupted as stop:
        _partial(stop, args.out)
        raise
    from normdiff.reports import render

    comparison = baseline.attach(report, base) if base is not None else None
    # the report folder is what a run is for: a write the machine refuses (a full disk) exits 2,
    # after the baseline is saved all the same and the summary is printed (README: Under faults)
    lost, out, saved = [], None, None
    try:
        out = render.write(report, args.out)
    except OutputError as exc:
        lost.append(exc)
    if args.save_baseline:
        try:
            saved = baseline.save(report, args.save_baseline)
        except OutputError as exc:
            lost.append(exc)
    code = USAGE_ERROR if lost else report.meta["exit_code"]
    if args.json:
        print(json.dumps(_jsonable({"exit_code": code, "cases": report.meta["cases"],
                                    "seconds": report.meta["seconds"], "report": str(out) if out else None,
                                    "baseline_saved": str(saved) if saved else None,
                                    "baseline_exit_code": comparison.exit_code if comparison is not None else None,
                                    **({"error": "; ".join(map(str, lost)), "run_exit_code": report.meta["exit_code"]}
                                       if lost else {}),
                                    "summary": report.summary.to_dict("records")}), default=_json_default))
        return code
    if not args.quiet:
        print(render.terminal(report))
        if comparison is not None:
            print(comparison.terminal())
        print(f"{report.meta['cases']} cases in {seconds(report.meta['seconds'])}"
              + (f"; report written to {out}/" if out else "") + (f"; baseline saved to {saved}" if saved else ""))
    elif comparison is not None and (comparison.warnings or comparison.exit_code):
        print(comparison.terminal(), file=sys.stderr)
    for exc in lost:
        _refused(exc, f"; the run's own exit status: {report.meta['exit_code']}")
    return code


def _refused(exc: OutputError, then: str = "") -> None:
    """A file the machine refused to write, in one line on stderr after everything else."""
    print(f"normdiff: error: {printable(exc, newlines=False)}{then}", file=sys.stderr)


def _with_implementations(withs: list[dict], timeout: float, command_passes=("forward",)) -> list:
    """The user implementations `run --with` adds; names made unique (a second rms_norm is
    called by its full target)."""
    from dataclasses import replace

    from normdiff.harness.commands import usercode

    impls, names = [], set()
    for spec in withs:
        given = spec.get("target") or spec.get("command")
        missing = [flag for flag in ("op", "convention") if not spec.get(flag)]
        if missing:
            raise UsageError(f"--target {given}: give {' and '.join('--' + m for m in missing)} after it")
        impl = usercode.user_code_implementation(spec, spec["op"], spec["convention"], timeout, passes=command_passes)
        if impl.name in names:  # renamed, not built again (its target is located and parsed once)
            impl = replace(impl, name=given, worker="")
        if impl.name in names:
            raise UsageError(f"--target {given} is given twice")
        names.add(impl.name)
        impls.append(impl)
    return impls


def _repro(args) -> int:
    from normdiff.harness.commands import repro, usercode
    from normdiff.reports import folder

    if args.script:
        folder.check_file(args.script, "--script")

    if args.implementation:
        case, impl = repro.resolve(args.case_id, args.implementation)
    else:
        case = repro.case_for(args.case_id, args.op, args.convention)
    if args.passes != "both" and case.pass_ != args.passes:
        raise UsageError(f"{case.id} is a {case.pass_} case (its id {'names dy=' if case.dy else 'has no dy='}); "
                         f"--pass {args.passes} replays only {args.passes} cases: drop --pass or give a "
                         + ("forward case id (without dy=/out=)" if args.passes == "forward" else
                            "backward case id (with dy=REGIME/out=dx)"))
    if not args.implementation:
        impl = usercode.user_code_implementation(vars(args), case.op, case.convention, args.timeout, passes=(case.pass_,))
    replay = repro.replay(case, impl, timeout=args.timeout)
    path = lost = None
    if args.script:
        try:
            path = repro.write_script(case, impl, args.script, replay)
        except OutputError as exc:  # the replay is printed; its status stands, but never 0
            lost = exc
    code = _with_lost(replay.exit_code, lost)
    if args.json:
        print(json.dumps(_jsonable({"case": case.id, "implementation": impl.name, "exit_code": code,
                                    "row": replay.row, "script": str(path) if path else None,
                                    **({"error": str(lost)} if lost else {})}),
                         default=_json_default))
        return code
    print(repro.describe(replay))
    if path:
        print(f"\nscript written to {path}; run it with: python {path}")
    if lost:
        _refused(lost)
    return code


def _with_lost(code: int, lost: OutputError | None) -> int:
    """The exit status of a command whose own answer was printed but whose file (--script, check's
    --out, --plot) the machine refused: its own status when that reports something (1, 3), else 2,
    so that 0 never hides a file that is missing."""
    return USAGE_ERROR if lost is not None and code == 0 else code


def _check(args) -> int:
    """check TARGET --op OP --convention CONV; without --convention, the conventions it agrees
    with (harness/commands/identify.py)."""
    from normdiff.harness.commands import check, identify, usercode

    if args.target and args.target_flag:
        raise UsageError("give the target once: as TARGET or as --target TARGET")
    args.target = args.target or args.target_flag
    target = args.target or args.command
    written = lost = None
    if args.out:
        from normdiff.reports import folder

        folder.check_folder(args.out, "--out")
    try:
        if args.command and args.target:
            raise usercode.TargetError("give either a target or --command, not both")
        if not target:
            raise usercode.TargetError("nothing to check: give FILE.py:NAME, package.module:NAME, FILE.onnx or "
                                       "--command")
        options = dict(timeout=args.timeout, eps=args.eps, dtypes=args.dtypes, regimes=args.regimes,
                       keep_calling=args.keep_calling, passes=args.passes)
        try:
            if args.convention is None:
                impl = usercode.identifying_implementation(vars(args), args.op, args.timeout, args.command_passes)
                result = identify.identify(impl, args.suite, target=target, **options)
            else:
                impl = usercode.user_code_implementation(vars(args), args.op, args.convention, args.timeout,
                                                         passes=args.command_passes)
                result = check.check(impl, args.suite, **options)
        except interrupts.Interrupted as stop:
            _partial(stop, args.out)
            raise
        if args.out:
            from normdiff.reports import render

            try:
                written = render.write(result.report, args.out)
            except OutputError as exc:  # the verdict is printed; its status stands, but never 0
                lost = exc
    except usercode.TargetError as exc:
        result = _target_error(args, str(target), str(exc))
    code = _with_lost(result.exit_code, lost)
    if args.json:
        print(json.dumps({**result.as_dict(), "report": str(written) if written else None,
                          **({"exit_code": code, "error": str(lost)} if lost else {})}, default=_json_default))
        return code
    print(identify.describe(result) if args.convention is None else check.describe(result, target or ""))
    if written:
        print(f"  report written to {written}/")
    if lost:
        _refused(lost)
    return code


def _target_error(args, target: str, message: str):
    """check's result for a target that cannot run at all (exit 2), with or without --convention."""
    from normdiff.harness.commands import check, identify

    framework = "command" if args.command else (args.framework or "detected")
    if args.convention is None:
        return identify.Identification(args.op, target, target, framework, message=message)
    return check.CheckResult("error", args.op, args.convention, target, framework,
                             {"total": 0, "agree": 0, "disagree": 0, "error": 0}, message=message)


def _jsonable(value):
    """`value` with its NaNs as null: json.dumps would write NaN, which strict JSON parsers refuse."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def _json_default(value):
    import numpy as np

    return value.item() if isinstance(value, np.generic) else str(value)


def _at_least(least: int, most: int | None = None):
    """An argparse type: a whole number >= `least` (and <= `most`)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < least or (most is not None and value > most):
            raise argparse.ArgumentTypeError(f"{text!r}: give a whole number " + (
                f"from {least} to {most}" if most is not None else f">= {least}"))
        return value
    return parse


_whole = _at_least(1)  # a count
_seed = _at_least(0, inputs.MAX_SEED)


def _fuzz_parser(sub) -> None:
    from normdiff.harness.commands import fuzz as defaults  # light: Hypothesis is imported when it runs

    fz = _sub(sub, "fuzz", "search for a failing case with Hypothesis and shrink it to a minimal one",
              "normdiff fuzz --target my_norm.py:rms_norm --op rms_norm --convention qwen3 --max-time 60")
    fz.add_argument("--implementation", "-i", action="append", dest="implementations", default=[], metavar="NAME",
                    type=_name("implementation"),
                    help="a registered implementation to fuzz (repeatable; normdiff list implementations)")
    fz.add_argument("--target", "--with", dest="target", action=_Store, metavar="TARGET", type=_TARGET, help="your "
                    "implementation, as for check (FILE.py:NAME, package.module:NAME, FILE.onnx): give --op and "
                    "--convention (--with: old spelling)")
    fz.add_argument("--command", "--with-command", dest="command", action=_Store, metavar="CMD", type=_COMMAND,
                    help="an implementation in any language, as check --command (--with-command: old spelling)")
    fz.add_argument("--op", type=_name("op"), help="the op (for --target: its op; for -i: only this op)")
    fz.add_argument("--convention", "-c", type=_name("convention"),
                    help="the convention (for --target: the one it claims; for -i: only this one)")
    _user_code_options(fz, what=" (of --target)")
    _case_filters(fz)
    _pass_option(fz)
    fz.add_argument("--max-time", type=_seconds, metavar="SECONDS", help="search this long (default: "
                    f"{general(defaults.DEFAULT_MAX_TIME)} s unless --max-examples is given)")
    fz.add_argument("--max-examples", type=_at_least(1, defaults.MAX_EXAMPLES), metavar="N",
                    help=f"search at most N examples (at most {defaults.MAX_EXAMPLES})")
    fz.add_argument("--shrink-time", type=_seconds, default=defaults.DEFAULT_SHRINK_TIME, metavar="SECONDS",
                    help="seconds the shrink of a failure may take (default: %(default)s)")
    fz.add_argument("--seed", type=_seed, help="seed Hypothesis: the same examples in the same order "
                    "(default: a random seed, printed)")
    fz.add_argument("--max-rows", type=_whole, default=defaults.DEFAULT_MAX_ROWS, help="the most rows a case "
                    "has (default: %(default)s)")
    fz.add_argument("--max-width", type=_whole, default=defaults.DEFAULT_MAX_WIDTH, help="the widest a case is "
                    "(default: %(default)s)")
    fz.add_argument("--timeout", type=_seconds, default=defaults.DEFAULT_TIMEOUT, help="seconds one call may "
                    f"take; importing an implementation at least {general(defaults.MIN_LOAD_TIMEOUT)} s (default: %(default)s)")
    fz.add_argument("--no-database", action="store_true", help="neither replay nor save examples in "
                    "Hypothesis' example database (normdiff's cache)")
    _json_option(fz)
    fz.add_argument("--dask", metavar="ADDRESS", help="a campaign on the Dask cluster at ADDRESS (local: a "
                    "LocalCluster here): one search per implementation x op@convention, each with its own seed "
                    "and --max-time / --max-examples; exit 3 when nothing was found but a shard did not search")


def _fuzz(args) -> int:
    from normdiff.harness import api
    from normdiff.harness.commands import fuzz, usercode

    impls = api.select(args.implementations) if args.implementations else []
    given = args.target or args.command
    if args.target and args.command:
        raise UsageError("give --target TARGET or --command CMD, not both")
    if given:
        missing = [flag for flag in ("op", "convention") if not getattr(args, flag)]
        if missing:
            raise UsageError(f"--target {given}: give {' and '.join('--' + m for m in missing)}")
        impls.append(usercode.user_code_implementation(vars(args), args.op, args.convention, args.timeout,
                                              passes=args.command_passes))
    else:
        stray = [f"--{f.replace('_', '-')}" for f in ("framework", "call", "init", "weight_attr") if getattr(args, f)]
        if stray:
            raise UsageError(f"{', '.join(stray)} apply to --target TARGET, which is not given")
    if not impls:
        raise UsageError("nothing to fuzz: give -i NAME (normdiff list implementations) or --target TARGET --op OP "
                         "--convention CONV")
    options = dict(dtypes=args.dtypes, regimes=args.regimes, max_time=args.max_time, max_examples=args.max_examples,
                   timeout=args.timeout, shrink_time=args.shrink_time, max_rows=args.max_rows,
                   max_width=args.max_width, database=not args.no_database)
    if args.dask is not None:
        return _fuzz_campaign(args, impls, options)
    result = fuzz.fuzz(impls, op=args.op, convention=args.convention, passes=args.passes, seed=args.seed, **options)
    if args.json:
        print(json.dumps(result.as_dict(), default=_json_default))
    else:
        print(fuzz.describe(result))
    return result.exit_code


def _fuzz_campaign(args, impls, options) -> int:
    """fuzz --dask: each shard's line as it arrives (unless --json); stopped, the shards that
    finished are printed before the one line a stop gets."""
    from normdiff.harness.commands import fuzz_campaign

    progress = None if args.json else lambda shard, value: print(fuzz_campaign.describe_shard(shard, value),
                                                                 flush=True)
    seed = fuzz_campaign.new_seed() if args.seed is None else args.seed
    shards = fuzz_campaign.plan(impls, seed, args.passes, args.op, args.convention, **options)  # usage errors first
    if not args.json:
        print(fuzz_campaign.header(args.dask, len(shards), seed), flush=True)
    try:
        result = fuzz_campaign.campaign(impls, args.dask, seed=seed, passes=args.passes, op=args.op,
                                        convention=args.convention, progress=progress, shards=shards, **options)
    except interrupts.Interrupted as stop:
        if args.json and stop.partial is not None:
            print(json.dumps(stop.partial.as_dict(), default=_json_default))
        raise
    print(json.dumps(result.as_dict(), default=_json_default) if args.json
          else fuzz_campaign.describe(result, shards=False))
    return result.exit_code


def _weights(args) -> int:
    from normdiff.harness.commands import checkpoint, weights

    checkpoint.files(args.checkpoint)  # before any import: a wrong path is a usage error
    if args.against:
        checkpoint.files(args.against)
    report = weights.analyse(args.checkpoint, args.against)
    print(json.dumps(report.as_dict(), default=_json_default) if args.json else weights.describe(report))
    return report.exit_code


def _model_parser(sub) -> None:
    from normdiff.harness.commands.model import OLD_SPELLINGS
    from normdiff.implementations.hf_model_families import FAMILIES, KINDS

    m = _sub(sub, "model", "your norm classes in every site of a small HF model: each site judged, the first one "
                           "out of budget named, the logits compared",
             "normdiff model --family qwen3 --target norm=my_norm.py:RMSNorm")
    m.add_argument("--family", choices=list(FAMILIES), type=_name("family", list(FAMILIES)),
                   help="the model family to build (small config, nothing downloaded)")
    m.add_argument("--target", action="append", dest="targets", default=[], metavar="KIND=TARGET",
                   help="what computes the sites of KIND (" + "; ".join(f"{k}: {w}" for k, w in KINDS.items())
                        + "): a registered implementation's name, FILE.py:NAME or package.module:NAME (repeatable)")
    for kind in OLD_SPELLINGS:  # the old spellings: --norm TARGET is --target norm=TARGET
        RENAMED[f"--{kind}"] = f"--target {kind}=TARGET"
        m.add_argument(f"--{kind}", action=_Store, metavar="TARGET", help=argparse.SUPPRESS)
    m.add_argument("--quant-convention", metavar="CONVENTION", type=_name("convention"),
                   help="the quantizing convention of the quant and add_quant sites, one whose norm is the "
                        "family's (default: the one the target implements, else vllm-fp8; `normdiff list models` "
                        "names them)")
    m.add_argument("--command", action="append", dest="commands", default=[], metavar="KIND=CMD",
                   help="an implementation in any language for the sites of KIND (norm, qk, ...), as check "
                        "--command runs it (repeatable)")
    _user_code_options(m, what=" of a TARGET that is your code")
    m.add_argument("--dtype", action="append", dest="dtypes", metavar="DTYPE", type=_name("dtype"),
                   help="the model's dtype (default: "
                   "bfloat16; with --mutants each one given, default bfloat16, float16 and float32)")
    m.add_argument("--seed", type=_seed, default=0, help="the weights', the norms' and the tokens' seed "
                   "(default: %(default)s)")
    m.add_argument("--tokens", type=_whole, default=128, help="how many tokens the model reads (default: %(default)s)")
    m.add_argument("--timeout", type=_seconds, default=600.0, help="seconds the model run may take, imports "
                   "included (default: %(default)s)")
    m.add_argument("--mutants", action="store_true", help="the teaching table: each forward mutant swapped into "
                   "its sites, the first site out of budget, the logit error and the top-1 agreement")
    _json_option(m)


def _kind_value(flag: str, given: str, kinds) -> tuple[str, str]:
    """model's `--target KIND=TARGET` / `--command KIND=CMD`: the kind (resolved as a name) and the value."""
    kind, sep, value = given.partition("=")
    if not sep or not value.strip():
        raise UsageError(f"{flag} {given!r}: write KIND={'CMD' if flag == '--command' else 'TARGET'}, "
                         f"KIND one of {', '.join(kinds)}")
    return names.resolve("site kind", kind, kinds), value


def _model(args) -> int:
    from normdiff.harness.commands import model, usercode
    from normdiff.harness.engine.model_run import ModelRunError

    if args.mutants:
        if args.family or args.commands or args.targets or any(getattr(args, k) for k in model.OLD_SPELLINGS):
            raise UsageError("--mutants builds its own table: give it without --family and the targets")
        table = model.mutants(tuple(args.dtypes or model.MUTANT_DTYPES), args.seed, args.tokens, args.timeout)
        print(json.dumps(table.as_dict(), default=_json_default) if args.json else model.describe_mutants(table))
        return 0
    if not args.family:
        raise UsageError("give --family (" + ", ".join(model.FAMILIES) + ") or --mutants")
    if len(args.dtypes or ()) > 1:
        raise UsageError("one model, one --dtype (several are for --mutants)")
    dtype = (args.dtypes or ["bfloat16"])[0]
    options = {"framework": args.framework, "call": args.call, "init": args.init, "weight_attr": args.weight_attr}
    targets = {kind: (getattr(args, kind), False) for kind in model.OLD_SPELLINGS if getattr(args, kind)}
    for flag, given, command in ([("--target", g, False) for g in args.targets]
                                 + [("--command", g, True) for g in args.commands]):
        kind, value = _kind_value(flag, given, model.OPTIONS)
        if kind in targets:
            raise UsageError(f"the sites of {kind} are given twice ({flag} {given})")
        targets[kind] = (value, command)
    replay = model.replay_command(args.family, targets, options, dtype, args.seed, args.tokens, args.quant_convention)
    try:
        run = model.model(args.family, targets, dtype, args.seed, args.tokens, args.timeout, options, replay,
                          args.quant_convention)
    except (usercode.TargetError, ModelRunError) as exc:
        if args.json:
            print(json.dumps({"verdict": "error", "exit_code": USAGE_ERROR, "message": str(exc)}))
        else:
            print(f"normdiff model: cannot run it: {printable(exc)}")
        return USAGE_ERROR
    if args.json:
        print(json.dumps({"verdict": "agrees" if run.agrees else "disagrees", "exit_code": 0 if run.agrees else 1,
                          **run.as_dict()}, default=_json_default))
    else:
        print(model.describe(run))
    return 0 if run.agrees else 1


def _explain(args) -> int:
    from normdiff.harness.commands import explain

    if args.plot:
        from normdiff.reports import folder

        folder.check_file(args.plot, "--plot")

    try:
        text = explain.explain(args.bug, args.suite, args.plot, passes=args.passes) if args.bug else explain.bug_table()
    except OutputError as exc:  # the plot was refused: the explanation is printed, exit 2
        if not args.json:
            raise  # main prints what was kept, then the line
        print(json.dumps({"bug": args.bug, "text": exc.kept, "plot": None, "error": str(exc),
                          "exit_code": USAGE_ERROR}))
        return USAGE_ERROR
    print(json.dumps({"bug": args.bug, "text": text, "plot": args.plot}) if args.json else text)
    return 0


def _list(args) -> int:
    from normdiff.cases import suites
    from normdiff.harness.data.conventions import CONVENTIONS
    from normdiff.implementations import registry

    if args.what == "implementations":
        rows = [{"name": i.name, "kind": i.kind, "framework": i.framework,
                 "available": i.unavailable_reason() is None, "reason": i.unavailable_reason() or "", "tier": i.tier,
                 "op_conventions": sorted(f"{op}@{conv}" for op, conv in i.op_conventions),
                 "description": i.description}
                for i in registry.implementations()]
    elif args.what == "conventions":
        rows = [{"name": c.name, "summary": c.summary,
                 "contracts": {op: {"formula": k.describe(), **k.knobs()} for op, k in c.contracts.items()}}
                for c in CONVENTIONS.values()]
    elif args.what == "bugs":
        from normdiff.harness.data.backward_bugs import BACKWARD_BUGS
        from normdiff.harness.data.bugs import BUGS

        rows = ([{"name": b.id, "pass": "forward", **b.as_dict()} for b in BUGS.values()]
                + [{"name": b.id, "pass": "backward", **b.as_dict()} for b in BACKWARD_BUGS.values()])
    elif args.what == "ops":
        rows = [{"name": o.name, "signature": o.signature, "summary": o.summary, "inputs": list(o.inputs),
                 "knobs": list(o.knobs)} for o in OPS.values()]
    elif args.what == "layouts":
        from normdiff.cases.layouts import LAYOUTS
        from normdiff.implementations.frameworks import FRAMEWORKS

        strided = [f.name for f in FRAMEWORKS.values() if f.strides]
        rows = [{"name": l.name, "what": l.what, "moves": l.moves, "frameworks": strided} for l in LAYOUTS.values()]
    elif args.what == "models":
        from normdiff.implementations.hf_model_families import FAMILIES

        rows = [{"name": f.name, "model": f.model, "sites": [
            {"kind": r.kind, "module": r.suffix, "op": r.op, "convention": r.convention,
             "conventions": r.conventions()} for r in f.sites]}
            for f in FAMILIES.values()]
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
        tier = "  (full tier: run --full)" if row["tier"] == "full" else ""
        return (f"{row['name']:<12} {row['kind']:<9} {row['framework']:<6} {len(row['op_conventions']):>3} "
                f"op@conventions  {state}{tier}")
    if what == "conventions":
        ops = "; ".join(f"{op}: {c['formula']}" for op, c in row["contracts"].items())
        return f"{row['name']:<11} {row['summary']}\n{'':<11} {ops}"
    if what == "ops":
        return f"{row['signature']:<40} {row['summary']}"
    if what == "bugs":
        return f"{row['id']:<25} {row['op'] + '@' + row['convention']:<24} {row['symptom']}"
    if what == "layouts":
        where = "" if row["name"] == "contiguous" else f"  (runs in {', '.join(row['frameworks'])})"
        return f"{row['name']:<11} {row['what']}{where}"
    if what == "models":
        from normdiff.harness.commands.model import OPTIONS

        kinds = {}
        for site in row["sites"]:
            choice = (f" (--quant-convention: {', '.join(site['conventions'])})"
                      if len(site["conventions"]) > 1 else "")
            kinds.setdefault(f"{OPTIONS[site['kind']]} {site['op']}@{site['convention']}{choice}", []).append(
                site["module"])
        return f"{row['name']:<11} {row['model']}\n" + "\n".join(f"{'':<11} {k}: {', '.join(v)}" for k, v in kinds.items())
    return f"{row['name']:<10} {row['cases']:>4} cases  {row['description']}"


if __name__ == "__main__":
    sys.exit(main())
