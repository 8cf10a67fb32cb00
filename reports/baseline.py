"""Regression baselines: save what a run measured, and compare a later run against it.

`normdiff run --save-baseline FILE` writes one JSON document (format "normdiff-baseline/1"):

    {
      "format": "normdiff-baseline/1",
      "meta": {                       # pretty-printed, keys sorted
        "budgets": {...}, "case_ids": [...one per line...], "case_ids_sha256": "...",
        "cases": 597, "created": "2025-06-01", "implementations": {"numpy": "own", ...},
        "normdiff": "0.1.0", "suite": "default", "versions": {"torch": "2.13.0+cpu", ...}
      },
      "cells": [                      # one cell per line, sorted by (case_id, implementation)
        {"case_id": "...", "implementation": "numpy", "kind": "own", "outcome": "agree",
         "max_ulp": 1.23457, "p99_ulp": 0.5, "rel_l2": 0.00123457, "tolerance_ulp": 2.0,
         "output_digest": "9f...", "known_finding": ""},
        ...
      ]
    }

Diff-friendly and reproducible: cells are every case x implementation that was not `unsupported`
(what an implementation supports is its registry entry, not a measurement), floats are rounded to
6 significant digits (NaN is null, infinities "inf" / "-inf"), and `created` is a UTC day (from
SOURCE_DATE_EPOCH when set). Re-saving a run that measured the same thing keeps the existing file's
date, so identical runs give byte-identical files. Writes are atomic (a temporary file in the same
folder, fsync, os.replace): an interrupted run never leaves a truncated baseline.

`normdiff run --baseline FILE` compares the run with FILE (`compare`); the rules for what counts as
a regression are in `_classify` and docs/baselines.md.
"""
from __future__ import annotations

import errno
import hashlib
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from normdiff.clock import utc_now
from normdiff.files import atomic_write
from normdiff.harness.data import inputs
from normdiff.harness.data.errors import UsageError
from normdiff.harness.data.outcomes import NOT_RUN, OUTCOMES, PASSING
from normdiff.harness.engine import verdict
from normdiff.harness.engine.columns import C
from normdiff.reports.folder import writing
from normdiff.reports.markup import markdown_table, md_code, md_text
from normdiff import wording
from normdiff.text import number, printable

FORMAT = "normdiff-baseline/1"
DIGITS = 6  # significant digits kept for every float
CELL_FIELDS = (C.case_id, C.implementation, C.kind, C.outcome, C.max_ulp, C.p99_ulp, C.rel_l2,
               C.tolerance_ulp, C.output_digest, C.known_finding)
FLOAT_FIELDS = (C.max_ulp, C.p99_ulp, C.rel_l2, C.tolerance_ulp)
RANK = {outcome: i for i, outcome in enumerate(OUTCOMES) if outcome not in NOT_RUN}
# a cell that stays identical/agree and whose max_ulp grew by more than this share of its budget is
# reported as drift (never a regression: both numbers are within the budget)
DRIFT_SHARE = 0.5
CHANGES = ("regression", "improvement", "new_case", "vanished_case", "new_implementation",
           "vanished_implementation", "now_run", "not_run", "known_finding", "mutant", "drift")
CHANGE_COLUMNS = ["change", "case_id", "implementation", "kind", "before", "after", "max_ulp_before",
                  "max_ulp_after", "tolerance_ulp", "reason"]


class BaselineError(UsageError):
    """An unusable baseline (missing, malformed, another suite); the message says what to do.
    The CLI exits 2 with it."""


# ---------------------------------------------------------------------------------------------
# Saving


def _number(value):
    """A float rounded to DIGITS significant digits; None for NaN / missing; 'inf' / '-inf'."""
    if value is None or (isinstance(value, str) and not value):
        return None
    value = float(value)
    if math.isnan(value):
        return None
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return float(f"{value:.{DIGITS}g}")


def _text(value) -> str:
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else str(value)


def cells(results: pd.DataFrame) -> list[dict]:
    """The baseline's cells from a results table: every row that is not `unsupported`, sorted by
    (case_id, implementation), with rounded numbers."""
    rows = results[results[C.outcome].astype(str) != "unsupported"]
    out = []
    for row in rows.to_dict("records"):
        cell = {}
        for name in CELL_FIELDS:
            value = row.get(name)
            cell[name] = _number(value) if name in FLOAT_FIELDS else _text(value)
        out.append(cell)
    return sorted(out, key=lambda c: (c[C.case_id], c[C.implementation]))


def case_ids_hash(case_ids) -> str:
    return hashlib.sha256("\n".join(sorted(set(case_ids))).encode()).hexdigest()


def _today() -> str:
    return utc_now().date().isoformat()


def build(report) -> dict:
    """The baseline document for a report (a reports.report.Report)."""
    results, meta = report.results, report.meta
    case_ids = sorted(set(results[C.case_id])) if len(results) else []
    impls = (results.groupby(C.implementation)[C.kind].first().sort_index().to_dict() if len(results) else {})
    versions = dict(meta.get("versions", {}))
    return {
        "format": FORMAT,
        "meta": {"normdiff": versions.get("normdiff"), "suite": meta.get("suite"),
                 "cases": len(case_ids), "case_ids_sha256": case_ids_hash(case_ids), "case_ids": case_ids,
                 "implementations": impls, "budgets": meta.get("budgets", {}), "versions": versions,
                 "created": _today()},
        "cells": cells(results),
    }


def _lines(doc: dict):
    """The document's text, in pieces: meta pretty-printed with sorted keys, one cell per line."""
    meta = json.dumps(doc["meta"], indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False)
    yield "{\n"
    yield f'  "format": {json.dumps(doc["format"])},\n'
    yield '  "meta": ' + meta.replace("\n", "\n  ") + ",\n"
    cells_ = doc["cells"]
    yield '  "cells": [' + ("\n" if cells_ else "")
    for i, cell in enumerate(cells_):
        text = json.dumps(cell, ensure_ascii=False, allow_nan=False, separators=(", ", ": "))
        yield f"    {text}{',' if i < len(cells_) - 1 else ''}\n"
    yield ("  ]\n" if cells_ else "]\n") + "}\n"


def save(report, path: str | os.PathLike) -> Path:
    """Write the report's baseline to `path`, atomically. An existing baseline that holds the same
    measurements keeps its date, so the file stays byte-identical."""
    path = Path(path)
    doc = build(report)
    try:
        old = inputs.json_loads(inputs.read_text(path, "baseline"))
        if (isinstance(old, dict) and isinstance(old.get("meta"), dict)
                and {**old["meta"], "created": None} == {**doc["meta"], "created": None}
                and old.get("cells") == doc["cells"] and isinstance(old["meta"].get("created"), str)):
            doc["meta"]["created"] = old["meta"]["created"]
    except (OSError, ValueError):
        pass
    with writing(path, "--save-baseline"):  # refused (a full disk): an OutputError, the old file kept
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, _lines(doc))
    return path


# ---------------------------------------------------------------------------------------------
# Loading


@dataclass
class Baseline:
    path: Path
    meta: dict
    cells: pd.DataFrame  # CELL_FIELDS; numbers as floats (NaN for null)


def _fix(path) -> str:
    return f"re-create it with `normdiff run --suite SUITE --save-baseline {path}`"


def load(path: str | os.PathLike) -> Baseline:
    """Read and validate a baseline file; BaselineError names the problem and the fix."""
    path = Path(path)
    try:  # a regular file of bounded size: a pipe or /dev/zero is refused by name, before it is read
        text = inputs.read_text(path, "baseline", "give the file `normdiff run --save-baseline FILE` wrote")
    except inputs.InputError as exc:
        if exc.why == os.strerror(errno.ENOENT):
            raise BaselineError(f"baseline file {path} does not exist; create it with "
                                f"`normdiff run --suite SUITE --save-baseline {path}`") from None
        raise BaselineError(f"baseline {exc}") from None
    try:
        doc = inputs.json_loads(text)
    except json.JSONDecodeError as exc:
        raise BaselineError(f"baseline file {path} is not valid JSON (line {exc.lineno}, column {exc.colno}: "
                            f"{exc.msg}); it may be truncated or edited by hand: {_fix(path)}") from None
    except inputs.TooDeep as exc:
        raise BaselineError(f"baseline file {path}: {exc}; {_fix(path)}") from None
    if not isinstance(doc, dict) or "format" not in doc:
        raise BaselineError(f"{path} is not a normdiff baseline (no 'format' field): {_fix(path)}")
    if doc["format"] != FORMAT:
        raise BaselineError(f"{path} has baseline format {doc['format']!r}; this normdiff reads {FORMAT!r}: "
                            f"{_fix(path)}")
    meta, raw = doc.get("meta"), doc.get("cells")
    if not isinstance(meta, dict) or not isinstance(raw, list):
        raise BaselineError(f"baseline file {path} lacks its 'meta' object or 'cells' list: {_fix(path)}")
    for key, kind in (("suite", str), ("case_ids", list), ("case_ids_sha256", str), ("implementations", dict)):
        if not isinstance(meta.get(key), kind):
            raise BaselineError(f"baseline file {path}: meta.{key} is missing or not a {kind.__name__}: "
                                f"{_fix(path)}")
    if case_ids_hash(meta["case_ids"]) != meta["case_ids_sha256"]:
        raise BaselineError(f"baseline file {path}: meta.case_ids does not match meta.case_ids_sha256 "
                            f"(edited by hand?): {_fix(path)}")
    rows = []
    for i, cell in enumerate(raw):
        where = f"baseline file {path}, cell {i} ({cell.get(C.case_id, '?') if isinstance(cell, dict) else cell!r})"
        if not isinstance(cell, dict) or set(CELL_FIELDS) - set(cell):
            missing = sorted(set(CELL_FIELDS) - set(cell)) if isinstance(cell, dict) else list(CELL_FIELDS)
            raise BaselineError(f"{where}: missing fields {missing}: {_fix(path)}")
        if cell[C.outcome] not in OUTCOMES:
            raise BaselineError(f"{where}: unknown outcome {cell[C.outcome]!r}; known: {', '.join(OUTCOMES)}")
        row = {k: cell[k] for k in CELL_FIELDS}
        for name in FLOAT_FIELDS:
            value = cell[name]
            if value is None:
                row[name] = float("nan")
            elif isinstance(value, (int, float)) and not isinstance(value, bool) or value in ("inf", "-inf"):
                row[name] = float(value)
            else:
                raise BaselineError(f"{where}: {name} must be a number, null, 'inf' or '-inf', got {value!r}")
        rows.append(row)
    cells_ = pd.DataFrame(rows, columns=list(CELL_FIELDS))
    if cells_.duplicated([C.case_id, C.implementation]).any():
        dup = cells_[cells_.duplicated([C.case_id, C.implementation])].iloc[0]
        raise BaselineError(f"baseline file {path}: cell ({dup[C.case_id]}, {dup[C.implementation]}) appears "
                            f"twice: {_fix(path)}")
    return Baseline(path, meta, cells_)


def check_suite(baseline: Baseline, suite_name: str) -> None:
    """A baseline of another suite is refused (exit 2): comparing it would report nearly every case
    as new or vanished and hide what changed. The same suite with edited cases is compared on the
    shared cases, with a warning (`compare`)."""
    if baseline.meta["suite"] != suite_name:
        raise BaselineError(
            f"baseline {baseline.path} was saved for suite {baseline.meta['suite']!r}, and this run is suite "
            f"{suite_name!r}; run with --suite {baseline.meta['suite']} to compare, or save a baseline of "
            f"this suite with --save-baseline")


# ---------------------------------------------------------------------------------------------
# Comparing


@dataclass
class Comparison:
    baseline: Baseline
    changes: pd.DataFrame  # CHANGE_COLUMNS
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # version differences and the like

    def count(self, change: str) -> int:
        return int((self.changes["change"] == change).sum())

    @property
    def regressions(self) -> pd.DataFrame:
        return self.changes[self.changes["change"] == "regression"]

    @property
    def exit_code(self) -> int:
        return 1 if self.count("regression") else 0

    def counts(self) -> dict:
        return {c: self.count(c) for c in CHANGES if self.count(c)}

    def as_meta(self) -> dict:
        """What meta.json records about the comparison."""
        meta = self.baseline.meta
        return {"file": str(self.baseline.path), "suite": meta.get("suite"), "normdiff": meta.get("normdiff"),
                "created": meta.get("created"), "counts": self.counts(), "warnings": list(self.warnings),
                "notes": list(self.notes),
                "regressions": [f"{r.implementation} {r.case_id}: {r.reason}".strip()
                                for r in self.regressions.head(100).itertuples()]}  # all: changes.csv

    def headline(self) -> str:
        counts = self.counts()
        if not counts:
            return "no changes"
        return ", ".join(f"{n} {c.replace('_', ' ')}{'s' if n != 1 and c in ('regression', 'improvement') else ''}"
                         for c, n in counts.items())

    def terminal(self, limit: int = 20) -> str:
        meta = self.baseline.meta
        lines = [f"changes since baseline {self.baseline.path} (suite {meta.get('suite')}, normdiff "
                 f"{meta.get('normdiff')}, saved {meta.get('created')}): {self.headline()}"]
        lines += [f"  WARNING: {w}" for w in self.warnings]
        for change in ("regression", "improvement"):
            rows = self.changes[self.changes["change"] == change]
            for r in rows.head(limit).itertuples():
                lines.append(f"  {change.upper():<11} {r.implementation:<18} {r.case_id or '(all cases)'}: {r.reason}")
            if len(rows) > limit:
                lines.append(f"  ... and {len(rows) - limit} more {change}s (changes.csv lists them all)")
        others = {c: n for c, n in self.counts().items() if c not in ("regression", "improvement")}
        if others:
            lines.append("  also: " + ", ".join(f"{n} {c.replace('_', ' ')}" for c, n in others.items())
                         + " (changes.csv)")
        if self.count("regression"):
            lines.append(f"  {self.count('regression')} regression(s) since the baseline: exit status 1")
        # names, reasons and the baseline's own fields are data: no control character reaches a terminal
        return "\n".join(printable(line, newlines=False) for line in lines) + "\n"

    def markdown(self, limit: int = 50) -> str:
        meta = self.baseline.meta
        lines = ["## Changes since baseline", "",
                 f"Baseline {md_code(self.baseline.path)}: suite {md_code(meta.get('suite'))}, normdiff "
                 f"{md_text(meta.get('normdiff'))}, saved {md_text(meta.get('created'))}, {md_text(meta.get('cases'))} "
                 "cases. Every change is in `changes.csv`.", ""]
        lines += [f"> **Warning:** {md_text(w)}" for w in self.warnings] + ([""] if self.warnings else [])
        lines += [f"- {md_text(n)}" for n in self.notes] + ([""] if self.notes else [])
        counts = self.counts()
        if not counts:
            lines.append("No changes: every cell has the outcome and the error it had.")
            return "\n".join(lines)
        n = self.count("regression")
        lines.append(f"**{n} regression(s)**: the run exits with status 1." if n
                     else "No regressions.")
        lines += ["", markdown_table(pd.DataFrame({"change": list(counts), "count": list(counts.values())})), ""]
        shown = ["change", "case_id", "implementation", "before", "after", "max_ulp_before", "max_ulp_after", "reason"]
        for change, title in (("regression", "Regressions"), ("improvement", "Improvements")):
            rows = self.changes[self.changes["change"] == change]
            if len(rows):
                more = f" (first {limit} of {len(rows)})" if len(rows) > limit else ""
                lines += [f"### {title}{more}", "", markdown_table(rows.head(limit)[shown[1:]]), ""]
        rest = self.changes[~self.changes["change"].isin(("regression", "improvement", "drift"))]
        if len(rest):
            more = f" (first {limit} of {len(rest)})" if len(rest) > limit else ""
            lines += [f"### Other changes{more}", "", markdown_table(rest.head(limit)[shown]), ""]
        return "\n".join(lines).rstrip("\n")


def _failing(outcome: str) -> bool:
    return outcome not in PASSING and outcome not in NOT_RUN


def compare(baseline: Baseline, results: pd.DataFrame, meta: dict | None = None) -> Comparison:
    """Compare a run's results table (and meta: versions, budgets) with a baseline.

    A regression is one of:
      * a cell in both whose outcome got worse into a failing outcome (identical < agree < disagree
        < nan_mismatch < error < crashed < timeout): agree -> disagree, disagree -> error, ...
      * a cell in both with the same outcome whose max_ulp grew by more than its tolerance_ulp
        (a disagreement that got bigger: 40 -> 400 ulp);
      * a failing cell that had no baseline cell: a new case, a new implementation, or a cell that
        was unsupported / unavailable in the baseline ("a new disagreement");
      * a mutant caught in the baseline (by some case) and missed now: the harness went blind.
    Never regressions: mutants' own cell changes, rows explained by a known finding, identical <->
    agree (both within budget: drift), cells that stopped running (not_run: unavailable now), and
    new / vanished cases and implementations themselves. Improvements are the mirror image.
    """
    meta = meta or {}
    bmeta = baseline.meta
    warnings, notes = _meta_differences(baseline, meta)
    cur_impls = (results.groupby(C.implementation)[C.kind].first().to_dict() if len(results) else {})
    base_impls = dict(bmeta["implementations"])
    cur_cases = set(results[C.case_id]) if len(results) else set()
    base_cases = set(bmeta["case_ids"])
    if case_ids_hash(cur_cases) != bmeta["case_ids_sha256"]:
        shared = len(cur_cases & base_cases)
        warnings.append(f"suite {bmeta['suite']!r} has changed since the baseline: "
                        f"{len(cur_cases - base_cases)} new and {len(base_cases - cur_cases)} vanished case(s); "
                        f"compared on the {shared} shared case(s)")
    cur_cells = {(c[C.case_id], c[C.implementation]): c for c in cells(results)} if len(results) else {}
    if len(results):  # keep the unrounded numbers for the current run
        for row in results[results[C.outcome].astype(str) != "unsupported"][
                [C.case_id, C.implementation, C.max_ulp, C.tolerance_ulp]].itertuples(index=False):
            cell = cur_cells[(row.case_id, row.implementation)]
            cell[C.max_ulp], cell[C.tolerance_ulp] = float(row.max_ulp), float(row.tolerance_ulp)
    base_cells = {(c[C.case_id], c[C.implementation]): c for c in baseline.cells.to_dict("records")}
    changes = []

    def add(change, case_id, impl, kind, before, after, b=None, c=None, reason=""):
        b_ulp = float("nan") if b is None else b.get(C.max_ulp, float("nan"))
        c_ulp = float("nan") if c is None else c.get(C.max_ulp, float("nan"))
        tol = next((x.get(C.tolerance_ulp) for x in (c, b) if x is not None
                    and x.get(C.tolerance_ulp) is not None and not math.isnan(x.get(C.tolerance_ulp))), float("nan"))
        changes.append({"change": change, "case_id": case_id, "implementation": impl, "kind": kind,
                        "before": before, "after": after, "max_ulp_before": b_ulp, "max_ulp_after": c_ulp,
                        "tolerance_ulp": tol, "reason": reason})

    for case_id in sorted(cur_cases - base_cases):
        add("new_case", case_id, "", "", "", "", reason="not in the baseline's suite")
    for case_id in sorted(base_cases - cur_cases):
        add("vanished_case", case_id, "", "", "", "", reason="in the baseline, not in this run's suite")
    for name in sorted(set(cur_impls) - set(base_impls)):
        add("new_implementation", "", name, cur_impls[name], "", "", reason="not in the baseline")
    for name in sorted(set(base_impls) - set(cur_impls)):
        add("vanished_implementation", "", name, base_impls[name], "", "",
            reason="in the baseline, not in this run (not selected, or no longer registered)")

    for key in sorted(set(cur_cells) | set(base_cells)):
        case_id, impl = key
        if case_id not in cur_cases or impl not in cur_impls:
            continue  # vanished: reported once per case / implementation above
        b, c = base_cells.get(key), cur_cells.get(key)
        new_cell = case_id not in base_cases or impl not in base_impls
        why = ("new case" if case_id not in base_cases else "new implementation") if new_cell else ""
        _classify(add, case_id, impl, None if new_cell else b, c, why)

    _mutants(add, baseline.cells, results, cur_impls, base_impls)
    frame = pd.DataFrame(changes, columns=CHANGE_COLUMNS)
    for column in ("max_ulp_before", "max_ulp_after", "tolerance_ulp"):  # as the baseline rounds them
        frame[column] = frame[column].map(lambda v: float("nan") if _number(v) is None else float(_number(v)))
    order = {c: i for i, c in enumerate(CHANGES)}
    frame = (frame.assign(_o=frame["change"].map(order)).sort_values(["_o", "case_id", "implementation"], kind="stable")
             .drop(columns="_o").reset_index(drop=True))
    return Comparison(baseline, frame, warnings, notes)


def _classify(add, case_id: str, impl: str, b: dict | None, c: dict | None, new: str) -> None:
    """One cell's change (see `compare` for the rules); `new` says why a cell has no baseline
    ("new case", "new implementation"), or is empty."""
    kind = (c or b)[C.kind]
    before, after = (b[C.outcome] if b else ""), (c[C.outcome] if c else "unsupported")
    b_ran, c_ran = bool(b) and before not in NOT_RUN, bool(c) and after not in NOT_RUN
    known = bool(c and c[C.known_finding])
    mutant = verdict.expects_failure(kind)
    if not c_ran:
        if b_ran:
            add("not_run", case_id, impl, kind, before, after, b, c,
                f"ran in the baseline ({before}), {after} now")
        return
    if not b_ran:
        if verdict.row_verdict(after, mutant, c[C.known_finding]) == verdict.FAILS:
            what = new or f"{before or 'unsupported'} in the baseline"
            add("regression", case_id, impl, kind, before, after, b, c, f"new disagreement ({what}): {after}")
        elif not new:
            add("now_run", case_id, impl, kind, before or "unsupported", after, b, c,
                f"{before or 'unsupported'} in the baseline, runs now")
        return
    b_ulp, c_ulp = b[C.max_ulp], c[C.max_ulp]
    tol = c[C.tolerance_ulp] if not math.isnan(c[C.tolerance_ulp]) else b[C.tolerance_ulp]
    grew = c_ulp - b_ulp if not (math.isnan(b_ulp) or math.isnan(c_ulp)) else float("nan")
    worse, better = RANK[after] > RANK[before], RANK[after] < RANK[before]
    ulps = f"max_ulp {number(b_ulp, missing='nan')} -> {number(c_ulp, missing='nan')}"
    if mutant:
        if before != after:
            add("mutant", case_id, impl, kind, before, after, b, c,
                f"mutant cell {before} -> {after} (a mutant's own cells are not regressions)")
        return
    if known and (worse or (grew > tol)):
        add("known_finding", case_id, impl, kind, before, after, b, c,
            f"{before} -> {after}, {ulps}; explained by a known finding")
        return
    if worse and _failing(after):
        add("regression", case_id, impl, kind, before, after, b, c, f"{before} -> {after} ({ulps})")
    elif better and _failing(before):
        add("improvement", case_id, impl, kind, before, after, b, c, f"{before} -> {after} ({ulps})")
    elif before != after:  # identical <-> agree: both within the budget
        add("drift", case_id, impl, kind, before, after, b, c,
            wording.still_within_budget(f"{before} -> {after} ({ulps})"))
    elif grew > tol:
        add("regression", case_id, impl, kind, before, after, b, c, wording.grew_past_tolerance(ulps, grew, tol))
    elif -grew > tol:
        add("improvement", case_id, impl, kind, before, after, b, c, wording.shrank_past_tolerance(ulps, -grew, tol))
    elif not _failing(after) and grew > DRIFT_SHARE * tol:
        add("drift", case_id, impl, kind, before, after, b, c,
            wording.grew_share_of_budget(ulps, DRIFT_SHARE, tol, after))
    elif b[C.output_digest] != c[C.output_digest] and b[C.output_digest] and c[C.output_digest]:
        add("drift", case_id, impl, kind, before, after, b, c, f"output bits changed, still {after} ({ulps})")


def _mutants(add, base: pd.DataFrame, results: pd.DataFrame, cur_impls: dict, base_impls: dict) -> None:
    """A mutant caught in the baseline and missed now is a regression: the harness went blind."""
    if not len(results):
        return
    for name in sorted(n for n, k in cur_impls.items() if verdict.expects_failure(k) and n in base_impls):
        before = base[base[C.implementation] == name]
        was = before[[v == verdict.CAUGHT for v in verdict.row_verdicts(before)]]
        rows = results[results[C.implementation] == name]
        ran = rows[~rows[C.outcome].astype(str).isin(NOT_RUN)]
        if was.empty or ran.empty:
            continue  # never caught, or not run now (not_run says so per cell)
        if verdict.CAUGHT not in verdict.row_verdicts(ran):
            cases = sorted(was[C.case_id])
            add("regression", "", name, "mutant", "caught", "missed", None, None,
                f"mutant caught in the baseline by {len(cases)} case(s) ({', '.join(cases[:3])}"
                f"{', ...' if len(cases) > 3 else ''}), missed by all {len(ran)} now: the harness went blind")


def _meta_differences(baseline: Baseline, meta: dict) -> tuple[list[str], list[str]]:
    bmeta, warnings, notes = baseline.meta, [], []
    versions = meta.get("versions", {})
    old, new = bmeta.get("normdiff"), versions.get("normdiff")
    if old != new:
        warnings.append(f"the baseline was saved by normdiff {old}, this is normdiff {new}: changes may come "
                        f"from normdiff itself (oracle, budgets, detectors); review them, then re-save the "
                        f"baseline with --save-baseline")
    if meta.get("budgets") is not None and bmeta.get("budgets") is not None and meta["budgets"] != bmeta["budgets"]:
        warnings.append("the ULP budgets differ from the baseline's: outcomes near a budget may change for "
                        "that reason alone")
    old_versions = bmeta.get("versions") or {}
    for name in sorted(set(old_versions) | set(versions)):
        if name not in ("normdiff", "platform") and old_versions.get(name) != versions.get(name):
            notes.append(f"{name}: {old_versions.get(name)} in the baseline, {versions.get(name)} now")
    return warnings, notes


def attach(report, baseline: Baseline) -> Comparison:
    """Compare the report with the baseline, and record it on the report: `report.baseline` (the
    summary.md section and changes.csv), meta["baseline"], and the exit status (1 on regressions)."""
    comparison = compare(baseline, report.results, report.meta)
    report.baseline = comparison
    report.meta["baseline"] = comparison.as_meta()
    report.meta["exit_code"] = max(report.meta["exit_code"], comparison.exit_code)
    return comparison
