"""`normdiff fuzz --dask ADDRESS`: a fuzz campaign sharded over a Dask cluster.

A shard is one implementation x one op@convention, searched by an ordinary `fuzz.fuzz` inside a
Dask task (so its worker hosts normdiff's own framework workers, with their isolation and limits:
engine/campaign.py), with its own seed derived from the campaign's seed and the shard's names. The
same campaign run here, one shard after another (`campaign(..., address=None)`), makes the same
searches: with --max-examples they find the same minimal cases. Each shard replays alone:
`normdiff fuzz -i NAME --op OP --convention CONV --seed SEED`, printed with it. --max-time and
--max-examples are per shard; the shards run as the cluster has room.
"""
from __future__ import annotations

import functools
import hashlib
import random
import shlex
from dataclasses import dataclass, field

from normdiff.harness.commands import fuzz
from normdiff.harness.commands.usercode import TargetError
from normdiff.harness.engine.campaign import ShardError, map_shards
from normdiff.implementations.entry import Implementation


EXIT_FOUND = 1
EXIT_INCOMPLETE = 3  # nothing found, but a shard did not search: the campaign did not cover what was asked


@dataclass(frozen=True)
class FuzzShard:
    impl: Implementation
    op: str
    convention: str
    seed: int
    flags: tuple[str, ...] = ()  # the options that shape its search, as fuzz's flags (replay)

    @property
    def resources(self) -> dict:
        return dict(self.impl.resources)

    @property
    def replay(self) -> str:
        # a registered name, or a user's target (or command) and how to call it: fuzz spells them as repro
        args = list(self.impl.replay)
        if "--op" not in args:
            args += ["--op", self.op, "--convention", self.convention]
        return f"normdiff fuzz {shlex.join([*args, *self.flags])} --seed {self.seed}"


@dataclass
class CampaignResult:
    seed: int
    address: str
    shards: list[FuzzShard]
    results: list = field(default_factory=list)  # per shard: a FuzzResult, a ShardError, or None (stopped)

    @property
    def found(self) -> list[tuple[FuzzShard, fuzz.FuzzResult]]:
        return [(s, r) for s, r in zip(self.shards, self.results) if isinstance(r, fuzz.FuzzResult) and r.found]

    @property
    def not_run(self) -> list[tuple[FuzzShard, object]]:
        return [(s, r) for s, r in zip(self.shards, self.results) if not isinstance(r, fuzz.FuzzResult)]

    @property
    def exit_code(self) -> int:
        """1 when a shard found a failure; 3 when none did but some shard did not search (the
        campaign did not cover what it was asked to); else 0."""
        return EXIT_FOUND if self.found else EXIT_INCOMPLETE if self.not_run else 0

    def as_dict(self) -> dict:
        def one(shard, result):
            row = {"implementation": shard.impl.name, "op": shard.op, "convention": shard.convention,
                   "seed": shard.seed, "replay": shard.replay}
            if isinstance(result, fuzz.FuzzResult):
                return {**row, **result.as_dict()}
            why = result.reason if isinstance(result, ShardError) else "stopped before it finished"
            return {**row, "found": None, "not_run": why}
        return {"campaign": True, "address": self.address, "seed": self.seed, "shards": len(self.shards),
                "found": len(self.found), "not_run": len(self.not_run), "exit_code": self.exit_code,
                "results": [one(s, r) for s, r in zip(self.shards, self.results)]}


def new_seed() -> int:
    return random.SystemRandom().randrange(2 ** 32)


def shard_seed(seed: int, *names: str) -> int:
    """A shard's seed: the campaign's seed and the shard's names, hashed (stable across machines)."""
    text = ":".join([str(seed), *names]).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=4).digest(), "big")


def plan(impls: list[Implementation], seed: int, passes: str | None = None, op: str | None = None,
         convention: str | None = None, **options) -> list[FuzzShard]:
    """One shard per implementation x op@convention it runs (narrowed by op / convention); the
    same checks as a local fuzz (of `options` too: fuzz.fuzz's), before anything starts (UsageError)."""
    fuzz.check_options(**options)
    flags = _flags(passes, options)
    shards = []
    for impl in impls:
        chosen = fuzz.passes_for([impl], passes)
        pairs = fuzz.pairs_for([impl], chosen, op, convention, options.get("max_width", fuzz.DEFAULT_MAX_WIDTH))
        fuzz.case_strategy([impl], chosen, pairs, options.get("dtypes"), options.get("max_rows", fuzz.DEFAULT_MAX_ROWS),
                           options.get("max_width", fuzz.DEFAULT_MAX_WIDTH), options.get("regimes"))
        shards += [FuzzShard(impl, o, c, shard_seed(seed, impl.name, o, c), flags) for o, c in pairs]
    return shards


def _flags(passes: str | None, options: dict) -> tuple[str, ...]:
    """fuzz's flags for the options that decide which examples a search draws (not its time)."""
    out = ["--pass", passes] if passes and passes != "both" else []
    out += [w for d in options.get("dtypes") or () for w in ("--dtype", d)]
    out += [w for r in options.get("regimes") or () for w in ("--regime", r)]
    for name in ("max_rows", "max_width", "max_examples"):
        default = getattr(fuzz, f"DEFAULT_{name.upper()}", None)
        if options.get(name) is not None and options[name] != default:
            out += [f"--{name.replace('_', '-')}", str(options[name])]
    return tuple(out + (["--no-database"] if options.get("database") is False else []))


def _search(shard: FuzzShard, options: dict):
    """One shard's search (in a Dask worker, or here); an implementation that cannot be loaded
    there is that shard's ShardError, not the campaign's end."""
    try:
        return fuzz.fuzz([shard.impl], op=shard.op, convention=shard.convention, seed=shard.seed, **options)
    except TargetError as exc:
        return ShardError("unavailable", str(exc))


def campaign(impls: list[Implementation], address: str | None, *, seed: int | None = None,
             passes: str | None = None, op: str | None = None, convention: str | None = None,
             progress=None, shards: list[FuzzShard] | None = None, **options) -> CampaignResult:
    """Fuzz every shard of `impls` (plan; `shards`: a plan already made of these arguments) on the
    Dask cluster at `address` ("local": a LocalCluster), or here one after another when `address`
    is None; `options` are fuzz.fuzz's (max_time, max_examples, dtypes, ...), each shard's. Stopped
    by a signal, it raises Interrupted whose `partial` is the CampaignResult of the shards that
    finished."""
    from normdiff.interrupts import as_interrupted

    if seed is None:
        seed = new_seed()
    if shards is None:
        shards = plan(impls, seed, passes, op, convention, **options)
    options = {**options, "passes": passes}
    result = CampaignResult(seed, address or "here", shards, [None] * len(shards))

    def arrived(index, value):
        result.results[index] = value
        if progress:
            progress(shards[index], value)

    try:
        if address is None:
            for index, shard in enumerate(shards):
                arrived(index, _search(shard, options))
        else:
            map_shards(functools.partial(_search, options=options), shards, address,
                       lambda shard: shard.resources, arrived)
    except KeyboardInterrupt as exc:
        stop = as_interrupted(exc)
        stop.partial = result
        raise stop from None
    return result


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def describe_shard(shard: FuzzShard, value) -> str:
    """One line for a finished shard (and the minimal case's lines when it found one)."""
    from normdiff.text import printable, seconds

    name = printable(f"{shard.impl.name} {shard.op}@{shard.convention}", newlines=False)
    if isinstance(value, fuzz.FuzzResult):
        if not value.found:
            return (f"  nothing  {name}: {_count(value.examples, 'example')} in {seconds(value.seconds)} "
                    f"(seed {shard.seed})")
        m = value.minimal
        return "\n".join([
            f"  FOUND    {name}: {m['outcome']} after {_count(value.examples, 'example')} in {seconds(value.time_to_find)} "
            f"(seed {shard.seed})",
            f"           minimal case  {printable(m['case_id'], newlines=False)}",
            f"           repro         {printable(m['repro'], newlines=False)}",
            f"           search again  {printable(shard.replay, newlines=False)}"])
    why = value.reason if isinstance(value, ShardError) else "stopped before it finished"
    return f"  not run  {name}: {printable(why, newlines=False)}"


def header(address: str, shards: int, seed: int) -> str:
    from normdiff.text import printable

    return (f"normdiff fuzz campaign on {printable(address, newlines=False)}: {_count(shards, 'shard')} "
            f"(an implementation x op@convention each; seed {seed})")


def describe(result: CampaignResult, shards: bool = True) -> str:
    """The campaign's summary: a line per shard (unless `shards` is False: printed as they came),
    then the count."""
    found, missing = len(result.found), len(result.not_run)
    lines = [header(result.address, len(result.shards), result.seed)] if shards else []
    lines += [describe_shard(s, r) for s, r in zip(result.shards, result.results)] if shards else []
    lines.append(f"{found} of {_count(len(result.shards), 'shard')} found a failure"
                 + (f"; {missing} did not search (exit {EXIT_INCOMPLETE})" if missing else ""))
    return "\n".join(lines)
