"""`normdiff model`: the user's norm classes in every site of a small HF model, judged site by site;
and `--mutants`, the teaching table of what each catalogued bug does to a whole model.

A TARGET (--norm, --qk, --gated, --l2, --add, --rope: the kinds of hf_model_families.KINDS) is a
registered implementation's name (`normdiff list implementations`: numpy, torch, hf-qwen3, a
mutant) or the user's code as check takes it (FILE.py:NAME, package.module:NAME; --framework,
--call, --init and --weight-attr apply to it); `--command KIND=CMD` is a program in any language.
It is built for the op and convention of the family's sites of that kind, and runs in the model's
torch worker through the same adapter a `normdiff run` uses.

Exit status: 0 every swapped site agrees, 1 some swapped site is out of its budget or failed, 2
usage error or the model could not be run.
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from normdiff.harness.data import inputs
from normdiff.harness.data.errors import UsageError
from normdiff.harness.engine import model_run
from normdiff.implementations import registry
from normdiff.implementations.entry import Implementation
from normdiff.implementations.hf_model_families import FAMILIES, KINDS, get_family
from normdiff import wording
from normdiff.text import number, printable, share

OPTIONS = {kind: f"--{kind}" for kind in KINDS}


def implementation_for(target: str, family: str, kind: str, user_options: dict, command: bool = False,
                       timeout: float = 60.0) -> Implementation:
    """The implementation a TARGET names, for the family's sites of `kind`; with `command`, TARGET
    is a command line (--command KIND=CMD: any language, check --command's protocol)."""
    from normdiff.harness.commands import usercode

    fam = get_family(family)
    pairs = fam.ops(kind)
    if not pairs:
        raise UsageError(f"{OPTIONS[kind]}: {family} has no {kind} sites; its kinds: {', '.join(fam.kinds())}")
    ((op, convention),) = pairs
    if command:
        return usercode.user_code_implementation({"command": target}, op, convention, timeout)
    names = {impl.name: impl for impl in registry.implementations()}
    if target in names:
        impl = names[target]
        if not any(o == op for o, _ in impl.op_conventions):
            have = ", ".join(sorted({o for o, _ in impl.op_conventions}))
            raise UsageError(f"{OPTIONS[kind]} {target}: it implements {have}, and {family}'s {kind} sites compute "
                             f"{op}")
        if "forward" not in impl.passes:
            raise UsageError(f"{OPTIONS[kind]} {target}: it is a backward; a model runs the forward")
        why = impl.unavailable_reason()
        if why:
            raise usercode.TargetError(f"{OPTIONS[kind]} {target} is unavailable here: {why}")
        return impl
    impl = usercode.user_implementation(target, op, convention, user_options.get("framework"),
                                        call=user_options.get("call") or "", init=user_options.get("init") or "",
                                        weight_attr=user_options.get("weight_attr") or "")
    if "forward" not in impl.passes:
        raise UsageError(f"{OPTIONS[kind]} {target}: its first parameter is dy, so it is a backward; a model runs "
                         "the forward")
    return impl


def check_family_options(family: str, dtype: str, tokens: int, seed: int = 0, timeout: float = 600.0) -> None:
    from normdiff.harness.data.dtypes import get_format

    get_family(family)
    get_format(dtype)  # an unknown dtype names the ones there are
    if isinstance(tokens, bool) or not isinstance(tokens, int) or not 1 <= tokens <= 256:
        raise UsageError(f"--tokens must be 1..256 (the small model's positions), got {tokens!r}")
    inputs.seed(seed)  # torch takes at most 2**63; normdiff's seeds are 32-bit
    inputs.seconds(timeout)


def model(family: str, targets: dict, dtype: str = "bfloat16", seed: int = 0, tokens: int = 128,
          timeout: float = 600.0, options: dict | None = None, replay: str = "") -> model_run.ModelRun:
    """One judged model run. `targets`: kind -> (TARGET, whether it is a command line); `options`:
    --framework, --call, --init, --weight-attr for the targets that are Python code. Every usage
    error is raised before a target is loaded or probed, and before the model starts."""
    if not targets:
        raise UsageError("nothing to swap in: give at least one of " + ", ".join(OPTIONS.values()) +
                         " (or --mutants for the teaching table)")
    check_family_options(family, dtype, tokens, seed, timeout)
    shadowed = get_family(family).shadowed(targets)
    if shadowed:
        kind, by = next(iter(shadowed.items()))
        raise UsageError(f"{OPTIONS[kind]} and {OPTIONS[by]} swap the same modules ({by} takes every {kind} site); "
                         "give one of them")
    swaps = {kind: implementation_for(target, family, kind, options or {}, command, timeout)
             for kind, (target, command) in targets.items()}
    run = model_run.run(family, swaps, dtype, seed, tokens, timeout)
    run.replay = replay
    return run


# ---- the teaching table ------------------------------------------------------------------------


@dataclass
class MutantRow:
    mutant: str
    bug: str  # what it gets wrong, from its registry entry
    family: str = ""
    kind: str = ""
    runs: dict = field(default_factory=dict)  # dtype -> ModelRun
    why_not: str = ""  # no family has a site of its op and convention

    def as_dict(self) -> dict:
        return {"mutant": self.mutant, "bug": self.bug, "family": self.family, "kind": self.kind,
                "why_not": self.why_not, "runs": {dtype: _run_summary(run) for dtype, run in self.runs.items()}}

    @property
    def caught_in(self) -> list[str]:
        return [dtype for dtype, run in self.runs.items() if run.first_diverging is not None or run.failed]


def _run_summary(run: model_run.ModelRun) -> dict:
    first, lg = run.first_diverging, run.logits
    return {"first_diverging": first.path if first else None, "first_ulp": first.max_ulp if first else None,
            "first_budget": first.budget if first else None,
            "sites_out_of_budget": sum(not s.passing for s in run.sites if s.implementation),
            "swapped_sites": sum(bool(s.implementation) for s in run.sites),
            "logits_max_abs": lg.max_abs if lg else None, "logits_rel_l2": lg.rel_l2 if lg else None,
            "top1_agreement": lg.top1_agreement if lg else None, "failed": run.failed}


MUTANT_DTYPES = ("bfloat16", "float16", "float32")


@dataclass
class MutantTable:
    dtypes: tuple
    seed: int
    tokens: int
    rows: list[MutantRow] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"dtypes": list(self.dtypes), "seed": self.seed, "tokens": self.tokens,
                "rows": [r.as_dict() for r in self.rows]}


def site_for(impl: Implementation) -> tuple[str, str] | None:
    """The first family (table order) with a site of one of the mutant's (op, convention)s."""
    for name, fam in FAMILIES.items():
        for kind in fam.kinds():
            if set(fam.ops(kind)) & set(impl.op_conventions):
                return name, kind
    return None


def mutants(dtypes=MUTANT_DTYPES, seed: int = 0, tokens: int = 128, timeout: float = 600.0) -> MutantTable:
    """Each forward mutant alone in every site of its kind, in the first family that has that site,
    once per dtype; all on one torch worker (one import)."""
    for dtype in dtypes:
        check_family_options(next(iter(FAMILIES)), dtype, tokens, seed, timeout)
    table = MutantTable(tuple(dtypes), seed, tokens)
    forward = [i for i in registry.implementations() if i.expected_to_fail and "forward" in i.passes]
    with model_run.torch_worker(timeout) as worker:
        for impl in forward:
            row = MutantRow(impl.name, impl.description)
            place = site_for(impl)
            if place is None:
                pairs = ", ".join(f"{o}@{c}" for o, c in sorted(impl.op_conventions))
                row.why_not = f"no site computes {pairs} in the families normdiff model builds"
            else:
                row.family, row.kind = place
                row.runs = {dtype: model_run.run(row.family, {row.kind: impl}, dtype, seed, tokens, timeout,
                                                 worker=worker) for dtype in dtypes}
            table.rows.append(row)
    return table


# ---- text ----------------------------------------------------------------------------------------


def replay_command(family: str, targets: dict, options: dict, dtype: str, seed: int, tokens: int) -> str:
    """The command line that runs this model again: the same weights, tokens and swaps.
    `targets`: kind -> (TARGET, is a command)."""
    words = ["normdiff", "model", "--family", family]
    for kind, (target, command) in targets.items():
        words += ["--command" if command else "--target", f"{kind}={target}"]
    for flag, value in options.items():
        words += [f"--{flag.replace('_', '-')}", value] if value else []
    words += ["--dtype", dtype, "--seed", str(seed), "--tokens", str(tokens)]
    return shlex.join(words)


def describe(run: model_run.ModelRun) -> str:
    swapped = ", ".join(f"{OPTIONS[k]} {v}" for k, v in run.swaps.items())
    lines = [f"normdiff model --family {run.family} ({run.dtype}, {run.tokens} tokens, seed {run.seed}; transformers "
             f"{run.versions.get('transformers', '?')}, torch {run.versions.get('torch', '?')}): {swapped}",
             f"  {'site':<44} {'kind':<5} {'computed by':<22} {'ulp':>8} {'budget':>7}  {'outcome':<12} "
             f"{'input drift':>11}"]
    for s in run.sites:
        who = s.implementation or "the model's own class"
        lines.append(f"  {s.path:<44} {s.kind:<5} {who[:22]:<22} {number(s.max_ulp):>8} {number(s.budget):>7}  "
                     f"{s.outcome:<12} {_drift(s.input_drift):>11}")
    if run.failed:
        lines.append(f"  {run.failed['path']}: the swapped implementation {run.failed['why']}; the model stopped there")
    first = run.first_diverging
    if first is not None and run.failed and first.path == run.failed["path"]:
        lines.append("  " + wording.first_out_of_budget(first.path, f"{first.kind}: it failed, no output"))
    elif first is not None:
        measured = f"{wording.against(first.max_ulp, first.budget)}, " if first.max_ulp == first.max_ulp else ""
        lines.append("  " + wording.first_out_of_budget(first.path, f"{first.kind}: {measured}{first.outcome}")
                     + (f"; {first.detail}" if first.detail else ""))
    if run.logits is not None:
        lines.append(f"  final hidden state: {_comparison(run.hidden)}")
        lines.append(f"  logits: {_comparison(run.logits)}; top-1 agreement {share(run.logits.top1_agreement)} "
                     f"of {run.tokens} tokens")
    dtypes = sorted({s.detail for s in run.sites if s.implementation and s.detail.startswith("returns ")})
    if dtypes:  # judged as returned; the model goes on in its own dtype, as a cast would make it
        lines.append(f"  output dtype: {'; '.join(dtypes)} (cast to {run.dtype} for the next layer)")
    lines.append("  " + _own_classes(run))
    swapped_sites = [s for s in run.sites if s.implementation]
    bad = [s for s in swapped_sites if not s.passing]
    verdict = "AGREES" if run.agrees else "DISAGREES"
    within = wording.within_budget(len(swapped_sites) - len(bad), len(swapped_sites), "swapped sites")
    lines.append(f"  {verdict}: {within}")
    if run.replay:
        lines.append(f"  replay: {run.replay}")
    return printable("\n".join(lines))


def _own_classes(run: model_run.ModelRun) -> str:
    """The unswapped run's verdict on the model's own classes: the reference is judged too."""
    own = run.own_out_of_budget
    if own:
        at = ", ".join(f"{s.path} ({wording.against(s.max_ulp, s.budget)})" for s in own[:3])
        more = f" and {len(own) - 3} more" if len(own) > 3 else ""
        return wording.leaves_its_budget("the model's own class", f"in the unswapped run at {at}{more}")
    top = max(run.own, key=lambda s: s.max_ulp / s.budget)
    return "the model's own classes, judged the same way: " + wording.all_within_budget(
        len(run.own), "sites", top.max_ulp, top.budget, top.path)


def _drift(value: float) -> str:
    return "0" if value == 0 else number(value)


def _comparison(c: model_run.Comparison) -> str:
    if c.identical:
        return "bit-identical to the model's own classes"
    if c.nonfinite:
        return f"{c.nonfinite} of {c.size} values NaN or Inf where the model's own are finite"
    return f"relative L2 {number(c.rel_l2)}, max |difference| {number(c.max_abs)}"


def describe_mutants(table: MutantTable) -> str:
    lines = [f"normdiff model --mutants ({table.tokens} tokens, seed {table.seed}): each forward mutant alone in every "
             "site of its kind",
             f"  {'mutant':<26} {'family':<10} {'dtype':<9} {'first site out of budget':<40} {'ulp':>9} {'budget':>6} "
             f"{'logits rel L2':>13} {'top-1':>6}"]
    for r in table.rows:
        if not r.runs:
            lines.append(f"  {r.mutant:<26} {'-':<10} {r.why_not}")
            continue
        for i, (dtype, run) in enumerate(r.runs.items()):
            first, lg = run.first_diverging, run.logits
            where = first.path if first else "none: within budget everywhere"
            ulp, budget = (number(first.max_ulp), number(first.budget)) if first else ("-", "-")
            rel, top = (number(lg.rel_l2), share(lg.top1_agreement)) if lg else ("-", "-")
            name, family = (r.mutant, r.family) if i == 0 else ("", "")
            lines.append(f"  {name:<26} {family:<10} {dtype:<9} {where:<40} {ulp:>9} {budget:>6} {rel:>13} {top:>6}")
            if run.failed:
                lines.append(f"    raised at {run.failed['path']}: {run.failed['why']}")
    return printable("\n".join(lines))


__all__ = ["model", "mutants", "describe", "describe_mutants", "implementation_for"]
