"""Run a suite over the registered implementations and collect the long results table.

Plan: draw every case's inputs once (these exact bits go to every implementation and the oracle),
evaluate the oracle, then hand each framework's work to its own worker process. A backward case's
outputs (dx, dw, dgate: each a case of its own) come from one call with the upstream gradient dy,
judged against the exact VJP at the scale of its terms (harness/data/budgets.py); its calls are
never batched, since dw sums over the rows. Workers run
concurrently (one thread each here, waiting on pipes), so torch and JAX import and compute side by
side. Implementations that may batch rows get the rows of same-shaped cases concatenated into one
call: far fewer calls and, for JAX, far fewer compilations.
"""
from __future__ import annotations

import functools
import hashlib
import os
import queue
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace

import numpy as np

from normdiff import processes
from normdiff.cases.model import Case, CaseInputs
from normdiff.interrupts import as_interrupted
from normdiff.cases.suites import Suite
from normdiff.harness.data.budgets import (budget_for, gradient_budget, gradient_systematic, rounding_rule,
                                              systematic_part)
from normdiff.harness.data.dtypes import get_format
from normdiff.harness.data.ops import ROW
from normdiff.harness.data.outcomes import PASSING
from normdiff.harness.engine import judge, pairs, quant_judge
from normdiff.harness.engine import oracle
from normdiff.harness.engine.pool import Worker
from normdiff.harness.engine.vjp import vjp
from normdiff.implementations.entry import Implementation

MAX_BATCH_ROWS = 512
# How long (s) a thread holding the GIL runs before another may take it, during a run. A worker's
# thread needs the GIL to unpickle a reply and send the next call, and the collector holds it while
# judging: with Python's default 5 ms each handover could leave a worker idle that long (thousands
# of calls a run). Measured on the default run, 3 pairs each way: 16.2 s -> 15.0 s.
GIL_HANDOFF = 0.0005


class _Handoff:
    """GIL_HANDOFF while any run of this process runs, and the interval the process had before the
    first of them once the last one ends. The interval is the process's: two runs in two threads
    that each set it and put back what they found would leave the first one's GIL_HANDOFF behind."""

    def __init__(self):
        self.lock, self.runs, self.before = threading.Lock(), 0, None

    def begin(self) -> None:
        with self.lock:
            if not self.runs:
                self.before = sys.getswitchinterval()
                sys.setswitchinterval(GIL_HANDOFF)
            self.runs += 1

    def end(self) -> None:
        with self.lock:
            self.runs -= 1
            if not self.runs:
                sys.setswitchinterval(self.before)


_HANDOFF = _Handoff()


@dataclass
class Expected:
    """One output of a call: its case, the oracle's value prepared for the judge, and its budget."""

    case: Case
    ref: judge.Reference
    budget: float
    systematic: float = 0.0  # the budget's part a float32 order may spend on every row alike


@dataclass
class Prepared:
    """One call: a forward case, or every output of a backward case the suite holds (by operand:
    "y" for the forward's output, else the operand each gradient is of)."""

    case: Case  # the call's first case
    inputs: CaseInputs
    expected: dict[str, Expected]
    # a backward call's upstream gradient, in the case dtype ({result: gradient} for an op with
    # more than one result)
    dy: np.ndarray | dict | None = None

    @property
    def ref(self) -> judge.Reference:
        return next(iter(self.expected.values())).ref

    def for_cases(self, cases: list[Case]) -> "Prepared":
        """This call prepared for `cases`, the same outputs of a call of the same contract on the same
        inputs under another convention: each output's reference and budget shared."""
        expected = {c.key: replace(self.expected[c.key], case=c) for c in cases}
        return Prepared(cases[0], self.inputs, expected, self.dy)


@dataclass
class Task:
    impl: Implementation
    cases: list[Prepared]  # more than one only for batch_rows implementations


@dataclass
class Outcome:
    """One case x implementation, before it becomes a table row."""

    case: Case
    impl: Implementation
    measurement: judge.Measurement
    output: np.ndarray | None = None
    seconds: float = float("nan")
    floor: np.ndarray | None = None  # where the judge counted its ULPs no finer (pairs count there too)


@dataclass
class RunData:
    outcomes: list[Outcome] = field(default_factory=list)
    seconds: float = 0.0
    planned: int = 0  # the outcomes the run set out to produce (fewer are there when it was stopped)
    # the pairs table's rows, measured while the run was collected (None: to be measured from the
    # outcomes, as after a stop or a sharded run)
    pairs: list[dict] | None = None
    # implementation -> the names its call binds (x, weight, eps, ...), as its worker's load said:
    # user code that takes no eps is judged at one eps only (harness/commands/check.py)
    takes: dict[str, list[str]] = field(default_factory=dict)
    # implementation -> the contract's knobs its forward adapter reads, as its worker's load said
    # (an adapter's `sees`): what call_key compares of the contracts of an implementation that shares calls
    sees: dict[str, tuple] = field(default_factory=dict)
    # the calls made, and the outcomes' calls judged from another case's call (entry.py
    # `shares_calls`: check without --convention), counted as the collector judges them
    calls: int = 0
    shared: int = 0


def prepare(case: Case, outputs: list[Case] | None = None, inputs: CaseInputs | None = None) -> Prepared:
    """The call of `case` and what each of its `outputs` (default: every output of the call) is
    judged against. `inputs`: arrays given instead of the case's own draw (a model's activations at
    a norm site: normdiff model), which the case then only describes (op, convention, dtype, shape, eps)."""
    inputs = inputs or case.inputs()
    exact = oracle.results(case.contract, inputs.arrays, inputs.num_heads)
    condition = oracle.centring_condition(case.contract, inputs.arrays, inputs.num_heads)
    if not case.dy:
        expected = {}
        quantized = quant_judge.reference(case, inputs, exact) if "q" in exact else None
        for c in outputs or case.outputs():  # y, and a fused add's residual_out
            if c.output in ("q", "scale"):  # judged in the format's units (engine/quant_judge.py)
                expected[c.output] = Expected(c, replace(quantized, output=c.output), 0.0)
                continue
            budget = budget_for(c.dtype, c.op, c.span, condition, c.output, rounding_rule(c.contract))
            systematic = systematic_part(c.dtype, c.span, condition) if c.output == "y" else 0.0
            # the contract's rounding chain is bracketed by what a legal float32 order of it may cost
            float32 = budget_for("float32", c.op, c.span, condition, c.output, rounding_rule(c.contract))
            expected[c.output] = Expected(c, judge.reference_for(c, inputs, exact[c.output], float32), budget, systematic)
        return Prepared(case, inputs, expected)
    dy = case.upstreams(exact)
    grads = vjp(case.contract, inputs.arrays, dy, inputs.num_heads)
    fmt = get_format(case.dtype)
    scales = vjp(case.contract, inputs.arrays, dy, inputs.num_heads, absolute=True, floor=2.0 ** fmt.min_exponent)
    # RoPE: the other legal frequencies (judge.Reference.nearest), at one VJP per choice for them all
    at = _GradientsAt(case.contract, inputs.arrays, dy, inputs.num_heads) if "positions" in inputs.arrays else None
    expected = {}
    for c in outputs or case.outputs():
        name = c.operand
        # dw and db sum their terms over the rows and over the heads that share a per-head weight
        reduced = inputs.arrays["x"].size // inputs.arrays[name].size if c.output in ("dw", "db") else 1
        if at is not None:  # grouped by frequency over the heads this operand spans (a per-head dw: one)
            heads = inputs.arrays[name].shape[-1] * inputs.num_heads // inputs.arrays["x"].shape[-1]
            ref = judge.Reference(grads[name], fmt, heads, floor=scales[name], mixed=functools.partial(at.of, name))
        else:
            ref = judge.Reference(grads[name], fmt, inputs.num_heads, floor=scales[name])
        expected[name] = Expected(c, ref, gradient_budget(c.dtype, c.op, c.output, c.span, reduced, condition),
                                  gradient_systematic(c.dtype, c.output, c.span, reduced, condition, c.op))
    return Prepared(case, inputs, expected, dy)


class _GradientsAt:
    """The exact gradients at RoPE angles of one power choice per frequency: each choice's VJP made
    once for all of the call's outputs (dx's and dw's references try the same flips)."""

    def __init__(self, contract, arrays: dict, dy, num_heads: int):
        self.contract, self.arrays, self.dy, self.num_heads = contract, arrays, dy, num_heads
        self.made: dict[bytes, dict] = {}

    def of(self, name: str, power) -> np.ndarray:
        """The gradient of operand `name` at the power choice `power` (a bool per frequency)."""
        key = np.asarray(power, dtype=bool).tobytes()
        if key not in self.made:
            self.made[key] = vjp(self.contract, self.arrays, self.dy, self.num_heads, power=power)
        return self.made[key][name]


def prepare_all(cases: list[Case]) -> list[Prepared]:
    """One Prepared per call: a backward case's outputs share one (in the suite's order). The calls
    of conventions with the same contract on the same inputs (the id after its op@convention: the
    draws, the eps, the layout, the gradient) share what is prepared: their references and budgets
    are the contract's (`check` without --convention judges ten conventions, four of them contracts)."""
    calls: dict[str, list[Case]] = {}
    for c in cases:
        calls.setdefault(c.call_id, []).append(c)
    made: dict[tuple, Prepared] = {}
    out = []
    for members in calls.values():
        first = members[0]
        key = (first.contract, first.call_id.partition("/")[2], tuple(c.key for c in members))
        if key in made:
            out.append(made[key].for_cases(members))
        else:
            out.append(made.setdefault(key, prepare(first, members)))
    return out


def plan(prepared: list[Prepared], impl: Implementation) -> list[Task]:
    supported = [p for p in prepared if impl.runs(p.case)]
    if not impl.batch_rows:
        return [Task(impl, [p]) for p in supported]
    groups: dict[tuple, list[Prepared]] = defaultdict(list)
    tasks = []
    for p in supported:
        if p.dy is not None:  # dw sums over rows: one call per backward case
            tasks.append(Task(impl, [p]))
            continue
        groups[batch_key(p)].append(p)
    for members in groups.values():
        chunk, rows = [], 0
        for p in members:
            if chunk and rows + p.case.rows > MAX_BATCH_ROWS:
                tasks.append(Task(impl, chunk))
                chunk, rows = [], 0
            chunk.append(p)
            rows += p.case.rows
        tasks.append(Task(impl, chunk))
    return tasks


def batch_key(p: Prepared) -> tuple:
    """Cases with equal keys can share one call: the same op, convention, contract and dtype, the
    same shape per row, and bit-identical per-case operands (the op record's per="case" operands,
    such as the weight); only their rows differ."""
    c = p.case
    per_case = tuple((o.name, p.inputs.arrays[o.name].dtype.str, p.inputs.arrays[o.name].shape,
                      p.inputs.arrays[o.name].tobytes())
                     for o in c.record.operands if o.per != ROW)
    return (c.op, c.convention, c.contract, c.dtype, c.num_heads, c.width, c.layout, per_case)


def _batched_inputs(task: Task) -> CaseInputs:
    first = task.cases[0].inputs
    if len(task.cases) == 1:
        return first
    rows = {o.name for o in task.cases[0].case.record.operands if o.per == ROW}
    arrays = {k: (np.concatenate([p.inputs.arrays[k] for p in task.cases]) if k in rows else v)
              for k, v in first.arrays.items()}
    return CaseInputs(arrays, first.num_heads, first.layout)


def judge_task(task: Task, reply: tuple) -> list[Outcome]:
    status = reply[0]
    if status != "ok":
        note = reply[1] + (f" (in a batch of {len(task.cases)} cases)" if len(task.cases) > 1 else "")
        return [Outcome(e.case, task.impl, judge.failure(status, note)) for p in task.cases for e in p.expected.values()]
    if task.cases[0].dy is not None:
        return _wrote(_judge_gradients(task, reply[1], reply[2]), reply)
    values, seconds = reply[1], reply[2]
    values = values if isinstance(values, dict) else {"y": values}  # by result
    outcomes, start = [], 0
    expected_rows = sum(p.case.rows for p in task.cases)
    share = seconds / sum(len(p.expected) for p in task.cases)
    for p in task.cases:
        pieces = {name: _piece(values[name], len(task.cases), expected_rows, start, p.case.rows) for name in values}
        for name, e in p.expected.items():
            piece, c = pieces[name], e.case
            if isinstance(e.ref, quant_judge.QuantReference):
                m = judged_quant(name, pieces, e.ref)
                outcomes.append(Outcome(c, task.impl, m, piece if m.outcome != "error" else None, share, None))
                continue
            m = judge.judge(piece, e.ref, get_format(c.dtype), e.budget, c.num_heads, c.op, systematic=e.systematic)
            keep = piece if m.outcome not in ("error",) else None
            outcomes.append(Outcome(c, task.impl, m, keep, share, e.ref.floor))
        start += p.case.rows
    return _wrote(outcomes, reply)


def _piece(out, calls: int, rows: int, start: int, own: int):
    """A case's part of a batched call's output (its rows); the whole output when the call was its
    alone, or when the output has not the rows a batch gives (the judge reports the shape)."""
    if calls == 1 or getattr(out, "ndim", 0) not in (1, 2) or out.shape[0] != rows:
        return out
    return out[start:start + own]  # (a per-row scale may come as (rows,))


def judged_quant(name: str, pieces: dict, ref) -> judge.Measurement:
    """q or scale of a quantizing call, judged in the format's units (engine/quant_judge.py)."""
    try:
        if name == "scale":
            return quant_judge.judge_scale(pieces["scale"], ref)
        return quant_judge.judge_q(pieces["q"], pieces.get("scale"), ref)
    except (ValueError, TypeError) as exc:
        return judge.failure("error", f"{name}: {exc}")


def _wrote(outcomes: list[Outcome], reply: tuple) -> list[Outcome]:
    """A call that wrote into an input (the worker's reply names the write) is an error for every
    output it returned, which keeps its judged figures and digest (engine/verdict.py counts an error
    with an output as a disagreement: the code ran, and what it did is wrong): the detail names the
    write, then what the output itself came to."""
    wrote = reply[3] if len(reply) > 3 else ""
    if not wrote:
        return outcomes
    for o in outcomes:
        m = o.measurement
        if m.outcome != "error":  # judged: keep its figures; its own outcome is said in the detail
            m.detail = f"{wrote}; its output {m.outcome}" + (f" ({m.detail})" if m.detail else "")
            m.outcome = "error"
    return outcomes


def alone_rows(rows: int) -> list[int]:
    """The rows of a call that the batch-invariance check runs alone: the first, the middle and the
    last (a kernel that changes path with the row count, or splits a lone row's reduction over
    threads, differs on any of them)."""
    return sorted({0, rows // 2, rows - 1})


def _batch_verdicts(task: Task, values, worker: Worker) -> dict[str, str]:
    """Call the checked cases' rows alone and compare them bit for bit with the same rows of the
    call's outputs (every result of the op): for each checked case's call id, "" when they are the
    same, else what differs. A lone call that fails is a difference that says so."""
    values = values if isinstance(values, dict) else {"y": values}
    batched, start, verdicts = _batched_inputs(task), 0, {}
    row_names = {o.name for o in task.cases[0].case.record.operands if o.per == ROW}
    for p in task.cases:
        if p.case.batch_check:
            verdicts[p.case.call_id] = _rows_alone(task, batched, row_names, values, start, p.case.rows, worker)
        start += p.case.rows
    return verdicts


def _mark_batch_invariance(outcomes: list[Outcome], task: Task, verdicts: dict[str, str]) -> None:
    """Each checked case's outcomes get "yes" or "no"; a claimer's "no" disagrees."""
    for o in outcomes:
        verdict = verdicts.get(o.case.call_id)
        if verdict is None or o.measurement.outcome == "error":
            continue
        o.measurement.batch_invariant = "no" if verdict else "yes"
        if verdict and task.impl.batch_invariant and o.measurement.outcome in PASSING:
            o.measurement.outcome = "disagree"
            o.measurement.detail = f"claims batch invariance, but {verdict}"


def _rows_alone(task: Task, batched: CaseInputs, row_names: set, values: dict, start: int, rows: int,
                worker: Worker) -> str:
    """"" when each checked row alone is bit-identical to the same row in the call; else what differs."""
    c = task.cases[0].case
    for r in alone_rows(rows):
        at = start + r
        arrays = {k: (v[at:at + 1] if k in row_names else v) for k, v in batched.arrays.items()}
        reply = worker.call(("call", task.impl, c.op, c.contract, CaseInputs(arrays, batched.num_heads, batched.layout)))
        if reply[0] != "ok":
            return f"row {r} alone could not run ({reply[0]}: {str(reply[1])[:200]})"
        alone = reply[1] if isinstance(reply[1], dict) else {"y": reply[1]}
        for name, value in values.items():
            if not _same_bits(alone[name], value[at:at + 1]):
                return f"row {r} alone differs from row {r} in its call ({name})"
    return ""


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    return a.dtype == b.dtype and a.size == b.size and a.tobytes() == b.tobytes()


def _judge_gradients(task: Task, grads: dict, seconds: float) -> list[Outcome]:
    """Each output of one backward call, judged at its terms' scale (the call's time split evenly)."""
    p = task.cases[0]
    outcomes = []
    for name, e in p.expected.items():
        c = e.case
        m = judge.judge(grads[name], e.ref, get_format(c.dtype), e.budget, c.num_heads, operand=name,
                        systematic=e.systematic)
        keep = grads[name] if m.outcome != "error" else None
        outcomes.append(Outcome(c, task.impl, m, keep, seconds / len(p.expected), e.ref.floor))
    return outcomes


def _serve(worker: Worker, impls: list[Implementation], tasks_when_ready, sink: queue.Queue,
           keep_calling: bool = False, takes: dict | None = None, sees: dict | None = None) -> None:
    """One worker's whole job: import its implementations (while the parent is still drawing
    cases), then make its tasks' calls in order, putting each Called on `sink`, and None when done.
    The collector judges them, so the worker computes the next call meanwhile (judging a reply took
    as long as computing it: with the two in turn, the last worker left ran on one core). Once a
    worker is killed because normdiff is stopping, nothing more is put: those replies say only that
    it was stopped."""
    try:
        failed, hung = {}, {}
        for impl in impls:
            reply = worker.call(("load", impl))
            if reply[0] != "ok":  # unavailable, broken or crashing: each of its cases gets the reason
                failed[impl.name] = reply
            else:
                _loaded(impl, reply, takes, sees)
        made: dict[tuple, Called] = {}  # the calls an implementation shares, by call_key
        for task in tasks_when_ready():
            key = call_key(task, sees or {})
            called = made[key].again(task) if key in made else call_task(worker, task, failed, hung, keep_calling)
            if worker.closed:
                return
            if key is not None:
                made.setdefault(key, called)
            sink.put(called)
    finally:
        sink.put(None)  # always: the collector waits for one None per worker


def _loaded(impl: Implementation, reply: tuple, takes: dict | None, sees: dict | None) -> None:
    """What a load's reply says of the implementation's call (worker.py): the names it binds, the
    contract's knobs it reads."""
    if takes is not None and reply[1] is not None:
        takes[impl.name] = list(reply[1])
    if sees is not None and len(reply) > 3 and reply[3] is not None:
        sees[impl.name] = tuple(reply[3])


@dataclass
class Called:
    """One task's call, made and not yet judged: the worker's reply, and the batch-invariance
    verdicts of its checked cases (_batch_verdicts), or the exception normdiff's own checking raised."""

    task: Task
    reply: tuple
    verdicts: dict[str, str] = field(default_factory=dict)
    broken: Exception | None = None
    shared: bool = False  # the reply of another task's call (call_key), not a call of its own

    def again(self, task: Task) -> "Called":
        """This call's reply as `task`'s, a task of the same call (call_key: one case each), its
        batch-invariance verdict moved to the task's case."""
        verdicts = {task.cases[0].case.call_id: v for v in self.verdicts.values()}
        return Called(task, self.reply, verdicts, self.broken, shared=True)


def call_key(task: Task, sees: dict) -> tuple | None:
    """What makes two tasks one call of an implementation that shares calls (entry.py
    `shares_calls`): its name, the op, what its adapter reads of the contract (`sees`, by
    implementation, as its load said; the whole contract where it did not say, and for a backward
    call, whose adapter is another), and the bits of every array the worker sends it (the inputs, a
    backward call's upstream gradients) in their memory layout. None where it shares none, and for
    a batch of several cases."""
    impl = task.impl
    if not impl.shares_calls or len(task.cases) != 1:
        return None
    p = task.cases[0]
    knobs = sees.get(impl.name) if p.dy is None else None
    told = p.case.contract if knobs is None else tuple(getattr(p.case.contract, k) for k in knobs)
    return (impl.name, p.case.op, told, p.inputs.num_heads, p.inputs.layout, _digest(p.inputs.arrays),
            None if p.dy is None else _digest(p.dy if isinstance(p.dy, dict) else {"y": p.dy}))


def _digest(arrays: dict) -> str:
    """A digest of arrays by name: each one's dtype, shape and bytes."""
    digest = hashlib.blake2b(digest_size=16)
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        digest.update(f"{name}|{a.dtype.str}|{a.shape}|".encode())
        digest.update(a.tobytes())
    return digest.hexdigest()


def call_task(worker: Worker, task: Task, failed: dict, hung: dict, keep_calling: bool) -> Called:
    """Make the task's call (and the batch-invariance calls it needs) on `worker`; judging is left
    to `judge_called`, so that a run can judge one reply while the worker computes the next."""
    name = task.impl.name
    if name in failed:
        return Called(task, failed[name])
    if name in hung and not keep_calling:
        # a hang is seldom a one-off: paying the full limit on every case would turn one bad
        # function into hours (66 cases x 60 s)
        return Called(task, ("timeout", f"not run: the previous call hung on {hung[name]} (--keep-calling "
                                        "runs every call)"))
    first = task.cases[0]
    c = first.case
    if first.dy is not None:
        reply = worker.call(("backward", task.impl, c.op, c.contract, first.inputs, first.dy))
    else:
        reply = worker.call(("call", task.impl, c.op, c.contract, _batched_inputs(task)))
    if reply[0] == "timeout":
        hung[name] = c.id
    called = Called(task, reply)
    # a mutant's rows are the contract's: whether they vary with the batch says nothing of it
    checked = not task.impl.expected_to_fail and any(p.case.batch_check for p in task.cases)
    if reply[0] == "ok" and first.dy is None and checked:
        try:
            called.verdicts = _batch_verdicts(task, reply[1], worker)
        except Exception as exc:  # a bug of ours, or a reply too malformed to compare: judged as one
            called.broken = exc
    return called


def judge_called(called: Called) -> list[Outcome]:
    """The call's outcomes, judged and marked for batch invariance (a failure of normdiff's own
    judging costs these outcomes, not the run)."""
    task = called.task
    try:
        if called.broken is not None:
            raise called.broken
        outcomes = judge_task(task, called.reply)
        _mark_batch_invariance(outcomes, task, called.verdicts)
        return outcomes
    except Exception as exc:  # a bug of ours in judging must cost these outcomes, not the run
        note = f"normdiff could not judge this output: {type(exc).__name__}: {exc}"
        return [Outcome(e.case, task.impl, judge.failure("error", note)) for p in task.cases for e in p.expected.values()]


def run_task(worker: Worker, task: Task, failed: dict, hung: dict, keep_calling: bool) -> list[Outcome]:
    """One task, called and judged."""
    return judge_called(call_task(worker, task, failed, hung, keep_calling))


def run(suite: Suite, impls: list[Implementation], timeout: float = 60.0, progress=None,
        meanwhile=None, keep_calling: bool = False) -> RunData:
    """Run every case of `suite` through `impls`; one Outcome per case x implementation.
    `meanwhile()` is called on this thread once the workers have their tasks: work that overlaps
    theirs (the engine's run API imports pandas for its tables there). After a call times out, that
    implementation's remaining calls are not made unless `keep_calling`.

    A KeyboardInterrupt (or normdiff.interrupts.Interrupted: SIGTERM, SIGHUP) ends every worker and
    comes back out as Interrupted whose `partial` is the RunData of what had finished."""
    start = time.perf_counter()
    data = RunData()
    runnable: dict[str, list[Implementation]] = defaultdict(list)
    for impl in impls:
        reason = impl.unavailable_reason()
        if reason:
            data.outcomes += [Outcome(c, impl, judge.failure("unavailable", reason)) for c in suite.cases
                              if impl.runs(c)]
        else:
            runnable[impl.worker].append(impl)
    unsupported(data, suite, impls)

    ready = threading.Event()
    tasks: dict[str, list[Task]] = {}

    def tasks_for(framework):
        return lambda: (ready.wait(), tasks[framework])[1]

    sink: queue.Queue = queue.Queue()
    tmp_dir = run_tmp_dir()  # the workers' TMPDIR, removed at the end
    workers = {fw: Worker(fw, timeout=timeout, tmp_dir=tmp_dir) for fw in runnable}
    threads = [threading.Thread(target=_serve, args=(w, runnable[fw], tasks_for(fw), sink, keep_calling, data.takes,
                                                     data.sees), daemon=True)
               for fw, w in workers.items()]
    _HANDOFF.begin()
    try:
        for t in threads:
            t.start()
        prepared = prepare_all(suite.cases)
        for fw, fw_impls in runnable.items():
            tasks[fw] = [t for impl in fw_impls for t in plan(prepared, impl)]
        data.planned = len(data.outcomes) + sum(len(p.expected) for ts in tasks.values() for t in ts for p in t.cases)
        ready.set()
        if meanwhile:
            meanwhile()
        pairing = pairs.Pairing(Counter(e.case.id for ts in tasks.values() for t in ts for p in t.cases
                                        for e in p.expected.values()))
        _collect(data, sink, len(threads), data.planned - len(data.outcomes), progress, pairing)
        data.pairs = pairing.rows
    except KeyboardInterrupt as exc:
        stop = as_interrupted(exc)
        _stop(workers, threads, ready, tasks, runnable)
        _drain(data, sink)
        data.seconds = time.perf_counter() - start
        stop.partial = data
        raise stop from None
    finally:
        _HANDOFF.end()
        for worker in workers.values():
            worker.close()
        shutil.rmtree(tmp_dir, ignore_errors=True)
    data.seconds = time.perf_counter() - start
    return data


RUN_TMP_PREFIX = "normdiff-run-"


def run_tmp_dir() -> str:
    """A fresh temporary folder for this run, named by our pid; first, the folders of runs whose
    process is gone (SIGKILLed: no handler could remove them) are removed."""
    processes.remove_orphaned(tempfile.gettempdir(), RUN_TMP_PREFIX)
    return tempfile.mkdtemp(prefix=f"{RUN_TMP_PREFIX}{os.getpid()}-")


def _stop(workers: dict, threads: list, ready: threading.Event, tasks: dict, runnable: dict) -> None:
    """End every worker now and let their threads finish (they put nothing more)."""
    for fw in runnable:
        tasks.setdefault(fw, [])
    ready.set()
    for worker in workers.values():
        worker.kill()
    for t in threads:
        t.join(timeout=10)


def _drain(data: RunData, sink: queue.Queue) -> None:
    """The calls finished before the stop that the collector had not judged yet, judged."""
    while True:
        try:
            item = sink.get_nowait()
        except queue.Empty:
            return
        if item is not None:
            data.outcomes += judge_called(item)


def _collect(data: RunData, sink: queue.Queue, producers: int, total: int, progress, pairing) -> None:
    """Judge each Called as it arrives (and measure the pairs of each case it completes) until every
    worker's thread has said it is done."""
    finished = 0
    while producers:
        item = sink.get()
        if item is None:
            producers -= 1
            continue
        try:
            outcomes = judge_called(item)
        except KeyboardInterrupt:  # stopped while judging it: _drain judges it with the rest
            sink.put(item)
            raise
        data.outcomes += outcomes
        data.calls += not item.shared
        data.shared += item.shared
        pairing.add(outcomes)
        finished += len(outcomes)
        if progress:
            progress(finished, total)


def unsupported(data: RunData, suite: Suite, impls: list[Implementation]) -> None:
    """An `unsupported` outcome for each case an implementation has the op@convention of but does
    not run (a pass it lacks, a layout its framework cannot give, a case its class cannot take).
    Pairs it does not implement at all get no row: they were 91 % of the default run's rows (103k of
    113k), each saying only what `normdiff list implementations` says, and every view and the
    report's files paid for them."""
    for impl in impls:
        data.outcomes += [
            Outcome(c, impl, judge.failure("unsupported", unsupported_note(impl, c)))
            for c in suite.cases if (c.op, c.convention) in impl.op_conventions and not impl.runs(c)
        ]


def unsupported_note(impl: Implementation, c: Case) -> str:
    if impl.supports(c.op, c.convention, c.pass_):
        return impl.layout_problem(c.layout) or impl.case_problem(c)
    if impl.supports(c.op, c.convention, "backward" if c.pass_ == "forward" else "forward"):
        return f"{impl.name} has no {c.pass_} pass"
    return f"{impl.name} does not implement {c.op}@{c.convention}"
