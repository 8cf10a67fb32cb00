"""Score normdiff on the corpus of real implementations (corpus/README.md): every entry through
`normdiff check`, against what a user should get.

    python benchmarks/corpus.py                 # a table, then the scores
    python benchmarks/corpus.py --json          # one JSON object: rows and scores
    python benchmarks/corpus.py ID [ID ...]     # those entries only

Scores: of the real bugs, how many are flagged (the verdict disagrees) and how many have the real
bug named first (the first diagnosis is the catalogued bug the entry names); of the correct
implementations and the fixes, how many are judged right (their expected verdict). An entry whose
`open` says normdiff gets it wrong today is scored like any other.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "corpus"
KINDS = ("bug", "fixed", "correct")
REQUIRED = ("id", "kind", "source", "commit", "how", "target", "op", "convention")


@dataclass(frozen=True)
class Entry:
    id: str
    folder: Path
    kind: str
    target: str
    op: str
    convention: str
    framework: str = ""
    passes: str = "both"
    call: str = ""
    init: str = ""
    eps: float | None = None
    expect: dict = field(default_factory=dict)
    meta: dict = field(default_factory=dict)

    @property
    def expected_verdict(self) -> str:
        return self.expect.get("verdict", "agrees" if self.kind != "bug" else "disagrees")

    @property
    def expected_bug(self) -> str:
        return self.expect.get("bug", "")

    @property
    def open(self) -> str:
        return self.expect.get("open", "")


def load(folder: Path) -> Entry:
    """One entry from its folder, its entry.toml checked."""
    data = tomllib.loads((folder / "entry.toml").read_text(encoding="utf-8"))
    missing = [k for k in REQUIRED if not data.get(k)]
    if missing:
        raise ValueError(f"{folder.name}/entry.toml: missing {', '.join(missing)}")
    if data["id"] != folder.name:
        raise ValueError(f"{folder.name}/entry.toml: id {data['id']!r} is not the folder's name")
    if data["kind"] not in KINDS:
        raise ValueError(f"{folder.name}/entry.toml: kind {data['kind']!r} is not one of {KINDS}")
    if data["kind"] in ("bug", "fixed") and not data.get("reference"):
        raise ValueError(f"{folder.name}/entry.toml: a bug or a fix names its issue, PR or commit (reference)")
    file = data["target"].split(":")[0]
    if not (folder / file).is_file():
        raise ValueError(f"{folder.name}/entry.toml: target file {file} is not in the folder")
    return Entry(data["id"], folder, data["kind"], data["target"], data["op"], data["convention"],
                 data.get("framework", ""), data.get("passes", "both"), data.get("call", ""), data.get("init", ""),
                 data.get("eps"), dict(data.get("expect", {})), data)


def entries(ids=()) -> list[Entry]:
    found = [load(f) for f in sorted(ROOT.iterdir()) if (f / "entry.toml").is_file()]
    if ids:
        unknown = sorted(set(ids) - {e.id for e in found})
        if unknown:
            raise SystemExit(f"no corpus entry {', '.join(unknown)}")
        found = [e for e in found if e.id in ids]
    return found


def run(entry: Entry, timeout: float = 120.0) -> dict:
    """The entry through `normdiff check` (the Python API): its verdict, diagnosis and scores."""
    from normdiff.harness.commands import check
    from normdiff.harness.commands.usercode import user_implementation
    from normdiff.harness.data.errors import UsageError

    started = time.perf_counter()
    row = {"id": entry.id, "kind": entry.kind, "op": f"{entry.op}@{entry.convention}",
           "expected": entry.expected_verdict, "expected_bug": entry.expected_bug, "open": entry.open}
    try:
        impl = user_implementation(str(entry.folder / entry.target.split(":")[0]) + ":" + entry.target.split(":", 1)[1],
                                   entry.op, entry.convention, entry.framework or None, name=entry.id,
                                   call=entry.call, init=entry.init)
        result = check.check(impl, suite=entry.meta.get("suite", "default"), timeout=timeout, eps=entry.eps,
                             passes=entry.passes)
        row.update(verdict=result.verdict, named=[m.name for m in result.diagnosis.matches],
                   message=result.message)
    except UsageError as exc:  # what a user would see: exit 2 with the message
        row.update(verdict="error", named=[], message=str(exc))
    row["first"] = row["named"][0] if row["named"] else ""
    row["right"] = row["verdict"] == entry.expected_verdict
    # the first diagnosis names it: alone, or in a pair of bugs the code has together ("a + b")
    row["named_first"] = bool(entry.expected_bug) and entry.expected_bug in row["first"].split(" + ")
    row["seconds"] = round(time.perf_counter() - started, 2)
    return row


def scores(rows: list[dict]) -> dict:
    bugs = [r for r in rows if r["kind"] == "bug"]
    right = [r for r in rows if r["kind"] != "bug"]
    named = [r for r in bugs if r["expected_bug"]]
    return {"bugs": len(bugs), "flagged": sum(r["verdict"] == "disagrees" for r in bugs),
            "catalogued_bugs": len(named), "named_first": sum(r["named_first"] for r in named),
            "correct_or_fixed": len(right), "judged_right": sum(r["right"] for r in right),
            "entries": len(rows), "as_expected": sum(r["right"] and (not r["expected_bug"] or r["named_first"])
                                                     for r in rows)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ids", nargs="*")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rows = [run(e) for e in entries(args.ids)]
    score = scores(rows)
    if args.json:
        print(json.dumps({"rows": rows, "scores": score}))
        return 0
    for r in rows:
        mark = "ok " if r["right"] and (not r["expected_bug"] or r["named_first"]) else "-- "
        print(f"{mark}{r['id']:<44} {r['kind']:<7} {r['op']:<28} {r['verdict']:<9} "
              f"first: {r['first'] or '-':<26} expected: {r['expected']} {r['expected_bug']}")
    print(f"\nbugs flagged {score['flagged']}/{score['bugs']}; real bug named first "
          f"{score['named_first']}/{score['catalogued_bugs']}; correct and fixed judged right "
          f"{score['judged_right']}/{score['correct_or_fixed']}; as expected {score['as_expected']}/{score['entries']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
