"""`normdiff model`: the user's norm classes in every site of a small HF model, judged site by site;
and `--mutants`, the teaching table of what each catalogued bug does to a whole model.

A TARGET (--target KIND=TARGET, KIND one of hf_model_families.KINDS) is a registered
implementation's name (`normdiff list implementations`: numpy, torch, hf-qwen3, a mutant) or the
user's code as check takes it (FILE.py:NAME, package.module:NAME; --framework, --call, --init and
--weight-attr apply to it); `--command KIND=CMD` is a program in any language. It is built for the
op and convention of the family's sites of that kind, and runs in the model's torch worker through
the same adapter a `normdiff run` uses. A quantizing kind (quant, add_quant) may run at any
convention whose norm is the family's: --quant-convention's, else the one a target implements (a
quant-* mutant's), else the family's default (vllm-fp8).

Exit status: 0 every swapped site agrees, 1 some swapped site is out of its budget or failed, 2
usage error or the model could not be run.
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from normdiff.harness.data import inputs
from normdiff.harness.data.errors import UsageError
from normdiff.harness.data.ops import get_op
from normdiff.harness.engine import model_run
from normdiff.implementations import registry
from normdiff.implementations.entry import Implementation
from normdiff.implementations.hf_model_families import FAMILIES, KINDS, get_family
from normdiff import wording
from normdiff.text import number, printable, share

# the kinds that had an option of their own (--norm TARGET, now --target norm=TARGET): kept, deprecated
OLD_SPELLINGS = ("norm", "qk", "gated", "l2", "add", "rope")
OPTIONS = {kind: f"--{kind}" if kind in OLD_SPELLINGS else f"--target {kind}" for kind in KINDS}


def site_pair(family: str, kind: str, quant_convention: str | None = None, implemented=()) -> tuple[str, str]:
    """The (op, convention) the family's sites of `kind` run at: their one pair, or for a quantizing
    kind (several conventions fit) the one asked, else the first `implemented` (a mutant's), else
    the family's default."""
    fam = get_family(family)
    pairs = fam.ops(kind)
    if not pairs:
        raise UsageError(f"{OPTIONS[kind]}: {family} has no {kind} sites; its kinds: {', '.join(fam.kinds())}")
    if len(pairs) == 1:
        return pairs[0]
    if quant_convention is not None:
        op = pairs[0][0]
        if (op, quant_convention) not in pairs:
            raise UsageError(f"--quant-convention {quant_convention}: its norm is not {family}'s; the {op} "
                             f"conventions that fit {family}'s {kind} sites: {', '.join(c for _, c in pairs)}")
        return op, quant_convention
    return next((p for p in pairs if p in implemented), pairs[0])


def implementation_for(target: str, family: str, kind: str, user_options: dict, command: bool = False,
                       timeout: float = 60.0, quant_convention: str | None = None) -> Implementation:
    """The implementation a TARGET names, for the family's sites of `kind`; with `command`, TARGET
    is a command line (--command KIND=CMD: any language, check --command's protocol)."""
    from normdiff.harness.commands import usercode

    names = {impl.name: impl for impl in registry.implementations()}
    op, convention = site_pair(family, kind, quant_convention, names[target].op_conventions if target in names else ())
    if command:
        return usercode.user_code_implementation({"command": target}, op, convention, timeout)
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
          timeout: float = 600.0, options: dict | None = None, replay: str = "",
          quant_convention: str | None = None) -> model_run.ModelRun:
    """One judged model run. `targets`: kind -> (TARGET, whether it is a command line); `options`:
    --framework, --call, --init, --weight-attr for the targets that are Python code;
    `quant_convention`: the convention of the quantizing sites. Every usage error is raised before
    a target is loaded or probed, and before the model starts."""
    if not targets:
        raise UsageError("nothing to swap in: give at least one --target KIND=TARGET, KIND one of "
                         + ", ".join(KINDS) + " (or --mutants for the teaching table)")
    check_family_options(family, dtype, tokens, seed, timeout)
    fam = get_family(family)
    shadowed = fam.shadowed(targets)
    if shadowed:
        kind, by = next(iter(shadowed.items()))
        raise UsageError(f"{OPTIONS[kind]} and {' and '.join(OPTIONS[b] for b in by)} swap the same modules "
                         f"({' and '.join(by)} {'take' if len(by) > 1 else 'takes'} every {kind} site); "
                         "give one of them")
    unfused = fam.unfused(targets)
    if unfused:
        raise UsageError(f"{OPTIONS[unfused]} takes norms that the fused adds swapped with it need fused (the running "
                         "sum passes through them): give --target add_quant=TARGET too, as vLLM's FP8 decoder fuses "
                         "them, or leave --add out")
    choosing = _choosing(family, targets, quant_convention)
    swaps = {kind: implementation_for(target, family, kind, options or {}, command, timeout, quant_convention)
             for kind, (target, command) in targets.items()}
    conventions = {kind: site_pair(family, kind, quant_convention, swaps[kind].op_conventions)[1] for kind in choosing}
    run = model_run.run(family, swaps, dtype, seed, tokens, timeout, conventions=conventions)
    run.replay = replay
    return run


def _choosing(family: str, targets: dict, quant_convention: str | None) -> list[str]:
    """The kinds swapped that have a choice of convention (the quantizing ones), after every kind is
    checked to have sites and --quant-convention to fit them: before any target loads."""
    for kind in targets:
        site_pair(family, kind, quant_convention)
    choosing = [kind for kind in targets if len(get_family(family).ops(kind)) > 1]
    if quant_convention is not None and not choosing:
        raise UsageError(f"--quant-convention {quant_convention}: no quantizing sites are swapped (give "
                         f"--target quant=TARGET or --target add_quant=TARGET)")
    return choosing


# ---- the teaching table ------------------------------------------------------------------------


@dataclass
class MutantRow:
    mutant: str
    bug: str  # what it gets wrong, from its registry entry
    family: str = ""
    kind: str = ""
    runs: dict = field(default_factory=dict)  # dtype -> ModelRun
    why_not: str = ""  # no family has a site of its op and convention
    # a quantizing mutant: the correct quantizer of its convention in the same sites (dtype ->
    # ModelRun), whose logit drift is the format's own error; the mutant's is that and its bug's
    legal: dict = field(default_factory=dict)
    convention: str = ""  # the convention its sites ran at

    def as_dict(self) -> dict:
        return {"mutant": self.mutant, "bug": self.bug, "family": self.family, "kind": self.kind,
                "convention": self.convention, "why_not": self.why_not,
                "runs": {dtype: _run_summary(run) for dtype, run in self.runs.items()},
                "legal": {dtype: _run_summary(run) for dtype, run in self.legal.items()}}

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


def why_unsited(impl: Implementation) -> str:
    pairs = ", ".join(f"{o}@{c}" for o, c in sorted(impl.op_conventions))
    if any(operand.scalar for o, _ in impl.op_conventions for operand in get_op(o).operands):
        return (f"no site computes {pairs}: it quantizes with the caller's calibrated per-tensor scale, which a "
                "model run does not give")
    if any(get_op(o).quantizes for o, _ in impl.op_conventions):  # hf_model_families.fits says why
        return f"no site computes {pairs}: no family built here has the norm it quantizes"
    return f"no site computes {pairs} in the families normdiff model builds"


def mutants(dtypes=MUTANT_DTYPES, seed: int = 0, tokens: int = 128, timeout: float = 600.0) -> MutantTable:
    """Each forward mutant alone in every site of its kind, in the first family that has that site,
    once per dtype; all on one torch worker (one import)."""
    for dtype in dtypes:
        check_family_options(next(iter(FAMILIES)), dtype, tokens, seed, timeout)
    table = MutantTable(tuple(dtypes), seed, tokens)
    forward = [i for i in registry.implementations() if i.expected_to_fail and "forward" in i.passes]
    legal = {}  # (family, kind, convention, dtype) -> the correct quantizer's run, shared by its mutants
    with model_run.torch_worker(timeout) as worker:
        def run(family, kind, impl, convention, dtype):
            return model_run.run(family, {kind: impl}, dtype, seed, tokens, timeout, worker=worker,
                                 conventions={kind: convention})

        def correct(*key):
            if key not in legal:
                legal[key] = run(*key[:2], registry.get("numpy"), *key[2:])
            return legal[key]

        for impl in forward:
            row = MutantRow(impl.name, impl.description)
            place = site_for(impl)
            if place is None:
                row.why_not = why_unsited(impl)
            else:
                row.family, row.kind = place
                op, row.convention = site_pair(row.family, row.kind, implemented=impl.op_conventions)
                row.runs = {dtype: run(row.family, row.kind, impl, row.convention, dtype) for dtype in dtypes}
                if get_op(op).quantizes:  # numpy's own quantizer: the mutant's code without its bug
                    row.legal = {dtype: correct(*place, row.convention, dtype) for dtype in dtypes}
            table.rows.append(row)
    return table


# ---- text ----------------------------------------------------------------------------------------


def replay_command(family: str, targets: dict, options: dict, dtype: str, seed: int, tokens: int,
                   quant_convention: str | None = None) -> str:
    """The command line that runs this model again: the same weights, tokens and swaps.
    `targets`: kind -> (TARGET, is a command)."""
    words = ["normdiff", "model", "--family", family]
    for kind, (target, command) in targets.items():
        words += ["--command" if command else "--target", f"{kind}={target}"]
    for flag, value in {**options, "quant_convention": quant_convention}.items():
        words += [f"--{flag.replace('_', '-')}", value] if value else []
    words += ["--dtype", dtype, "--seed", str(seed), "--tokens", str(tokens)]
    return shlex.join(words)


def describe(run: model_run.ModelRun) -> str:
    swapped = ", ".join(_swap(run, k, v) for k, v in run.swaps.items())
    kind = max([5] + [len(s.kind) for s in run.sites])  # add_quant widens the column
    lines = [f"normdiff model --family {run.family} ({run.dtype}, {run.tokens} tokens, seed {run.seed}; transformers "
             f"{run.versions.get('transformers', '?')}, torch {run.versions.get('torch', '?')}): {swapped}",
             f"  {'site':<44} {'kind':<{kind}} {'computed by':<22} {'ulp':>8} {'budget':>7}  {'outcome':<12} "
             f"{'input drift':>11}"]
    for s in run.sites:
        who = s.implementation or "the model's own class"
        lines.append(f"  {s.path:<44} {s.kind:<{kind}} {who[:22]:<22} {number(s.max_ulp):>8} {number(s.budget):>7}  "
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
    lines += _quantized(run)
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


def _swap(run: model_run.ModelRun, kind: str, name: str) -> str:
    if kind in OLD_SPELLINGS:
        return f"{OPTIONS[kind]} {name}"
    where = next((f" ({s.op}@{s.convention})" for s in run.sites if s.kind == kind), "")
    return f"--target {kind}={name}{where}"


def _quantized(run: model_run.ModelRun) -> list[str]:
    """The quantization error each quantizing kind's sites handed on, beside the judged codes: what
    the format costs (a correct E4M3 quantizer's is at most half a step, 2^-4 relative, and the
    rounding of y before it where the contract rounds y to the input dtype)."""
    lines = []
    for kind in run.swaps:
        errors = [(s.quant_error, s.path) for s in run.sites if s.kind == kind and s.quant_error is not None]
        finite = [e for e in errors if e[0] == e[0]]
        if not errors:
            continue
        text = f"  {kind} sites: q * scale against the exact y of each site's input"
        if finite:
            error, path = max(finite)
            text += f", relative L2 up to {number(error)} ({path})"
        if len(finite) < len(errors):
            text += f"; NaN at {len(errors) - len(finite)} of {len(errors)} sites (a NaN came in)"
        lines.append(text)
    return lines


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
            rel, top = _logit_drift(run), share(lg.top1_agreement) if lg else "-"
            name, family = (r.mutant, r.family) if i == 0 else ("", "")
            lines.append(f"  {name:<26} {family:<10} {dtype:<9} {where:<40} {ulp:>9} {budget:>6} {rel:>13} {top:>6}")
            if run.failed:
                lines.append(f"    raised at {run.failed['path']}: {run.failed['why']}")
        if r.legal:
            drift = ", ".join(f"{_logit_drift(run)} ({dtype})" for dtype, run in r.legal.items())
            lines.append(f"    correct {r.convention} (numpy) in the same sites: logits rel L2 {drift}, the format's "
                         "own error")
    return printable("\n".join(lines))


def _logit_drift(run: model_run.ModelRun) -> str:
    lg = run.logits
    return "-" if lg is None else "NaN" if lg.nonfinite else number(lg.rel_l2)


__all__ = ["model", "mutants", "describe", "describe_mutants", "implementation_for"]
