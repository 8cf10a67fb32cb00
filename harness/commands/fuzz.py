"""`normdiff fuzz`: Hypothesis draws cases from the case model (normdiff.strategies), a persistent
session of workers judges each one (harness/engine/session.py), and the first case on which an
implementation fails, as `run` counts failures, is shrunk by Hypothesis to a minimal one: fewest
rows, smallest width, simplest regimes, eps and layout. The minimal case is printed with its id and
the `normdiff repro` command that replays it, and kept in Hypothesis' example database so that the
next run tries it first.

What fails an example: an outcome outside identical / agree / unsupported / unavailable that no known
finding explains (harness/data/findings.py); for a mutant, a disagree or nan_mismatch (the mutant
caught). Each example is one case: every output of its call (a fused add's y and residual_out, a
backward call's gradients) through every implementation given.

Stopping: the search ends after `max_examples` examples or once `max_time` seconds have passed
(checked before each example: one that has started runs to its end), or at the first failure; the
shrink that follows has `shrink_time` seconds of its own, after which the smallest failing case seen
so far is the one reported.

Reproducibility: every run is seeded (a random seed when none is given, printed), and Hypothesis
draws the same examples in the same order for the same seed, implementations and options. With
`max_examples` a seeded run repeats example for example (for deterministic implementations); with
`max_time` the sequence is the same but where it stops depends on the machine's speed, so a slower
run may end before the example a faster one found; a failure once found shrinks the same way. A
seeded run does not replay the database first (it would make the run depend on the previous ones);
it still saves what it finds there.

The example database lives in normdiff's cache ($NORMDIFF_HYPOTHESIS_CACHE, default
~/.cache/normdiff/hypothesis; empty: none), one folder per target (implementations and the options
that shape the cases), so different targets never replay each other's examples. Hypothesis' other
files (its cache of constants found in source) go under the same folder: nothing is written into the
current directory.
"""
from __future__ import annotations

import hashlib
import json
import os
import random
import tempfile
import time
from dataclasses import dataclass, field

from typing import TYPE_CHECKING

from normdiff.cases import layouts as layout_table
from normdiff.cases.model import MAX_WIDTH
from normdiff.files import cache_dir
from normdiff.interrupts import SIGNALS, Interrupted
from normdiff.harness.data import inputs
from normdiff.harness.data.errors import UsageError
from normdiff.harness.data.names import several
from normdiff.harness.data.ops import PASSES
from normdiff.harness.data.outcomes import OUTCOMES
from normdiff.text import number, seconds
from normdiff.wording import against_a_budget

if TYPE_CHECKING:  # the engine, the strategies and Hypothesis are imported when a fuzz runs
    from normdiff.harness.engine.runner import Outcome
    from normdiff.implementations.entry import Implementation

CACHE_ENV = "NORMDIFF_HYPOTHESIS_CACHE"
DEFAULT_MAX_TIME = 60.0  # seconds, when neither max_time nor max_examples is given
MAX_EXAMPLES = 10 ** 6  # a day at a dozen examples a second: --max-time is the way to search longer
DEFAULT_SHRINK_TIME = 60.0
DEFAULT_MAX_ROWS = 64  # enough for the channel-bias detector (32 rows) to have a chance
DEFAULT_MAX_WIDTH = 256
DEFAULT_TIMEOUT = 10.0  # a hang is retried on every shrink step that reaches it: keep it short
# importing an implementation: transformers on a busy 2-core machine takes more than the 15 s a run
# allows at least; a fuzz pays it once, so it waits longer rather than refuse the target
MIN_LOAD_TIMEOUT = 60.0
EXIT_CODES = {False: 0, True: 1}


@dataclass
class FuzzResult:
    found: bool
    implementations: list[str]
    seed: int
    examples: int = 0  # examples run before the failure (all of them when nothing was found)
    shrink_examples: int = 0  # examples run while shrinking (and the final replay)
    evaluations: int = 0  # case x implementation evaluations that ran (unsupported ones excluded)
    seconds: float = 0.0  # the whole search and shrink, after the workers started
    startup_seconds: float = 0.0  # starting the workers and loading the implementations
    time_to_find: float | None = None
    shrink_seconds: float | None = None
    stopped: str = ""  # max-examples | max-time | found | exhausted
    minimal: dict | None = None
    from_database: bool = False
    flaky: str = ""  # the minimal case did not fail again when replayed (why)
    database: str | None = None
    pairs: list[str] = field(default_factory=list)
    passes: list[str] = field(default_factory=list)
    unavailable: dict = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.found]

    @property
    def per_second(self) -> float:
        return self.evaluations / self.seconds if self.seconds > 0 else 0.0

    def as_dict(self) -> dict:
        return {"found": self.found, "examples": self.examples, "shrink_examples": self.shrink_examples,
                "evaluations": self.evaluations, "evaluations_per_second": self.per_second,
                "minimal": self.minimal, "from_database": self.from_database, "time_to_find": self.time_to_find,
                "shrink_seconds": self.shrink_seconds, "seconds": self.seconds,
                "startup_seconds": self.startup_seconds, "stopped": self.stopped, "seed": self.seed,
                "flaky": self.flaky, "implementations": self.implementations, "pairs": self.pairs,
                "passes": self.passes, "unavailable": self.unavailable, "database": self.database,
                "exit_code": self.exit_code}


class Found(Exception):
    """A failing example (what Hypothesis shrinks): its worst failing outcome."""

    def __init__(self, outcome: Outcome):
        super().__init__(f"{outcome.case.id}: {outcome.measurement.outcome} in {outcome.impl.name}")
        self.outcome = outcome


class _Internal(Exception):
    """A bug of ours while evaluating a case: Hypothesis shrinks it too, and it is re-raised."""

    def __init__(self, case, error: BaseException):
        super().__init__(f"normdiff failed evaluating {case.id}: {type(error).__name__}: {error}")
        self.case, self.error = case, error


class _Stop(BaseException):
    """Ends Hypothesis' run at once: not an Exception, so it is neither a failure nor shrunk (as
    KeyboardInterrupt is not)."""


# ---- what is fuzzed ------------------------------------------------------------------------------


def passes_for(impls: list[Implementation], asked: str | None) -> tuple[str, ...]:
    """The passes to draw: those asked ("forward", "backward", "both"; None: every pass the
    implementations have) that some implementation runs."""
    has = [p for p in PASSES if any(p in i.passes for i in impls)]
    if asked in (None, "both"):
        return tuple(has)
    if asked not in PASSES:
        raise UsageError(f"--pass must be forward, backward or both; got {asked!r}")
    if asked not in has:
        names = ", ".join(i.name for i in impls)
        raise UsageError(f"{names} {'has' if len(impls) == 1 else 'have'} no {asked} pass; "
                         f"{'it runs' if len(impls) == 1 else 'they run'}: {', '.join(has)}")
    return (asked,)


def pairs_for(impls: list[Implementation], passes, op: str | None = None,
              convention: str | None = None, max_width: int = DEFAULT_MAX_WIDTH) -> list[tuple[str, str]]:
    """The op@conventions some implementation runs in one of `passes`, narrowed by op / convention,
    that a case up to `max_width` wide can be drawn for (a quantizer's width: a multiple of its block)."""
    pairs = {p for i in impls for p in i.op_conventions if any(i.supports(*p, pass_) for pass_ in passes)}
    from normdiff import strategies

    wanted = [p for p in strategies.PAIRS if p in pairs and (not op or p[0] == op) and (not convention or p[1] == convention)]
    chosen = list(strategies.drawable(wanted, passes, 1, max_width))
    if wanted and not chosen and strategies.drawable(wanted, passes, 1, MAX_WIDTH):  # (too narrow, not the pass)
        narrowest = min(strategies.block_of(*p) for p in wanted)
        raise UsageError(f"nothing to fuzz: {', '.join('@'.join(p) for p in wanted)} quantize(s) blocks of at least "
                         f"{narrowest} columns, and --max-width {max_width} draws no width that is a whole number of "
                         f"them: give --max-width {narrowest} or more")
    if not chosen:
        had = ", ".join(sorted(f"{o}@{c}" for o, c in pairs)) or "none"
        wanted = "@".join([op or "*", convention or "*"])
        raise UsageError(f"nothing to fuzz: {', '.join(i.name for i in impls)} implement(s) no {wanted} in the "
                         f"{' or '.join(passes)} pass; implemented: {had}")
    return chosen


def layouts_for(impls: list[Implementation]) -> tuple[str, ...]:
    """The memory layouts some implementation receives as laid out (contiguous alone when none of
    their frameworks has strides)."""
    return tuple(name for name in layout_table.LAYOUTS if any(i.layout_problem(name) is None for i in impls))


def case_strategy(impls: list[Implementation], passes, pairs, dtypes=None, max_rows: int = DEFAULT_MAX_ROWS,
                  max_width: int = DEFAULT_MAX_WIDTH, regimes=None, layouts=None):
    from normdiff import strategies

    return strategies.cases(pairs=pairs, dtypes=list(dtypes) if dtypes else None, passes=passes,
                            max_rows=max_rows, max_width=max_width, regimes=list(regimes) if regimes else None,
                            layouts=layouts or layouts_for(impls))


# ---- the database --------------------------------------------------------------------------------


def warm_up(impls: list[Implementation], passes, pairs) -> list:
    """One small case per implementation and pass, in a pair it runs, so that importing its framework
    (a mutant imports torch on its first call, a backward its autograd) is part of the startup."""
    from normdiff import strategies
    from normdiff.cases.model import Case
    from normdiff.harness.data.ops import get_op

    out = []
    for impl in impls:
        for pass_ in passes:
            pair = next((p for p in pairs if impl.supports(*p, pass_)), None)
            if pair is not None:
                dy = "normal" if pass_ == "backward" else ""
                output = next(iter(get_op(pair[0]).gradients)) if dy else "y"  # (a quantizer's: q)
                out.append(Case(op=pair[0], convention=pair[1], dtype="float32", rows=1,
                                width=max(2, strategies.block_of(*pair)), dy=dy, output=output))
    return out


def target_key(impls: list[Implementation], **shape) -> str:
    """A folder name for these implementations and the options that shape the cases drawn: two
    targets share a database folder only when they are the same code fuzzed over the same space."""
    identity = {"implementations": sorted([i.name, i.entry, i.backward, list(map(list, i.params)), list(i.replay)]
                                          for i in impls), **{k: v for k, v in sorted(shape.items())}}
    return hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _database(folder: str | None):
    from hypothesis.database import DirectoryBasedExampleDatabase, ExampleDatabase

    class Counting(ExampleDatabase):
        """Hypothesis' folder database, counting the saved examples Hypothesis fetched to replay:
        a failure among the first that many examples came from the database."""

        def __init__(self, inner):
            super().__init__()
            self.inner, self.fetched = inner, 0

        def save(self, key, value):
            self.inner.save(key, value)

        def fetch(self, key):
            for value in self.inner.fetch(key):
                self.fetched += 1
                yield value

        def delete(self, key, value):
            self.inner.delete(key, value)

        def move(self, src, dest, value):
            self.inner.move(src, dest, value)

    return Counting(DirectoryBasedExampleDatabase(folder)) if folder else None


class _StickySignals:
    """Ctrl-C, SIGTERM and SIGHUP raise Interrupted as interrupts.handled() makes them, and stay
    pending: Hypothesis measures garbage collection with a gc callback, and an exception raised
    while one runs is printed and dropped, so the stop would be lost. Each example checks first."""

    def __init__(self):
        self.pending: list[int] = []

    def check(self) -> None:
        if self.pending:
            raise Interrupted(self.pending[0])

    def _raise(self, signum, frame):
        self.pending.append(signum)
        raise Interrupted(signum)

    def __enter__(self):
        import signal
        import threading

        self.previous = {}
        if threading.current_thread() is threading.main_thread():
            self.previous = {s: signal.signal(s, self._raise) for s in SIGNALS}
        return self

    def __exit__(self, *exc):
        import signal

        for s, handler in self.previous.items():
            signal.signal(s, handler)


class _HypothesisHome:
    """Hypothesis' storage folder (its constants cache) pointed at `path` for the run, then restored:
    by default it is `.hypothesis/` in the current directory, which normdiff never writes to."""

    def __init__(self, path: str | None):
        self.path, self.tmp = path, None

    def __enter__(self):
        from hypothesis import configuration

        self.previous = vars(configuration).get("__hypothesis_home_directory")
        if self.path is None:
            self.tmp = tempfile.mkdtemp(prefix="normdiff-hypothesis-")
        configuration.set_hypothesis_home_dir(self.path or self.tmp)
        return self

    def __exit__(self, *exc):
        from hypothesis import configuration

        configuration.set_hypothesis_home_dir(self.previous)
        if self.tmp:
            import shutil

            shutil.rmtree(self.tmp, ignore_errors=True)


# ---- the run ---------------------------------------------------------------------------------------


def _rank(o: Outcome) -> tuple:
    """Worst first: the later outcome in OUTCOMES' order (crashed after disagree), then the larger
    error against its budget."""
    m = o.measurement
    ratio = m.max_ulp / m.tolerance_ulp if m.tolerance_ulp and m.tolerance_ulp == m.tolerance_ulp else 0.0
    return (-OUTCOMES.index(m.outcome), -(ratio if ratio == ratio else 0.0))


def _simplicity(case) -> tuple:
    return (case.rows, case.width, case.layout != layout_table.DEFAULT, case.regime != "normal", case.sample,
            len(case.id))


def minimal_of(outcome: Outcome, from_database: bool = False) -> dict:
    from normdiff.harness.engine.tables import repro_command

    c, m = outcome.case, outcome.measurement
    plain = lambda v: None if v != v else float(v)  # noqa: E731  (NaN as null)
    return {"case_id": c.id, "rows": c.rows, "width": c.width, "num_heads": c.num_heads, "layout": c.layout,
            "dtype": c.dtype, "op": c.op, "convention": c.convention, "pass": c.pass_, "output": c.output,
            "implementation": outcome.impl.name, "outcome": m.outcome, "max_ulp": plain(m.max_ulp),
            "budget_ulp": plain(m.tolerance_ulp), "detail": m.detail, "repro": repro_command(c.id, outcome.impl),
            "from_database": from_database}


def check_options(max_time=None, max_examples=None, shrink_time=DEFAULT_SHRINK_TIME, timeout=DEFAULT_TIMEOUT,
                  seed=None, **_others) -> None:
    """The numeric options' UsageErrors, raised before anything starts (the others are checked
    where they are used): times in seconds up to a day, at most MAX_EXAMPLES examples, a 32-bit seed."""
    if max_examples is not None:
        inputs.whole(max_examples, "max_examples", 1, MAX_EXAMPLES)
    for name, value in (("max_time", max_time), ("shrink_time", shrink_time), ("timeout", timeout)):
        if value is not None:
            inputs.seconds(value, name)
    if seed is not None:
        inputs.seed(seed)


def fuzz(impls: list[Implementation], *, op: str | None = None, convention: str | None = None, dtypes=(),
         passes: str | None = None, regimes=(), max_time: float | None = None, max_examples: int | None = None,
         seed: int | None = None, timeout: float = DEFAULT_TIMEOUT, shrink_time: float = DEFAULT_SHRINK_TIME,
         max_rows: int = DEFAULT_MAX_ROWS, max_width: int = DEFAULT_MAX_WIDTH, database: bool = True,
         layouts=None) -> FuzzResult:
    """Fuzz `impls` until a failure (shrunk), `max_examples` examples or `max_time` seconds (the
    default: 60 s when neither is given). Every argument is checked before any worker starts
    (UsageError); an implementation that cannot be loaded is a TargetError, as for check."""
    from hypothesis import HealthCheck, Phase, Verbosity, given, settings
    from hypothesis import seed as seeded
    from hypothesis.errors import Flaky

    from normdiff.harness.commands.usercode import TargetError
    from normdiff.harness.engine.session import Session

    if not impls:
        raise UsageError("nothing to fuzz: give -i NAME or --target TARGET --op OP --convention CONV")
    check_options(max_time=max_time, max_examples=max_examples, shrink_time=shrink_time, timeout=timeout, seed=seed)
    inputs.flag(database, "database")
    dtypes, regimes = several(dtypes, "dtypes"), several(regimes, "regimes")
    if max_time is None and max_examples is None:
        max_time = DEFAULT_MAX_TIME
    chosen_passes = passes_for(impls, passes)
    pairs = pairs_for(impls, chosen_passes, op, convention, max_width)
    strategy = case_strategy(impls, chosen_passes, pairs, dtypes, max_rows, max_width, regimes, layouts)
    shape = {"pairs": pairs, "passes": chosen_passes, "dtypes": sorted(dtypes or ()), "regimes": sorted(regimes or ()),
             "max_rows": max_rows, "max_width": max_width, "layouts": list(layouts or ())}
    base = cache_dir(CACHE_ENV, "hypothesis") if database else None
    folder = os.path.join(base, "examples", target_key(impls, **shape)) if base else None
    db = _database(folder)
    run_seed = seed if seed is not None else random.SystemRandom().randrange(2 ** 32)
    result = FuzzResult(False, [i.name for i in impls], run_seed, database=folder,
                        pairs=[f"{o}@{c}" for o, c in pairs], passes=list(chosen_passes))
    state = {"found_at": None, "best": None, "stop": "", "from_db": False}

    started = time.perf_counter()
    with Session(impls, timeout=timeout, load_timeout=max(timeout, MIN_LOAD_TIMEOUT)) as session:
        loaded = [i for i in impls if i.name not in session.unavailable and i.name not in session.failed]
        result.unavailable = dict(session.unavailable)
        if not loaded:
            why = "; ".join(f"{n}: {r}" for n, r in session.unavailable.items()) or \
                  "; ".join(f"{n}: {r[1]}" for n, r in session.failed.items())
            raise TargetError(f"nothing to fuzz: no implementation can run here ({why})")
        if session.failed:
            name, reply = next(iter(session.failed.items()))
            raise TargetError(f"{name} cannot be loaded ({reply[0]}): {reply[1]}")
        session.evaluate(warm_up(loaded, chosen_passes, pairs))  # the frameworks' imports: startup, not search
        result.startup_seconds = time.perf_counter() - started
        start = time.perf_counter()

        def body(case):
            signals.check()
            now = time.perf_counter() - start
            if state["found_at"] is None:
                if max_time is not None and now > max_time:
                    state["stop"] = "max-time"
                    raise _Stop()
                result.examples += 1
            else:
                if now - state["found_at"] > shrink_time:
                    state["stop"] = "shrink-time"
                    raise _Stop()
                result.shrink_examples += 1
            try:
                outcomes = session.evaluate([case])
                bad = session.failures(outcomes)
            except Exception as exc:  # a bug of ours: shrunk as a failure, re-raised below
                raise _Internal(case, exc) from exc
            result.evaluations += sum(o.measurement.outcome not in ("unsupported", "unavailable") for o in outcomes)
            if bad:
                worst = min(bad, key=_rank)
                if state["found_at"] is None:  # once this example is judged
                    state["found_at"] = time.perf_counter() - start
                    state["from_db"] = db is not None and result.examples <= db.fetched
                if state["best"] is None or _simplicity(worst.case) <= _simplicity(state["best"].case):
                    state["best"] = worst
                raise Found(worst)

        test = given(strategy)(body)
        test = seeded(run_seed)(test)  # before settings, which would otherwise lose the database
        test = settings(
            database=db, max_examples=max_examples or 10 ** 9, deadline=None, derandomize=False,
            # each example is a round trip to another process (and the first one imports a
            # framework): Hypothesis' checks that data generation or examples are too slow would fire
            # on the evaluation, not on the strategy, which draws valid cases directly
            suppress_health_check=[HealthCheck.too_slow],
            phases=[p for p in Phase if p != Phase.explain and (p != Phase.reuse or seed is None)],
            verbosity=Verbosity.quiet, report_multiple_bugs=False, print_blob=False)(test)
        with _HypothesisHome(base), _StickySignals() as signals:
            try:
                test()
                reached = max_examples is not None and result.examples >= max_examples
                result.stopped = "max-examples" if reached else "exhausted"
            except Found as exc:
                _finish(result, exc.outcome, state, start)
            except _Stop:
                result.stopped = state["stop"]
                if state["best"] is not None:  # out of shrink time: the smallest failing case seen
                    _finish(result, state["best"], state, start)
            except _Internal as exc:  # the traceback to report, with the (shrunk) case it came from
                if hasattr(exc.error, "add_note"):
                    exc.error.add_note(f"normdiff fuzz: while evaluating {exc.case.id}")
                raise exc.error from None
            except Flaky as exc:
                if state["best"] is None:
                    raise
                result.flaky = (f"the minimal case did not fail again when replayed ({type(exc).__name__}): "
                                "the implementation's result depends on more than its input")
                _finish(result, state["best"], state, start)
        result.seconds = time.perf_counter() - start
    return result


def _finish(result: FuzzResult, outcome: Outcome, state: dict, start: float) -> None:
    result.found = True
    result.stopped = result.stopped or "found"
    result.time_to_find = state["found_at"]
    result.shrink_seconds = time.perf_counter() - start - state["found_at"]
    result.from_database = bool(state.get("from_db"))
    result.minimal = minimal_of(outcome, result.from_database)


# ---- text ------------------------------------------------------------------------------------------


def describe(result: FuzzResult) -> str:
    from normdiff.text import printable

    def one(value) -> str:
        return printable(value, newlines=False)

    names = ", ".join(one(n) for n in result.implementations)
    what = f"{len(result.pairs)} op@conventions" if len(result.pairs) > 1 else one(result.pairs[0])
    head = f"normdiff fuzz {names} ({what}, {' and '.join(result.passes)}; seed {result.seed})"
    lines = [head]
    for name, reason in result.unavailable.items():
        lines.append(f"  not fuzzed: {one(name)}: {reason}")
    rate = f"{result.evaluations} case evaluations, {number(result.per_second)} per second"
    if not result.found:
        why = {"max-time": "the time limit", "max-examples": "the example limit",
               "exhausted": "every case the options allow"}.get(result.stopped, result.stopped)
        lines.append(f"  nothing found in {result.examples} examples ({rate}) in {seconds(result.seconds)}: "
                     f"stopped at {why}")
        return "\n".join(lines)
    m = result.minimal
    where = "replayed from the example database" if result.from_database else \
        f"after {result.examples} example{'s' if result.examples != 1 else ''}"
    cut = ", out of shrink time: the smallest seen" if result.stopped == "shrink-time" else ""
    lines.append(f"  FOUND {where} in {seconds(result.time_to_find)}; shrunk in {result.shrink_examples} more "
                 f"({seconds(result.shrink_seconds)}{cut})")
    rows = f"{m['rows']} row{'s' if m['rows'] != 1 else ''}"
    heads = f" ({m['num_heads']} heads of {m['width'] // m['num_heads']})" if m["num_heads"] > 1 else ""
    lines += [f"  minimal case  {one(m['case_id'])}",
              f"                {rows} x {m['width']} wide{heads}, {m['dtype']}, layout {m['layout']}",
              f"  outcome       {m['outcome']} in {one(m['implementation'])}"
              + (f": max {against_a_budget(m['max_ulp'], m['budget_ulp'])}"
                 if m["max_ulp"] is not None else "")]
    if m["detail"]:
        lines.append(f"                {one(m['detail'])}")
    if result.flaky:
        lines.append(f"  flaky         {result.flaky}")
    lines.append(f"  repro         {one(m['repro'])}")
    if result.database:
        lines.append(f"  kept in the example database ({one(result.database)}): the next run tries it first")
    return printable("\n".join(lines))
