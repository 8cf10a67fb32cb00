"""`junit.xml`: the results table as JUnit XML, for CI test reports.

One <testcase> per implementation x (op, convention) it was asked to run (classname
"normdiff.<implementation>", name "<op>@<convention>"), grouped into one <testsuite> per
implementation:
  - a non-mutant fails when any of its cases there is outside identical/agree (disagree,
    nan_mismatch, error, crashed, timeout) and no known finding explains it; the failure carries the
    worst case (case id, outcome, max ulp, detail) and the command that replays it, then every
    failing case;
  - a mutant fails when it is missed (no case there catches it) and passes when caught;
  - an implementation that is not installed is <skipped> with the reason;
  - rows explained by a known finding are not failures: they are listed in <system-out>.
(op, convention) pairs an implementation does not implement (every row `unsupported`) are no test.

The layout follows the JUnit schema CI systems read (Jenkins' junit-10.xsd, which GitLab, GitHub
actions and Azure readers accept): testsuites(name, tests, failures, errors, time) > testsuite(name,
tests, failures, errors, skipped, time, timestamp, hostname) > properties?, testcase*(name,
classname, time) > skipped? failure* system-out*; times are plain decimals.
"""
from __future__ import annotations

import platform
import re
import xml.etree.ElementTree as ET
from collections import Counter

import numpy as np
import pandas as pd

from normdiff.clock import utc_now
from normdiff.text import clipped, fixed, printable
from normdiff.wording import outside_the_budget
from normdiff.harness.data.outcomes import NOT_RUN
from normdiff.harness.engine import verdict
from normdiff.harness.engine.columns import C, Row
from normdiff.harness.engine.tables import ranked
from normdiff.reports import messages

BODY_ROWS = 50  # failing cases listed in one failure's body
# the columns read here besides the messages' own (messages.COLUMNS)
EXTRA = (C.op, C.convention, C.kind, C.framework, C.seconds, C.regime, C.known_finding)


_UNCARRIED = re.compile("[^\t\n\r\x20-\x7e\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _clean(text) -> str:
    """Text XML 1.0 can carry, for every name and text the document holds (names, messages, a
    crash's stderr), shown as the terminal shows it: the control characters (NUL, ESC and the other
    C0 controls but newlines and tabs, DEL and the C1 controls, the bidirectional overrides, lone
    surrogates) as escapes (normdiff.text.printable: `\x00`, `\u202e`), and what XML still cannot
    carry (U+FFFE, U+FFFF) dropped. ElementTree escapes the rest (`<`, `&`, `]]>`, quotes in
    attributes)."""
    return _UNCARRIED.sub("", printable(text))


def _seconds(rows: list[Row]) -> float:
    return float(np.nansum(np.array([np.nan if r.seconds is None else r.seconds for r in rows], dtype=float)))


def _time(value: float) -> str:
    return fixed(max(value, 0.0), 3)


def testcases(results: pd.DataFrame) -> list[dict]:
    """The test cases as dicts: implementation, kind, framework, classname, name, status
    ('passed', 'failed', 'skipped'), message, body, out (system-out), time, cases.

    The table's rows are read once, as Rows (messages.records) grouped by test case: a
    test case's few rows are cheaper to walk in Python than to filter as a DataFrame each time."""
    out = []
    if results.empty:
        return out
    results = results[[c for c in messages.COLUMNS + EXTRA if c in results]]
    asked = results[results[C.outcome].astype(str) != "unsupported"]  # unimplemented pairs are no test
    if C.seconds in asked:
        asked = asked.assign(**{C.seconds: pd.to_numeric(asked[C.seconds], errors="coerce")})
    worst_first = _by_test(messages.records(ranked(asked), EXTRA))
    for key, rows in sorted(_by_test(messages.records(asked, EXTRA)).items()):
        impl, op, convention = key
        outcomes = [str(r.outcome) for r in rows]
        kind = str(rows[0].kind)
        case = {"implementation": impl, "kind": kind, "framework": str(rows[0].framework),
                "classname": f"normdiff.{impl}", "name": f"{op}@{convention}", "status": "passed",
                "message": "", "body": "", "out": "", "time": _seconds(rows),
                "cases": sum(o not in NOT_RUN for o in outcomes)}
        ran = worst_first.get(key)
        if not ran:
            unavailable = [r for r, o in zip(rows, outcomes) if o == "unavailable"]
            reason = clipped(unavailable[0].detail) if unavailable else "nothing to run"
            case.update(status="skipped", message=reason or "unavailable")
        elif verdict.expects_failure(kind):
            _mutant(case, ran, op, convention)
        else:
            _implementation(case, ran, op, convention)
        out.append(case)
    return out


def _by_test(records: list[Row]) -> dict[tuple, list[Row]]:
    """Rows by test case (implementation, op, convention), each test case's in table order."""
    tests: dict[tuple, list[Row]] = {}
    for r in records:
        tests.setdefault((r.implementation, r.op, r.convention), []).append(r)
    return tests


def _verdict(row: dict) -> str:
    """The row's verdict (engine/verdict.py)."""
    return verdict.row_verdict(row.outcome, verdict.expects_failure(str(row.kind)), row.known_finding)


def _counts(rows: list[Row]) -> str:
    """'3 agree, 1 disagree': how many rows had each outcome, outcomes in alphabetical order."""
    return ", ".join(f"{n} {o}" for o, n in sorted(Counter(str(r.outcome) for r in rows).items()))


def _implementation(case: dict, ran: list[Row], op: str, convention: str) -> None:
    """`ran`: the rows that ran, worst first (engine.tables.ranked)."""
    bad = [r for r in ran if _verdict(r) == verdict.FAILS]
    accepted = [r for r in ran if _verdict(r) == verdict.EXCUSED]
    notes = [f"{len(ran)} case(s) of {op}@{convention} ran: " + _counts(ran)]
    if accepted:
        notes.append(f"{len(accepted)} case(s) explained by a known finding (not failures):")
        notes += [messages.message(r) + f"\n  known finding: {r.known_finding}" for r in accepted]
    if not bad:
        notes.append(f"worst case: {messages.headline(ran[0])}")
    case["out"] = "\n".join(notes)
    if not bad:
        return
    top = bad[0]
    case["status"] = "failed"
    case["type"] = str(top.outcome)
    case["message"] = (outside_the_budget(f"{len(bad)} of {len(ran)} case(s) of {op}@{convention}") + "; worst "
                       + "; ".join(line.strip() for line in messages.message(top, limit=200).split("\n")))
    lines = [messages.message(r) for r in bad[:BODY_ROWS]]
    if len(bad) > BODY_ROWS:
        lines.append(f"... and {len(bad) - BODY_ROWS} more failing cases (results.csv)")
    case["body"] = "\n".join(lines)


def _mutant(case: dict, ran: list[Row], op: str, convention: str) -> None:
    killed = [r for r in ran if _verdict(r) == verdict.CAUGHT]
    caught: dict[str, bool] = {}  # regime -> whether a case in it kills the mutant
    for r in ran:
        caught[r.regime] = caught.get(r.regime, False) or _verdict(r) == verdict.CAUGHT
    exposing = ", ".join(sorted(regime for regime, kills in caught.items() if kills))
    invisible = ", ".join(sorted(regime for regime, kills in caught.items() if not kills))
    if killed:
        # the largest rel_l2, the first of equals, NaN last: what a stable descending sort puts first
        top = max(killed, key=lambda r: (r.rel_l2 == r.rel_l2, r.rel_l2))
        case["out"] = (f"caught by {len(killed)} of {len(ran)} cases of {op}@{convention}; exposing regimes: "
                       f"{exposing}; invisible in: {invisible or 'none'}\nworst exposing case:\n{messages.message(top)}")
        return
    case["status"] = "failed"
    case["type"] = "missed"
    case["message"] = (f"mutant {case['implementation']} missed: none of the {len(ran)} cases of {op}@{convention} "
                       "catches it (the harness went blind to this bug)")
    case["body"] = f"regimes run: {invisible}\noutcomes: " + _counts(ran)


def junit_xml(report) -> str:
    """The JUnit XML document as text."""
    cases = testcases(report.results)
    meta = report.meta
    # junit-10.xsd's timestamp carries no time zone: the UTC time, as every report writes it
    stamp = utc_now().replace(microsecond=0, tzinfo=None).isoformat()
    host = platform.node() or "localhost"
    root = ET.Element("testsuites", {"name": _clean(f"normdiff suite {meta.get('suite', '')}".strip())})
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0, "time": 0.0}
    by_impl: dict[str, list[dict]] = {}
    for c in cases:
        by_impl.setdefault(c["implementation"], []).append(c)
    for index, (impl, group) in enumerate(sorted(by_impl.items())):
        counts = {"tests": len(group), "failures": sum(c["status"] == "failed" for c in group), "errors": 0,
                  "skipped": sum(c["status"] == "skipped" for c in group)}
        seconds = sum(c["time"] for c in group)
        suite = ET.SubElement(root, "testsuite", {
            "name": _clean(f"normdiff.{impl}"), "tests": str(counts["tests"]), "failures": str(counts["failures"]),
            "errors": "0", "skipped": str(counts["skipped"]), "time": _time(seconds), "timestamp": stamp,
            "hostname": _clean(host), "id": str(index), "package": "normdiff"})
        props = ET.SubElement(suite, "properties")
        for name, value in (("kind", group[0]["kind"]), ("framework", group[0]["framework"]),
                            ("suite", meta.get("suite", "")),
                            ("normdiff", (meta.get("versions") or {}).get("normdiff"))):
            ET.SubElement(props, "property", {"name": name, "value": _clean(value if value is not None else "")})
        for c in group:
            testcase = ET.SubElement(suite, "testcase", {"classname": _clean(c["classname"]),
                                                         "name": _clean(c["name"]), "time": _time(c["time"])})
            if c["status"] == "skipped":
                ET.SubElement(testcase, "skipped", {"message": _clean(c["message"])})
            elif c["status"] == "failed":
                failure = ET.SubElement(testcase, "failure", {"message": _clean(c["message"]),
                                                              "type": _clean(c.get("type", "failure"))})
                failure.text = _clean(c["body"])
            if c["out"]:
                ET.SubElement(testcase, "system-out").text = _clean(c["out"])
        for key in ("tests", "failures", "skipped"):
            totals[key] += counts[key]
        totals["time"] += seconds
    # junit-10.xsd gives <testsuites> no `skipped` attribute: the per-suite counts carry it
    root.set("tests", str(totals["tests"]))
    root.set("failures", str(totals["failures"]))
    root.set("errors", "0")
    seconds = meta.get("seconds")
    root.set("time", _time(float(seconds) if isinstance(seconds, (int, float)) else totals["time"]))
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
