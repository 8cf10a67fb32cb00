"""junit.xml: one test case per implementation x op@convention, counts that match the results table,
failures that carry the case and its replay command, and the layout of the JUnit schema CI reads."""
import dataclasses
import re
import xml.etree.ElementTree as ET

import pandas as pd

from normdiff.reports import junit

# Jenkins' junit-10.xsd (the schema GitLab, GitHub and Azure readers accept), written out by hand:
# no package ships it. element -> (required attributes, allowed attributes, allowed children in order)
SCHEMA = {
    "testsuites": (set(), {"name", "time", "tests", "failures", "disabled", "errors"}, ["testsuite"]),
    "testsuite": ({"name", "tests"},
                  {"name", "tests", "failures", "errors", "time", "disabled", "skipped", "timestamp", "hostname",
                   "id", "package", "file", "log", "url", "version"},
                  ["properties", "testcase", "system-out", "system-err"]),
    "properties": (set(), set(), ["property"]),
    "property": ({"name", "value"}, {"name", "value"}, []),
    "testcase": ({"name"}, {"name", "assertions", "time", "classname", "status", "class", "file", "line"},
                 ["skipped", "error", "failure", "rerunFailure", "rerunError", "flakyFailure", "flakyError",
                  "system-out", "system-err"]),
    "skipped": (set(), {"type", "message"}, []),
    "failure": (set(), {"type", "message"}, []),
    "error": (set(), {"type", "message"}, []),
    "system-out": (set(), set(), []),
    "system-err": (set(), set(), []),
}
SINGLE = {("testsuite", "properties"), ("testsuite", "system-out"), ("testsuite", "system-err"),
          ("testcase", "skipped")}
DECIMAL = re.compile(r"^-?\d+(\.\d+)?$")
INTEGER = re.compile(r"^\d+$")


def validate(element: ET.Element) -> None:
    """Raise AssertionError where `element` breaks junit-10.xsd (element names, required and allowed
    attributes, child order and multiplicity, decimal times, integer counts)."""
    tag = element.tag
    assert tag in SCHEMA, f"unknown element <{tag}>"
    required, allowed, children = SCHEMA[tag]
    assert required <= set(element.attrib), f"<{tag}> lacks {required - set(element.attrib)}"
    assert set(element.attrib) <= allowed, f"<{tag}> has attributes the schema lacks: {set(element.attrib) - allowed}"
    for key in ("time",):
        if key in element.attrib:
            assert DECIMAL.match(element.attrib[key]), f"<{tag} {key}={element.attrib[key]!r}> is not a decimal"
    for key in ("tests", "failures", "errors", "skipped", "disabled"):
        if key in element.attrib:
            assert INTEGER.match(element.attrib[key]), f"<{tag} {key}={element.attrib[key]!r}> is not an integer"
    order = [children.index(c.tag) if c.tag in children else -1 for c in element]
    assert -1 not in order, f"<{tag}> holds {[c.tag for c in element if c.tag not in children]}"
    assert order == sorted(order), f"children of <{tag}> out of order: {[c.tag for c in element]}"
    for child in {c.tag for c in element}:
        if (tag, child) in SINGLE:
            assert sum(c.tag == child for c in element) == 1, f"<{tag}> holds more than one <{child}>"
    if not children:
        assert len(element) == 0
    for c in element:
        validate(c)


def parse(report) -> ET.Element:
    text = junit.junit_xml(report)
    assert text.startswith('<?xml version="1.0" encoding="utf-8"?>')
    root = ET.fromstring(text.encode("utf-8"))
    validate(root)
    return root


def cases_of(root):
    return {(tc.get("classname"), tc.get("name")): tc for tc in root.iter("testcase")}


def expected_counts(results: pd.DataFrame) -> dict:
    """The test cases the results table implies, computed here independently of junit.py."""
    rows = results[results["outcome"].astype(str) != "unsupported"]
    tests = failures = skipped = 0
    for (impl, op, conv), g in rows.groupby(["implementation", "op", "convention"], observed=True):
        outcomes = g["outcome"].astype(str)
        ran = g[~outcomes.isin(["unavailable"])]
        tests += 1
        if ran.empty:
            skipped += 1
        elif (g["kind"] == "mutant").all():
            failures += not ran["outcome"].astype(str).isin(["disagree", "nan_mismatch"]).any()
        else:
            bad = ~ran["outcome"].astype(str).isin(["identical", "agree"]) & ~ran["known_finding"].astype(bool)
            failures += bool(bad.any())
    return {"tests": tests, "failures": failures, "skipped": skipped}


def test_counts_match_the_results_table(small_report):
    root = parse(small_report)
    assert {"name", "tests", "failures", "errors", "time"} <= set(root.attrib)
    for s in root.findall("testsuite"):
        assert {"name", "tests", "failures", "errors", "skipped", "time", "timestamp", "hostname"} <= set(s.attrib)
    for tc in root.iter("testcase"):
        assert {"classname", "name", "time"} <= set(tc.attrib)
    want = expected_counts(small_report.results)
    assert want == {"tests": 13, "failures": 6, "skipped": 2}  # the fixture's design (conftest.py)
    suites = root.findall("testsuite")
    assert int(root.get("tests")) == len(list(root.iter("testcase"))) == want["tests"]
    assert int(root.get("failures")) == len(list(root.iter("failure"))) == want["failures"]
    assert sum(int(s.get("skipped")) for s in suites) == len(list(root.iter("skipped"))) == want["skipped"]
    assert int(root.get("errors")) == 0
    for s in suites:  # each suite's counts are its own test cases'
        assert int(s.get("tests")) == len(s.findall("testcase"))
        assert int(s.get("failures")) == len(s.findall("testcase/failure"))
        assert int(s.get("skipped")) == len(s.findall("testcase/skipped"))
    assert {s.get("name") for s in suites} == {f"normdiff.{n}" for n in small_report.results["implementation"]}


def test_test_cases_are_implementation_by_op_and_convention(small_report):
    cases = cases_of(parse(small_report))
    assert ("normdiff.fx-correct", "rms_norm@qwen3") in cases and ("normdiff.fx-correct", "l2_norm@qwen3.5") in cases
    assert ("normdiff.fx-rms-only", "l2_norm@qwen3.5") not in cases  # a pair it does not implement: no test
    assert len(cases["normdiff.fx-correct", "rms_norm@qwen3"]) == 1  # passes: only its system-out
    eps = cases["normdiff.fx-eps_outside", "rms_norm@qwen3"]
    assert eps.find("failure") is not None  # fails where tiny inputs expose it ...
    assert cases["normdiff.fx-eps_outside", "l2_norm@qwen3.5"].find("failure") is None  # ... not elsewhere


def test_a_failure_carries_its_worst_case_and_the_replay_command(small_report):
    cases = cases_of(parse(small_report))
    failure = cases["normdiff.fx-eps_outside", "rms_norm@qwen3"].find("failure")
    tiny = "rms_norm@qwen3/bf16/4x128/tiny_rms:1e-3/w=trained"
    assert failure.get("type") == "disagree"
    assert tiny in failure.get("message") and "max " in failure.get("message")
    assert f"normdiff repro {tiny} --implementation fx-eps_outside" in failure.get("message")
    assert f"normdiff repro {tiny} --implementation fx-eps_outside" in failure.text
    raised = cases["normdiff.fx-raises", "l2_norm@qwen3.5"].find("failure")
    assert raised.get("type") == "error" and "deliberate failure" in raised.get("message")
    assert "normdiff repro l2_norm@qwen3.5/fp16/4x64/normal --implementation fx-raises" in raised.text


def test_mutants_fail_when_missed_and_pass_when_caught(small_report):
    cases = cases_of(parse(small_report))
    caught = cases["normdiff.mut-caught", "rms_norm@qwen3"]
    assert caught.find("failure") is None and "caught by 1 of 2" in caught.find("system-out").text
    missed = cases["normdiff.mut-missed", "rms_norm@qwen3"].find("failure")
    assert missed is not None and missed.get("type") == "missed" and "missed" in missed.get("message")


def test_unavailable_is_skipped_with_the_reason(small_report):
    skipped = cases_of(parse(small_report))["normdiff.fx-gone", "rms_norm@qwen3"].find("skipped")
    assert "no_such_module_xyz is not installed" in skipped.get("message")


def test_known_findings_are_not_failures_but_are_reported(small_report):
    results = small_report.results.copy()
    tiny = (results["implementation"] == "fx-eps_outside") & (results["regime"] == "tiny_rms:1e-3")
    results.loc[tiny, "known_finding"] = "eps outside the sqrt, on purpose"
    report = dataclasses.replace(small_report, results=results)
    case = cases_of(parse(report))["normdiff.fx-eps_outside", "rms_norm@qwen3"]
    assert case.find("failure") is None
    assert "eps outside the sqrt, on purpose" in case.find("system-out").text
    assert int(parse(report).get("failures")) == expected_counts(results)["failures"] == 5


def test_text_xml_cannot_carry_is_shown_as_escapes(small_report):
    results = small_report.results.copy()
    raised = results["implementation"] == "fx-raises"
    results.loc[raised, "detail"] = "worker said \x1b[31mred\x1b[0m \x00 <&>"
    root = parse(dataclasses.replace(small_report, results=results))  # parses: no control characters
    failure = cases_of(root)["normdiff.fx-raises", "rms_norm@qwen3"].find("failure")
    assert "worker said \\x1b[31mred\\x1b[0m \\x00 <&>" in failure.text  # as the terminal shows it


def test_an_empty_run_is_a_valid_empty_document(small_report):
    report = dataclasses.replace(small_report, results=small_report.results.iloc[:0])
    root = parse(report)
    assert root.get("tests") == "0" and root.findall("testsuite") == []
