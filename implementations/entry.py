"""An implementation's registry entry: what it is, which op@conventions it implements, which
framework runs it, and how to load it inside a worker.

An entry is only a description: creating one imports nothing. The worker of its framework imports
`entry` ("package.module:attribute" or "path/to/file.py:attribute") the first time one of its
cases runs, so normdiff never pays for a framework it does not use. The loaded attribute is an
*adapter*:

    adapter(op: str, contract: Contract, inputs: CaseInputs) -> array-like shaped like inputs x

or, for an entry with `params` or a user's `target`, a factory that returns such an adapter. An
implementation of the backward pass names a second entry, `backward`, loaded the same way, whose
adapter is

    backward(op, contract, inputs, dy) -> {"x": dx, "weight": dw, "gate": dgate}

(the gradients of the op's float operands that `inputs` holds, each shaped like its operand; dy in
the case dtype, shaped like x). An implementation with no `entry` runs the backward pass only
(a backward mutant: its forward is the correct one, so a forward row would say nothing).
"""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import TYPE_CHECKING

from normdiff.cases.layouts import DEFAULT as CONTIGUOUS, LAYOUTS
from normdiff.harness.data.errors import UsageError
from normdiff.harness.data.names import unknown
from normdiff.harness.data.ops import OPS
from normdiff.implementations.frameworks import FRAMEWORKS

if TYPE_CHECKING:
    from normdiff.implementations.target import UserTarget

KINDS = ("reference", "own", "framework", "model", "mutant", "user")
# the kinds whose implementations are expected to fail: a mutant is a contract bug on purpose, and the
# harness's self-test is that it disagrees ("caught"); engine/verdict.py reads this, nothing else
EXPECTED_TO_FAIL_KINDS = ("mutant",)
# the kind of a user's code (a target or a command): a run keeps its failing rows' outputs and says
# which bug they look like, as check does (engine/tables.py, harness/analysis/answer.py)
USER_KIND = "user"
TIERS = ("default", "full")


@dataclass(frozen=True)
class Implementation:
    """A registry entry: what runs (its `entry`, in its framework's worker), under which name and
    kind, for which (op, convention) pairs. `api.select` gives registered ones;
    `user_implementation` and `command_implementation` make one for your code or program."""

    name: str
    kind: str
    framework: str
    entry: str
    op_conventions: frozenset  # the (op, convention) pairs it implements, written op@convention
    description: str = ""
    requires: tuple[str, ...] = ()  # importable modules beyond the framework's (e.g. "transformers")
    # Rows are independent, so the runner may concatenate the rows of same-shaped cases into one
    # call. Only for code whose results cannot depend on other rows (ours); never for user code.
    batch_rows: bool = False
    # Which worker process runs it (default: its framework's; a user's code always its own, so its
    # global state, np.seterr or a monkeypatch, never reaches ours). A separate worker overlaps a
    # slow import with other work but pays for its framework again.
    worker: str = ""
    # When set, `entry` is a factory: the worker calls entry(**dict(params)) once to get the adapter
    # (an external command carries its command line this way). Pairs of (name, value). A user
    # target's are derived from `target` (UserTarget.params: what a repro script passes).
    params: tuple = ()
    # The arguments after the case id that make `normdiff repro` rebuild it: a registered one is
    # named (--implementation NAME); a user's carries its target and templates, a command its
    # command line. Empty: the default.
    replay: tuple[str, ...] = ()
    # The entry of its backward adapter ("" : it has no backward pass); with `params`, a factory too.
    backward: str = ""
    # "default": in every run; "full": only in `normdiff run --full` (or named with -i), for the
    # runtimes whose import or compilation would more than double the default run (docs/speed.md)
    tier: str = "default"
    # It claims batch invariance: a row's output is bit-identical whether the row is called alone or
    # among others (Megatron-LM's and vLLM's batch-invariant norms). Where a case checks it
    # (batch_invariance in a suite group), a claimer whose rows differ disagrees; for the others the
    # results' batch_invariant column only reports it.
    batch_invariant: bool = False
    # What a Dask worker must offer to run it under `normdiff run --dask` (pairs such as ("GPU", 1)):
    # its shard goes only to workers started with `dask worker ... --resources "GPU=1"`
    # (harness/engine/campaign.py). A run without --dask ignores it.
    resources: tuple = ()
    # A user's Python code (implementations/target.py): where it is, its framework, templates and
    # what its source says. Its factories (`entry`, `backward`) are called with it in the worker;
    # everything else reads it here, never back from `params`.
    target: UserTarget | None = None
    # Set where one run judges its code under several conventions (`normdiff check` without
    # --convention): cases whose inputs, and what its adapter reads of their contracts (the adapter's
    # `sees`, as its worker's load says; the whole contract where it does not say), are equal are
    # then one call, its output judged against each case's own reference (harness/engine/runner.py,
    # call_key). False: every case is a call of its own.
    shares_calls: bool = False

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise UsageError(f"implementation {self.name!r}: kind {self.kind!r} is not one of {KINDS}")
        if self.tier not in TIERS:
            raise UsageError(f"implementation {self.name!r}: tier {self.tier!r} is not one of {TIERS}")
        if self.framework not in FRAMEWORKS:
            raise UsageError(f"implementation {self.name!r}: " + unknown("framework", self.framework, FRAMEWORKS))
        object.__setattr__(self, "op_conventions", frozenset(self.op_conventions))
        own = f"user {self.name}" if self.kind == "user" else FRAMEWORKS[self.framework].worker
        object.__setattr__(self, "worker", self.worker or own)
        object.__setattr__(self, "replay", tuple(self.replay) or ("--implementation", self.name))
        object.__setattr__(self, "resources", _resource_pairs(self.name, self.resources))
        if self.target is not None:
            if self.params and tuple(self.params) != self.target.params:
                raise ValueError(f"implementation {self.name!r}: params {self.params!r} are not its target's")
            object.__setattr__(self, "params", self.target.params)

    @property
    def expected_to_fail(self) -> bool:
        """Whether it is expected to disagree (a mutant): its rows are caught or missed, never failures."""
        return self.kind in EXPECTED_TO_FAIL_KINDS

    @property
    def passes(self) -> tuple[str, ...]:
        """The passes it runs: "forward" when it has an entry, "backward" when it has a backward."""
        return tuple(p for p, entry in (("forward", self.entry), ("backward", self.backward)) if entry)

    def entry_for(self, pass_: str) -> str:
        return self.backward if pass_ == "backward" else self.entry

    def supports(self, op: str, convention: str, pass_: str = "forward") -> bool:
        """Whether it runs `pass_` of op@convention (no op without a backward pass, a quantizer, has one)."""
        return (op, convention) in self.op_conventions and pass_ in self.passes and \
            (pass_ == "forward" or OPS[op].backward)

    def layout_problem(self, layout: str) -> str | None:
        """Why a case in memory layout `layout` cannot reach this implementation as laid out (its
        framework's arrays have no strides: it would get a contiguous copy), or None."""
        if layout == CONTIGUOUS:
            return None
        if self.expected_to_fail:  # a mutant's layout twins would only repeat its contiguous cases, a call each
            return f"{self.name} is a mutant: a contract bug, run in contiguous memory only"
        if not LAYOUTS[layout].strides:  # a batch of sequences: a shape, which a user's Python code takes
            framework = FRAMEWORKS[self.framework]
            if self.kind == USER_KIND and framework.user_code:
                return None
            return (f"{self.name} is checked on rows: a {layout} case (rank 3) is for a user's code in a Python "
                    "framework (cases/layouts.py)")
        if FRAMEWORKS[self.framework].strides:
            return None
        return (f"{self.framework} arrays have no strides, so a {layout} layout would reach {self.name} as a "
                "contiguous copy (cases/layouts.py)")

    def case_problem(self, case) -> str | None:
        """Why it cannot take `case` although it implements its op@convention and pass in its layout
        (a model layer with no parameter for an operand the case holds, an eps the layer hard-codes),
        or None. Declared here, before any call, so that such a case is `unsupported` with this
        reason, not an error raised from inside the call. The default takes every case."""
        return None

    def runs(self, case) -> bool:
        """Whether it runs `case`: its op@convention and pass, in its memory layout, and the case
        itself (`case_problem`)."""
        return self.supports(case.op, case.convention, case.pass_) and self.layout_problem(case.layout) is None \
            and self.case_problem(case) is None

    def unavailable_reason(self) -> str | None:
        """Why this implementation cannot run here, or None. Looks modules up without importing."""
        framework = FRAMEWORKS[self.framework]
        for module in framework.modules + self.requires:
            if importlib.util.find_spec(module) is None:
                return (f"{module} is not installed; install it with "
                        f"`pip install 'normdiff[{framework.extra_for(module)}]'`")
        return framework.missing()


def _resource_pairs(name: str, resources) -> tuple:
    """(resource, amount) pairs from pairs or a dict, sorted so that equal needs compare equal."""
    try:
        given = dict(resources)
    except (TypeError, ValueError):
        given = {None: resources}  # refused below
    for resource, amount in given.items():
        if not isinstance(resource, str) or isinstance(amount, bool) or not isinstance(amount, (int, float)) \
                or not amount > 0:
            raise UsageError(f"implementation {name!r}: resources must be (name, amount > 0) pairs such as "
                             f"(('GPU', 1),); got {resources!r}")
    return tuple(sorted(given.items()))
