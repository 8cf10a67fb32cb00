"""What a Report and a check's result show in a notebook (`_repr_html_`): the answer first (the verdict,
the counts, the bug with its sentence, the worst case and its repro command), then a compact table;
HTML that parses into a small set of tags, with no script and a style scoped to its own block.

The report is the session's small run (tests/conftest.py); the checks run NumPy fixtures on a
few cases of one dtype. Hostile names and messages: tests/reports/test_escaping.py.
"""
import dataclasses
import html as _html
import re
from html.parser import HTMLParser

import pytest

from normdiff.harness.commands import check, usercode
from normdiff.harness.data.bugs import BUGS

# the tags a shown block may hold (no script, no img: a notebook and a docs page embed it as it is)
REPR_TAGS = {"div", "style", "p", "b", "br", "code", "span", "wbr", "ul", "li", "table", "thead", "tbody", "tr",
             "th", "td", "details", "summary", "pre"}


class Parsed(HTMLParser):
    def __init__(self, text: str):
        super().__init__()
        self.tags, self.ids, self.text, self.styles = [], [], [], []
        self._in_style = False
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.ids += [v for k, v in attrs if k == "id"]
        self._in_style = tag == "style"

    def handle_endtag(self, tag):
        self._in_style = False

    def handle_data(self, data):
        (self.styles if self._in_style else self.text).append(data)

    @property
    def shown(self) -> str:
        return re.sub(r"\s+", " ", "".join(self.text))


def parse(text: str) -> Parsed:
    assert text.startswith('<div class="normdiff-repr">') and text.endswith("</div>")
    assert "<script" not in text.lower() and "javascript:" not in text.lower()
    parsed = Parsed(text)
    assert set(parsed.tags) <= REPR_TAGS, set(parsed.tags) - REPR_TAGS
    assert all(re.fullmatch(r"[A-Za-z0-9_-]+", i) for i in parsed.ids) and len(parsed.ids) == len(set(parsed.ids))
    # every rule of the style is scoped to the block: the page around it keeps its own look
    rules = [r.strip() for r in re.findall(r"([^{}]+)\{", "".join(parsed.styles))]
    assert rules and all(part.strip().startswith(".normdiff-repr") for r in rules for part in r.split(","))
    return parsed


# ---- a Report --------------------------------------------------------------------------------------


def test_a_failing_report_says_so_first_and_names_each_failure_with_its_replay(small_report):
    text = small_report._repr_html_()
    shown = parse(text).shown
    assert shown.index("normdiff run: suite small, 3 cases x 8 implementations") < \
        shown.index("Some implementation disagrees with the reference: fx-doubles, fx-eps_outside, fx-raises")
    for name in ("fx-doubles", "fx-eps_outside", "fx-raises"):
        item = re.search(name + r": (\d+) of (\d+) cases outside the budget; worst case: (\S+): (\w+)", shown)
        assert item, name
        assert f"repro: normdiff repro {item.group(3)} --implementation {name}" in shown
    assert "fx-correct:" not in shown  # an agreeing one is only in the table
    assert "Margin" not in shown  # said only when everything agrees


def test_a_report_lists_its_mutants_caught_and_missed_with_the_bugs_sentence(small_report):
    shown = parse(small_report._repr_html_()).shown
    assert "Mutants (catalogued bugs planted on purpose) caught: 1 of 2" in shown
    assert shown.index("mut-missed MISSED: none of its 2 cases catches it") < \
        shown.index("mut-caught caught by 1 of 2 cases")
    # a mutant named after a catalogued bug carries the bug's sentence
    results = small_report.results.assign(implementation=small_report.results["implementation"].replace(
        {"mut-caught": "eps-outside-sqrt"}))
    renamed = dataclasses.replace(small_report, results=results)
    shown = parse(renamed._repr_html_()).shown
    assert f"eps-outside-sqrt caught by 1 of 2 cases -- {BUGS['eps-outside-sqrt'].symptom}" in shown
    assert "exposed worst by rms_norm@qwen3/bf16/4x128/tiny_rms:1e-3/w=trained: disagree, max" in shown
    assert ("repro: normdiff repro rms_norm@qwen3/bf16/4x128/tiny_rms:1e-3/w=trained --implementation "
            "eps-outside-sqrt") in shown


def test_the_compact_table_puts_failing_implementations_first_with_their_counts(small_report):
    text = small_report._repr_html_()
    table = re.search(r'<table id="T_nd[0-9a-f]{8}_summary" class="data">(.*?)</table>', text, re.S).group(1)
    heads = [_html.unescape(h) for h in re.findall(r"<th>(.*?)</th>", table)]
    assert heads[:6] == ["implementation", "kind", "verdict", "identical", "agree", "disagree"]
    assert heads[-1] == "worst_max_ulp" and "crashed" not in heads  # a column of zeros is left out
    rows = [re.findall(r"<td[^>]*>(.*?)</td>", r) for r in re.findall(r"<tr>(.*?)</tr>", table, re.S)[1:]]
    verdicts = [r[2] for r in rows]
    assert verdicts[:4] == ["disagrees", "disagrees", "missed", "error"]
    assert set(verdicts[4:]) <= {"agrees", "caught", "unavailable", "nothing to run"}
    summary = small_report.summary.set_index("implementation")
    correct = next(r for r in rows if r[0] == "fx-correct")
    assert correct[3:6] == [str(summary.loc["fx-correct", c]) for c in ("identical", "agree", "disagree")]


def test_an_agreeing_report_says_by_how_much_it_passed(small_report):
    keep = small_report.results["implementation"].isin(["fx-correct", "fx-rms-only"])
    report = dataclasses.replace(small_report, results=small_report.results[keep].reset_index(drop=True),
                                 meta={**small_report.meta, "exit_code": 0, "failing": []})
    shown = parse(report._repr_html_()).shown
    assert "Every non-mutant implementation agrees with the reference." in shown
    assert re.search(r"Margin: worst [\d.e+-]+ ulp against a budget of [\d.e+-]+, fx-(correct|rms-only) on \S+@",
                     shown)
    assert "Failing" not in shown and "Mutants" not in shown


def test_an_interrupted_report_says_it_is_incomplete(small_report):
    report = dataclasses.replace(small_report, meta={**small_report.meta, "incomplete": "stopped by SIGINT"})
    assert "INCOMPLETE: stopped by SIGINT" in parse(report._repr_html_()).shown


def test_two_reprs_on_one_page_keep_their_ids_apart(small_report):
    ids = Parsed(small_report._repr_html_() + small_report._repr_html_()).ids
    assert len(ids) == len(set(ids)) == 2


# ---- a check ---------------------------------------------------------------------------------------


def _check(fixtures_dir, name: str, op: str = "rms_norm"):
    impl = usercode.user_implementation(f"{fixtures_dir / 'user' / 'numpy_norms.py'}:{name}", op, "qwen3")
    return check.check(impl, dtypes=("float32",), regimes=("normal", "tiny_rms"), passes="forward")


@pytest.fixture(scope="module")
def eps_outside(fixtures_dir):
    return _check(fixtures_dir, "rms_norm_eps_outside")


def test_a_disagreeing_check_shows_the_bug_its_sentence_the_worst_case_and_its_repro(eps_outside):
    result = eps_outside
    assert result.verdict == "disagrees" and result.bug == "eps-outside-sqrt"
    text = result._repr_html_()
    shown = parse(text).shown
    c = result.cases
    order = [f"normdiff check rms_norm_eps_outside: rms_norm@qwen3 (numpy)",
             f"DISAGREES: {c['agree']} of {c['total']} cases agree, {c['disagree']} disagree, 0 could not run",
             "bug: eps-outside-sqrt -- fix: yours: eps outside the square root",
             BUGS["eps-outside-sqrt"].symptom,
             f"worst case: {result.worst_case['headline']}",
             f"repro: {result.worst_case['repro']}",
             f"The {check.SHOWN_ROWS} worst of its {c['total']} rows",
             "Side-by-side",
             "the whole answer, as normdiff check prints it"]
    at = [shown.find(part) for part in order]
    assert -1 not in at and at == sorted(at), list(zip(order, at))
    # the side-by-side is the worst case's, and the folded text is describe's, escaped
    assert re.search(r'<table id="T_nd[0-9a-f]{8}_sbs_impl-rms_norm_eps_outside"', text)
    assert _html.escape(check.describe(result, "rms_norm_eps_outside"), quote=False) in text.replace("&#x27;", "'")


def test_an_agreeing_check_shows_its_margin(fixtures_dir):
    result = _check(fixtures_dir, "rms_norm")
    assert result.verdict == "agrees"
    shown = parse(result._repr_html_()).shown
    assert f"AGREES: {result.cases['total']} of {result.cases['total']} cases agree, 0 disagree" in shown
    assert re.search(r"margin: worst [\d.e+-]+ ulp against a budget of [\d.e+-]+ \(rms_norm@qwen3/fp32/", shown)
    assert "bug:" not in shown.split("the whole answer")[0]


def test_a_check_that_cannot_run_says_why():
    result = check.CheckResult("error", "rms_norm", "qwen3", "mine", "numpy", {"total": 2, "error": 2},
                               message="ImportError: no module named nope")
    shown = parse(result._repr_html_()).shown
    assert "normdiff check mine: rms_norm@qwen3 (numpy)" in shown
    assert "ERROR: cannot run it: ImportError: no module named nope" in shown


def test_rows_a_known_finding_explains_are_said_to_pass(small_report):
    results = small_report.results.copy()
    at = (results["implementation"] == "fx-eps_outside") & (results["outcome"] == "disagree")
    results.loc[at, "known_finding"] = "a finding"
    shown = parse(dataclasses.replace(small_report, results=results)._repr_html_()).shown
    assert f"{int(at.sum())} row(s) outside the budget are explained by a known finding (fx-eps_outside): they pass" \
        in shown
