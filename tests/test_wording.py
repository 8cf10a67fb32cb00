"""normdiff.wording: every sentence that compares an error with its budget, word for word (the
reports, the judge's details in results.csv and the commands' output are compared byte for byte
across runs), and a structural test that no other module composes one.

The rule the structural test applies. A module composes an error-vs-budget sentence when it joins
words that name a budget to values it computes:
  (a) an f-string with at least one replacement field whose literal text says "budget",
      "tolerance" or "ulp against" (any case), or one whose literal text right after a field
      begins with " against " (f"{error} against {budget}");
  (b) a plain string literal saying one of those words that is an operand of `+` or `%`, or whose
      `.format` is called.
Docstrings and literals used alone (a column header, a help text, a label) compose nothing, and
the scan reads every .py module of the package (normdiff/, harness/, cases/, implementations/,
reports/). Only normdiff/wording.py may compose one. ALLOWED lists the few that name a budget
without comparing an error with it, each by module and a fragment of its literal text; an entry
that no longer matches fails too, so the list cannot go stale.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import numpy as np
import pytest

from normdiff import wording

# ---- the sentences -----------------------------------------------------------------------------


def test_an_error_beside_its_budget():
    assert wording.with_budget(121.375, 2.0) == "121 ulp (budget 2)"
    assert wording.with_budget(43.5625, 5.4375) == "43.6 ulp (budget 5.44)"
    assert wording.with_budget(0.5, None) == "0.5 ulp (budget n/a)"
    assert wording.with_budget(0.5, float("nan")) == "0.5 ulp (budget n/a)"
    assert wording.against(43.5625, 5.4375) == "43.6 ulp against 5.44"
    assert wording.against(np.float64(1.2), 2) == "1.2 ulp against 2"
    assert wording.against_a_budget(1.59, 2.0) == "1.59 ulp against a budget of 2"
    assert wording.max_ulp_with_budget(121.375, 2.015625) == "max_ulp 121.375 (budget 2.01562 ulp)"
    assert wording.max_ulp_with_budget(None, float("nan")) == "max_ulp - (budget - ulp)"
    assert wording.budget_of(3.0, "bfloat16") == "budget 3 ulp of bfloat16"


def test_the_judges_channel_bias_detail():
    assert wording.channel_bias(np.float64(0.4567), 512, np.float64(0.31), 1.0) == (
        "coherent per-channel scale error: a channel's mean error is 0.46 ulp over 512 rows (budget 0.31), "
        "while every element is within 1.00 ulp")


def test_how_many_are_within_or_outside():
    assert wording.outside_the_budget("3 of 40 case(s) of rms_norm@qwen3") == \
        "3 of 40 case(s) of rms_norm@qwen3 outside the budget"
    assert wording.outside_the_budget("7 unexplained rows") == "7 unexplained rows outside the budget"
    assert wording.within_budget(35, 36, "swapped sites") == "35 of 36 swapped sites within budget"
    assert wording.all_within_budget(36, "sites", 1.2, 2.0, "model.norm") == \
        "all 36 sites within budget (worst 1.2 ulp against 2, model.norm)"
    assert wording.leaves_its_budget("the model's own class", "in the unswapped run at a (3 ulp against 2)") == \
        "the model's own class leaves its budget in the unswapped run at a (3 ulp against 2)"
    assert wording.first_out_of_budget("model.layers.0.input_layernorm", "rms_norm: 43.6 ulp against 2, disagree") \
        == "first site out of budget: model.layers.0.input_layernorm (rms_norm: 43.6 ulp against 2, disagree)"


def test_how_an_error_changed_against_its_budget():
    change = "max_ulp 1 -> 9"
    assert wording.still_within_budget("identical -> agree (max_ulp 0 -> 1.2)") == \
        "identical -> agree (max_ulp 0 -> 1.2), within budget"
    assert wording.grew_past_tolerance(change, 8.0, 2.0) == "max_ulp 1 -> 9: grew by 8, more than the tolerance 2 ulp"
    assert wording.shrank_past_tolerance(change, 8.125, 2.015625) == \
        "max_ulp 1 -> 9: shrank by 8.12, more than the tolerance 2.01562 ulp"
    assert wording.grew_share_of_budget("max_ulp 0.5 -> 0.9", 0.1, 2.0, "agree") == \
        "max_ulp 0.5 -> 0.9: grew by more than 10% of the 2 ulp budget, still agree"


def test_checks_answer_first_lines():
    assert wording.the_bug("eps-outside-sqrt", "yours: eps outside; qwen3: eps inside") == \
        "bug: eps-outside-sqrt -- fix: yours: eps outside; qwen3: eps inside"
    assert wording.closest_bug("eps-ignored", 7, 30) == \
        "bug: not identified; the closest, eps-ignored, explains only 7 of the 30 disagreeing cases examined"
    assert wording.fitted_bug("your eps is 1e-06") == "bug: no catalogued one; fitted: your eps is 1e-06"
    assert wording.NO_BUG.startswith("bug: not identified: no catalogued bug")


@pytest.mark.parametrize("verdict, bug, count, reason, says", [
    ("disagrees", "eps-outside-sqrt", 24, "", "disagrees, eps-outside-sqrt (24 of 78 cases)"),
    ("disagrees", "", 24, "", "disagrees, bug not identified (24 of 78 cases)"),
    ("partial", "", 3, "", "partial, 3 of 78 cases could not run"),
    ("agrees", "", 78, "", "agrees (78 of 78 cases)"),
    ("error", "", 0, "file not found: f.py", "error, file not found: f.py"),
])
def test_a_checks_one_line_summary_names_the_verdict_and_the_bug(verdict, bug, count, reason, says):
    assert wording.check_summary("my_norm.py:f", verdict, bug, count, 78, reason) == f"normdiff check my_norm.py:f: {says}"


@pytest.mark.parametrize("error, budget", [(121.375, 2.0), (0.0, 3.0), (np.float32(1.59), np.float64(2.015625)),
                                           (1e6, 1e-3), (float("inf"), 364.0)])
def test_the_sentences_give_the_strings_the_inline_code_gave(error, budget):
    """The f-strings each sentence replaced (reports/messages.py, check, fuzz, model, repro,
    engine/judge.py, reports/baseline.py), evaluated on the same values."""
    assert wording.with_budget(error, budget) == f"{error:.3g} ulp (budget {budget:.3g})"
    assert wording.against(error, budget) == f"{error:.3g} ulp against {budget:.3g}"
    assert wording.against_a_budget(error, budget) == f"{error:.3g} ulp against a budget of {budget:.3g}"
    assert wording.max_ulp_with_budget(error, budget) == f"max_ulp {error:.6g} (budget {budget:.6g} ulp)"
    assert wording.budget_of(budget, "float16") == f"budget {budget:.6g} ulp of float16"
    assert wording.channel_bias(error, 64, budget, error) == (
        f"coherent per-channel scale error: a channel's mean error is {error:.2f} ulp over 64 rows (budget "
        f"{budget:.2f}), while every element is within {error:.2f} ulp")
    assert wording.grew_past_tolerance("c", error, budget) == \
        f"c: grew by {error:.3g}, more than the tolerance {budget:g} ulp"
    assert wording.grew_share_of_budget("c", 0.1, budget, "agree") == \
        f"c: grew by more than {0.1:.0%} of the {budget:g} ulp budget, still agree"


# ---- no other module composes one ---------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("normdiff", "harness", "cases", "implementations", "reports")
BUILDER = "normdiff/wording.py"
WORDS = re.compile(r"budget|tolerance|ulp against", re.IGNORECASE)
# (module, a fragment of the literal text): why it names a budget without comparing an error with it
ALLOWED = {
    ("harness/data/budgets.py", "no ULP budget for dtype"): "an error: a dtype that has no budget",
    ("harness/data/budgets.py", "no budget for backward output"): "an error: an output that has no budget",
    ("cases/suites.py", "has no ULP budget"): "an error: a suite's dtype that has no budget",
    ("normdiff/strategies.py", "has no ULP budget"): "an error: a dtype that has no budget",
    ("reports/baseline.py", "(oracle, budgets, detectors)"): "the warning that normdiff's version changed",
    ("reports/views/budgets.py", "Budgets (ULPs of the output dtype)"): "the section's heading, joined to its table",
    ("reports/views/summary.py", "<b>agree</b>: within the ULP budget"): "the outcomes' legend, joined to the table",
    # the standalone script's source: it runs without normdiff, so it says its verdict itself
    ("harness/commands/repro.py", "budget {BUDGET_ULP:g} ulp: {verdict}"): "repro --script's source text",
}


def _literal(node: ast.JoinedStr) -> str:
    """An f-string's literal text, each field as '{}' (its spec kept: '{BUDGET_ULP:g}' is a field of
    the generated script's source, escaped)."""
    return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)


def _composes(node: ast.AST, parents: dict) -> str | None:
    """The literal text of `node` when it composes an error-vs-budget sentence (module docstring)."""
    if isinstance(node, ast.JoinedStr) and any(isinstance(v, ast.FormattedValue) for v in node.values):
        text = _literal(node)
        after_field = any(isinstance(a, ast.FormattedValue) and isinstance(b, ast.Constant)
                          and b.value.startswith(" against ") for a, b in zip(node.values, node.values[1:]))
        return text if WORDS.search(text) or after_field else None
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and WORDS.search(node.value):
        parent = parents.get(node)
        if isinstance(parent, ast.JoinedStr):  # a piece of an f-string: judged as the f-string
            return None
        joined = isinstance(parent, ast.BinOp) and isinstance(parent.op, (ast.Add, ast.Mod))
        formatted = isinstance(parent, ast.Attribute) and parent.attr == "format"
        return node.value if joined or formatted else None
    return None


def composed(sources: dict[str, str]) -> list[tuple[str, int, str]]:
    """(module, line, text) of every error-vs-budget sentence composed outside the builder."""
    found = []
    for rel, source in sources.items():
        if rel == BUILDER:
            continue
        tree = ast.parse(source)
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for node in ast.walk(tree):
            text = _composes(node, parents)
            if text is not None:
                found.append((rel, node.lineno, text))
    return sorted(found)


def package_sources() -> dict[str, str]:
    return {path.relative_to(ROOT).as_posix(): path.read_text(encoding="utf-8")
            for folder in FOLDERS for path in sorted((ROOT / folder).rglob("*.py"))}


def _unexplained(found) -> list:
    return [f for f in found if not any(f[0] == module and fragment in f[2] for module, fragment in ALLOWED)]


def test_no_module_but_the_builder_composes_an_error_against_its_budget():
    found = composed(package_sources())
    assert _unexplained(found) == [], "build the sentence with normdiff/wording.py"
    stale = [key for key in ALLOWED if not any(f[0] == key[0] and key[1] in f[2] for f in found)]
    assert stale == [], "an allowed sentence is gone: drop it from ALLOWED"


@pytest.mark.parametrize("planted", [
    'line = f"max {number(ulp)} ulp (budget {number(tol)})"',
    'line = f"{n} of {m} cases outside the budget"',
    'line = f"worst {a} ulp against {b}"',
    'line = f"{ulps(a)} against {number(b)}"',
    'line = f"{grew:.3g}, more than the Tolerance {tol:g}"',
    'line = "worst case within budget: " + str(ulp)',
    'line = "%s ulp (budget %s)" % (a, b)',
    'line = "{} ulp against {}".format(a, b)',
])
def test_a_planted_sentence_is_caught(planted):
    found = composed({"reports/planted.py": planted + "\n"})
    assert [(m, line) for m, line, _ in _unexplained(found)] == [("reports/planted.py", 1)]


@pytest.mark.parametrize("innocent", [
    '"""A docstring about the ULP budget."""',
    'HEADER = f"{\'first site out of budget\':<40} {\'ulp\':>9}"',  # a column header, a field's constant
    'HELP = "the first one out of budget named"',
    'line = f"within {number(ulp)} ulp of the reference"',
    'line = f"normdiff weights {a}" + f" against {b}"',  # ' against ' that follows no field
    'line = f"{len(bad)} rows failed"',
])
def test_what_names_no_budget_beside_a_value_is_not_caught(innocent):
    assert composed({"reports/innocent.py": innocent + "\n"}) == []


def test_the_builder_itself_is_not_scanned():
    assert composed({BUILDER: 'x = f"{a} ulp (budget {b})"\n'}) == []
    assert Path(wording.__file__).resolve() == ROOT / BUILDER
