"""One verdict (engine/verdict.py): a row's, an implementation's and check's, and known findings
matched by behaviour (the case's columns, the outcome, and the same numbers as the library the
finding was seen in), never by an implementation's name."""
import re

import numpy as np
import pandas as pd
import pytest

from normdiff.cases.model import Case
from normdiff.harness.data.findings import KNOWN, Finding, allows
from normdiff.harness.data.outcomes import OUTCOMES
from normdiff.harness.engine import judge, runner, verdict
from normdiff.harness.engine.session import Session
from normdiff.implementations.entry import EXPECTED_TO_FAIL_KINDS, KINDS, Implementation

FINDING = Finding("lib", "nan_mismatch", (("regime", "zero_rows"),), "0/0 in fp16")
ERRORS = Finding("lib", "error", (("dtype", "bfloat16"),), "no bf16 kernel", re.compile(r"NOT_IMPLEMENTED : Mul"))


def table(rows, columns=("case_id", "implementation", "kind", "outcome", "regime", "dtype", "output_digest",
                         "detail")):
    return pd.DataFrame(rows, columns=list(columns))


@pytest.mark.parametrize("outcome", OUTCOMES)
@pytest.mark.parametrize("expected", [False, True])
@pytest.mark.parametrize("known", ["", "a finding"])
def test_row_verdict_is_the_rule(outcome, expected, known):
    said = verdict.row_verdict(outcome, expected, known)
    if outcome in ("unsupported", "unavailable"):
        assert said == "not run"
    elif expected:  # a known finding never excuses nor spoils a mutant: it is caught by disagreeing
        assert said == ("caught" if outcome in ("disagree", "nan_mismatch") else "missed")
    elif outcome in ("identical", "agree"):
        assert said == "passes"
    else:
        assert said == ("excused" if known else "fails")


def test_expected_to_fail_is_the_entry_field_not_a_name():
    assert EXPECTED_TO_FAIL_KINDS == ("mutant",) and set(EXPECTED_TO_FAIL_KINDS) <= set(KINDS)
    for kind in KINDS:
        impl = Implementation("x", kind, "numpy", "x:y", frozenset())
        assert impl.expected_to_fail == verdict.expects_failure(kind) == (kind == "mutant")


@pytest.mark.parametrize("outcomes, kind, known, said", [
    (["agree", "identical"], "own", ["", ""], "agrees"),
    (["agree", "disagree"], "own", ["", ""], "disagrees"),
    (["agree", "disagree"], "own", ["", "f"], "known finding"),
    (["agree", "error"], "own", ["", ""], "partial"),
    (["error", "crashed", "unsupported"], "own", ["", "", ""], "error"),
    (["error", "disagree"], "own", ["", ""], "disagrees"),
    (["unsupported", "unavailable"], "own", ["", ""], "unavailable"),
    (["unsupported"], "own", [""], "nothing to run"),
    (["agree", "nan_mismatch"], "mutant", ["", ""], "caught"),
    (["agree", "error"], "mutant", ["", ""], "missed"),
    (["disagree"], "mutant", ["f"], "caught"),
])
def test_an_implementations_verdict_and_checks(outcomes, kind, known, said):
    rows = pd.DataFrame({"outcome": outcomes, "kind": kind, "known_finding": known})
    assert verdict.implementation(rows) == said
    assert verdict.check(rows) == verdict.CHECK[said]
    assert verdict.CHECK[said] in ("agrees", "disagrees", "partial", "error")


def test_failing_rows_are_the_rows_whose_verdict_is_fails():
    rows = table([("c1", "a", "own", "disagree", "normal", "float32", "d1", ""),
                  ("c2", "a", "own", "disagree", "normal", "float32", "d2", ""),
                  ("c3", "m", "mutant", "disagree", "normal", "float32", "d3", ""),
                  ("c4", "a", "own", "unavailable", "normal", "float32", "", "")]).assign(known_finding=["", "f", "", ""])
    assert verdict.failing_rows(rows)["case_id"].tolist() == ["c1"]
    assert verdict.failing_implementations(rows) == ["a"]


def test_a_finding_matches_whoever_gives_the_librarys_numbers():
    rows = table([
        ("c1", "lib", "framework", "nan_mismatch", "zero_rows", "float16", "aaa", ""),  # the library itself
        ("c1", "wrapper", "user", "nan_mismatch", "zero_rows", "float16", "aaa", ""),  # same bits: same finding
        ("c1", "mine", "user", "nan_mismatch", "zero_rows", "float16", "bbb", ""),  # same place, other bits
        ("c2", "lib", "framework", "disagree", "normal", "float16", "ccc", ""),  # not the finding's columns
    ])
    annotated, stale = verdict.annotate(rows, (FINDING,))
    assert annotated["known_finding"].tolist() == ["0/0 in fp16", "0/0 in fp16", "", ""]
    assert verdict.failing_rows(annotated)["implementation"].tolist() == ["mine", "lib"]
    assert stale == []


def test_a_finding_needs_its_library_to_show_it_on_that_case():
    rows = table([("c1", "lib", "framework", "agree", "zero_rows", "float16", "aaa", ""),
                  ("c1", "wrapper", "user", "nan_mismatch", "zero_rows", "float16", "aaa", "")])
    annotated, stale = verdict.annotate(rows, (FINDING,))
    assert annotated["known_finding"].tolist() == ["", ""]
    assert stale and stale[0].startswith("lib: expected nan_mismatch")  # the library no longer shows it


def test_evidence_from_a_library_that_was_not_part_of_the_table():
    rows = table([("c1", "wrapper", "user", "nan_mismatch", "zero_rows", "float16", "aaa", ""),
                  ("c2", "numpy-port", "user", "nan_mismatch", "zero_rows", "float16", "bbb", ""),
                  ("c3", "mutant", "mutant", "nan_mismatch", "zero_rows", "float16", "ccc", "")])
    rows["framework"] = ["torch", "numpy", "torch"]
    # a failing row of the library's framework wants it; a port in another framework and a mutant do not
    assert verdict.wanted_exemplars(rows, {"lib": "torch"}, (FINDING,)) == {"lib": {"c1"}}
    assert verdict.wanted_exemplars(rows.iloc[:1], {}, (FINDING,)) == {}  # a library not registered here
    excused = rows.iloc[:1].assign(known_finding="already explained")
    assert verdict.wanted_exemplars(excused, {"lib": "torch"}, (FINDING,)) == {}  # nothing fails: none wanted
    rows = rows.iloc[:1].drop(columns="framework")
    assert verdict.annotate(rows, (FINDING,))[0]["known_finding"].tolist() == [""]
    library = table([("c1", "lib", "framework", "nan_mismatch", "zero_rows", "float16", "aaa", "")])
    annotated, stale = verdict.annotate(rows, (FINDING,), exemplars=library)
    assert annotated["known_finding"].tolist() == ["0/0 in fp16"] and len(annotated) == 1 and stale == []


def test_a_finding_without_output_matches_by_its_message():
    rows = table([
        ("c1", "graph", "framework", "error", "normal", "bfloat16", "", "NOT_IMPLEMENTED : Mul(14) node"),
        ("c1", "other", "user", "error", "normal", "bfloat16", "", "ValueError: shapes"),
        ("c2", "graph", "framework", "error", "normal", "float16", "", "NOT_IMPLEMENTED : Mul(14) node"),
    ])
    annotated, _ = verdict.annotate(rows, (ERRORS,))
    assert annotated["known_finding"].tolist() == ["no bf16 kernel", "", ""]
    assert verdict.wanted_exemplars(rows.assign(framework="onnxruntime"), {"lib": "onnxruntime"}, (ERRORS,)) == {}


def test_where_several_findings_match_the_last_listed_applies():
    broad = Finding("lib", "nan_mismatch", (("dtype", "float16"),), "broad")
    rows = table([("c1", "lib", "framework", "nan_mismatch", "zero_rows", "float16", "aaa", ""),
                  ("c2", "lib", "framework", "nan_mismatch", "normal", "float16", "bbb", "")])
    assert verdict.annotate(rows, (broad, FINDING))[0]["known_finding"].tolist() == ["0/0 in fp16", "broad"]


def test_the_catalogue_is_matched_by_behaviour():
    for finding in KNOWN:
        assert finding.outcome in OUTCOMES
        # a finding about an output compares bits with its library; one about a failure without an
        # output (an error) needs a message pattern instead
        assert (finding.detail is not None) == (finding.outcome in ("error", "crashed", "timeout")), finding
        assert all(not isinstance(v, re.Pattern) or allows(v, v.pattern) is not None for _, v in finding.where)


def test_the_session_excuses_by_the_same_rule():
    """fuzz's Session.failures: the library's own outcome on the case is the evidence."""
    case = Case.of("l2_norm", "torch", "float16", "2x8", regime="zero_rows")

    def outcome(name, kind, digest):
        impl = Implementation(name, kind, "torch", "x:y", frozenset({(case.op, case.convention)}))
        m = judge.Measurement(outcome="nan_mismatch", output_digest=digest)
        return runner.Outcome(case, impl, m, output=np.zeros(1))

    library = outcome("torch-F.normalize", "framework", "abc")
    wrapper, other, mutant = outcome("normalize", "user", "abc"), outcome("mine", "user", "def"), \
        outcome("m", "mutant", "def")
    bad = Session([]).failures([library, wrapper, other, mutant])
    assert [o.impl.name for o in bad] == ["mine", "m"]  # the mutant is caught, the wrapper excused
    assert [o.impl.name for o in Session([]).failures([wrapper, other])] == ["normalize", "mine"]  # no evidence


def test_no_module_but_the_entry_and_the_verdict_compares_with_an_expected_kind():
    """Whether an implementation is expected to fail is the entry's field (entry.expected_to_fail)
    and the verdict's reading of a row's kind; a `kind == "mutant"` elsewhere would be a seventh copy
    of the rule."""
    import ast
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("layers", Path(__file__).resolve().parents[2] / "test_layers.py")
    layers = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(layers)
    allowed = {"normdiff.implementations.entry", "normdiff.harness.engine.verdict"}
    offenders = []
    for module, source in layers.sources().items():
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Compare) and module not in allowed and any(
                    isinstance(n, ast.Constant) and n.value in EXPECTED_TO_FAIL_KINDS
                    for n in [node.left, *node.comparators]):
                offenders.append(f"{module} line {node.lineno}")
    assert offenders == []
