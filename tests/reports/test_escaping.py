"""Names are data, never markup: hostile implementation names, exception text, a suite's name and file
reach summary.md, report.html, junit.xml and the terminal as text, in every format.

The hostile report is the session's small run with its implementations renamed and its texts
replaced (no second run): every view derives afresh from the renamed tables.
"""
import dataclasses
import html as _html
import re
import sys
import xml.etree.ElementTree as ET
from html.parser import HTMLParser

import numpy as np
import pytest

from normdiff.cases.model import Case
from normdiff.harness.commands import check, cli, repro
from normdiff.harness.data.errors import UsageError
from normdiff.harness.engine.verdict import failing_rows
from normdiff.implementations.entry import Implementation
from normdiff.reports import html, junit, markup, render
from normdiff.reports.markdown import summary_markdown
from normdiff.reports.markup import md_code, md_text
from normdiff.text import SHOWN, printable

SCRIPT = "</table><script>alert(1)</script>"
BOLD = "name with <b>bold</b>"
ANSI = "\x1b[31mred\x1b[0m\x07"
NAMES = {  # the small run's implementations, renamed
    "fx-correct": SCRIPT, "fx-doubles": "a|b", "fx-eps_outside": "``x``", "fx-raises": "x\n# heading",
    "fx-gone": ANSI, "fx-rms-only": "]]>", "mut-caught": "&amp;", "mut-missed": BOLD,
}
HOSTILE = list(NAMES.values())
DETAIL = ("Traceback (most recent call last):\n" + SCRIPT + " | a|b ``x`` \x1b[2J" + ANSI + "\r ]]> &amp; " + BOLD
          + " \x00 \x9b end")
SUITE = "``x`` " + SCRIPT + " a|b\n# heading " + ANSI + " ]]> &amp; " + BOLD
SUITE_PATH = "/tmp/" + BOLD + "|``x``\x1b[2J.toml"
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # what no output may carry raw (\t and \n aside)


def rename(name):
    return NAMES.get(name, name)


@pytest.fixture(scope="module")
def hostile(small_report):
    results = small_report.results.copy()
    results["implementation"] = results["implementation"].map(rename)
    results["repro"] = ""  # every replay command is built from the (hostile) name
    raised = results["implementation"] == NAMES["fx-raises"]
    results.loc[raised, "detail"] = DETAIL
    results.loc[results["implementation"] == "a|b", "framework"] = BOLD
    known = (results["implementation"] == "``x``") & (results["regime"] == "tiny_rms:1e-3")
    results.loc[known, "known_finding"] = "finding " + SCRIPT + " " + ANSI
    pairs = small_report.pairs.copy()
    pairs["a"], pairs["b"] = pairs["a"].map(rename), pairs["b"].map(rename)
    meta = {**small_report.meta, "suite": SUITE, "suite_path": SUITE_PATH, "replay": {},
            "failing": [rename(n) for n in small_report.meta["failing"]],
            "stale_findings": ["stale " + SCRIPT + " " + ANSI],
            "versions": {**small_report.meta["versions"], "<b>pkg</b>|x": "1.0" + ANSI + SCRIPT}}
    outputs = {(c, rename(i)): v for (c, i), v in small_report.outputs.items()}
    return dataclasses.replace(small_report, results=results, pairs=pairs, meta=meta, outputs=outputs)


def one_line(value) -> str:
    """What md_text and md_code show of a value: one line, control characters as escapes."""
    return printable(str(value).translate({10: " ", 13: " ", 9: " "}), newlines=False)


def without_code_spans(text: str) -> str:
    """`text` with its CommonMark code spans (a run of backticks to the next run of the same length)
    taken out."""
    return re.sub(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", "", text)


def cells(row: str) -> list[str]:
    """A GFM table row's cells, split as GitHub's scanner does: a backslash escapes the next
    punctuation character (`\\\\` is one escaped backslash), an unescaped `|` ends a cell."""
    out, cell, i = [], "", 0
    body = row.strip()
    body = body[1:] if body.startswith("|") else body
    while i < len(body):
        if body[i] == "\\" and i + 1 < len(body):
            cell += body[i:i + 2]
            i += 2
            continue
        if body[i] == "|":
            out.append(cell.strip())
            cell = ""
        else:
            cell += body[i]
        i += 1
    if cell.strip():
        out.append(cell.strip())
    return out


def markdown_renderer():
    markdown_it = pytest.importorskip("markdown_it")
    return markdown_it.MarkdownIt("commonmark").enable("table").enable("strikethrough")


# ---- the escaping functions -------------------------------------------------------------------


def test_md_text_escapes_html_markdown_and_control_characters():
    # every `<` an entity: no tag opens, so a `>` closes nothing and stays as typed
    assert md_text(SCRIPT) == "&lt;/table>&lt;script>alert(1)&lt;/script>"
    assert md_text(BOLD) == "name with &lt;b>bold&lt;/b>"
    assert md_text("a|b") == "a\\|b"
    assert md_text("``x``") == "\\`\\`x\\`\\`"
    assert md_text("x\n# heading") == "x # heading" and md_text("# heading") == "\\# heading"
    assert md_text(ANSI) == "\\\\x1b\\[31mred\\\\x1b\\[0m\\\\x07"
    assert md_text("]]>") == "\\]\\]>" and md_text("&amp;") == "&amp;amp;"
    assert md_text("agree -> disagree") == "agree -> disagree"  # an arrow reads as one in the file too
    assert md_text("> quote") == "\\> quote" and md_text("a > b") == "a > b"  # a block quote only at the start
    assert md_text("_x_ *y* [z](u) ~w~ a\\b") == "\\_x\\_ \\*y\\* \\[z\\](u) \\~w\\~ a\\\\b"
    assert md_text("- item") == "\\- item" and md_text("1. item") == "1\\. item" and md_text("---") == "\\---"
    assert md_text("3.11.7") == "3.11.7" and md_text("#1") == "#1" and md_text("-0.5") == "-0.5"  # no block there
    assert md_text("max_ulp") == "max_ulp" and md_text("fx-eps_outside") == "fx-eps_outside"  # no emphasis


def test_md_code_cannot_be_broken_out_of():
    assert md_code("a b") == "`a b`"
    assert md_code("``x``") == "``` ``x`` ```"
    assert md_code("`") == "`` ` ``" and md_code(" a ") == "`  a  `"
    assert md_code(SCRIPT) == f"`{SCRIPT}`"  # HTML in a code span is text
    assert md_code("x\n# heading") == "`x # heading`" and md_code(ANSI) == "`\\x1b[31mred\\x1b[0m\\x07`"
    assert md_code("a|b") == "`a|b`" and md_code("a|b", table=True) == "`a\\|b`"
    assert md_code("a\\|b", table=True) == md_text("a\\|b")  # GitHub would end the cell at `\\|`
    assert md_code("") == ""


def test_escaped_markdown_renders_as_the_text_itself():
    md = markdown_renderer()
    for value in HOSTILE + [DETAIL, SUITE, "_x_ *y* [z](http://e) ~~w~~ a\\|b \\", "# h", "1. x", "- y", "---", "+", " `a` ",
                            "> quote", ">> q", "a -> b <- c", "<-> <!-- x --> <http://e>", "&gt; &#62;"]:
        shown = one_line(value)
        item = md.render("- " + md_text(value)).strip()
        assert item.startswith("<ul>\n<li>") and item.endswith("</li>\n</ul>"), item
        inner = item[len("<ul>\n<li>"):-len("</li>\n</ul>")]
        assert "<" not in inner and _html.unescape(inner) == shown.strip(), (value, item)
        code = md.render("- " + md_code(value)).strip()
        inner = code[len("<ul>\n<li><code>"):-len("</code></li>\n</ul>")]
        assert code.startswith("<ul>\n<li><code>") and "<" not in inner, (value, code)
        assert _html.unescape(inner) == shown, (value, code)
    more = ["a\\|b", "\\", "> quote", "a -> b"]
    table = md.render("| a | b |\n|---|---|\n" + "".join(f"| {md_text(v)} | {md_code(v, table=True)} |\n"
                                                       for v in HOSTILE + more))
    tds = re.findall(r"<td>(.*?)</td>", table)
    assert len(tds) == 2 * (len(HOSTILE) + len(more))
    for value, text, code in zip(HOSTILE + more, tds[::2], tds[1::2]):
        assert _html.unescape(text) == one_line(value).strip()
        assert _html.unescape(re.sub(r"</?code>", "", code)) == one_line(value)


def test_printable_shows_control_characters_as_escapes():
    assert printable(ANSI) == "\\x1b[31mred\\x1b[0m\\x07"
    assert printable("a\r\nb\x00\x9b\u202e\ud800") == "a\\r\nb\\x00\\x9b\\u202e\\ud800"
    assert printable("two\nlines\tand a tab") == "two\nlines\tand a tab"
    assert printable("two\nlines\t", newlines=False) == "two\\nlines\\t"
    assert printable("plain ünïcödé <>&") == "plain ünïcödé <>&"


# ---- summary.md -------------------------------------------------------------------------------


def test_normdiff_writes_no_html_into_summary_markdown(small_report):
    assert re.search(r"<[a-zA-Z/!?]", summary_markdown(small_report)) is None


def test_summary_markdown_carries_no_html_and_no_control_characters(hostile):
    text = summary_markdown(hostile)
    assert re.search(r"<[a-zA-Z/!?]", without_code_spans(text)) is None
    assert "&lt;/table>&lt;script>" in text and "&lt;b>bold&lt;/b>" in text
    assert CONTROL.search(text) is None and "\\\\x1b\\[31mred" in text


def test_summary_markdown_tables_keep_their_cells(hostile):
    text = summary_markdown(hostile)
    tables = re.findall(r"(?m)(?:^\|.*\n?)+", text)
    assert len(tables) >= 3
    for table in tables:
        rows = table.strip("\n").split("\n")
        width = len(cells(rows[0]))
        assert width > 1 and all(len(cells(r)) == width for r in rows), table
    failing = text.split("## Failing rows")[1].split("\n## ")[0]
    rows = [line for line in failing.splitlines() if line.startswith("| ")][1:]
    assert len(rows) == min(20, len(failing_rows(hostile.results)))
    raised = [r for r in rows if cells(r)[1] == md_text("x\n# heading")]
    assert raised and all(cells(r)[4] == md_text(DETAIL) for r in raised)


def test_the_heading_is_one_line_and_the_suite_name_a_code_span(hostile):
    text = summary_markdown(hostile)
    first, second = text.split("\n")[:2]
    assert first == "# normdiff report: suite " + md_code(SUITE) and second == ""
    assert [line for line in text.splitlines() if re.match(r"#+ ", line)][0] == first
    assert not re.search(r"(?m)^#+ heading", text) and text.count("\n# ") == 0


def test_summary_markdown_renders_the_names_as_text(hostile):
    md = markdown_renderer()
    page = md.render(summary_markdown(hostile))
    tags = set(re.findall(r"<([a-zA-Z0-9]+)", page))
    assert tags <= {"h1", "h2", "h3", "p", "ul", "li", "table", "thead", "tbody", "tr", "th", "td", "code",
                    "strong", "blockquote"}, tags
    first = page.split("<tbody>")[1].split("</tbody>")[0]  # the Implementations table
    names = [_html.unescape(row.split("<td>")[1].split("</td>")[0]) for row in first.split("<tr>")[1:]]
    assert sorted(names) == sorted(one_line(n) for n in HOSTILE)
    h1 = re.search(r"<h1>(.*?)</h1>", page).group(1)
    assert h1.startswith("normdiff report: suite <code>") and h1.endswith("</code>")
    assert _html.unescape(re.sub(r"</?code>", "", h1)) == "normdiff report: suite " + one_line(SUITE)


def test_baseline_changes_markdown_escapes_its_names(hostile, tmp_path):
    from normdiff.reports import baseline

    path = baseline.save(hostile, tmp_path / ("base " + BOLD.replace("/", "") + "`.json"))
    results = hostile.results.copy()
    results.loc[results["implementation"] == SCRIPT, "outcome"] = "disagree"
    comparison = baseline.compare(baseline.load(path), results, hostile.meta)
    text = comparison.markdown()
    assert "## Changes since baseline" in text and "regression" in text
    # normdiff's own arrow reads as one in the file (it was written `-&gt;`), the names stay escaped
    assert " | agree -> disagree (max_ulp " in text and "-&gt;" not in text
    assert "&lt;/table>&lt;script>" in text
    assert re.search(r"<[a-zA-Z/!?]", without_code_spans(text)) is None and CONTROL.search(text) is None
    for table in re.findall(r"(?m)(?:^\|.*\n?)+", text):
        rows = table.strip("\n").split("\n")
        assert all(len(cells(r)) == len(cells(rows[0])) for r in rows), table


# ---- report.html ------------------------------------------------------------------------------


class Tags(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.ids, self.text = [], [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.ids += [v for k, v in attrs if k == "id"]

    def handle_data(self, data):
        self.text.append(data)


PAGE_TAGS = {"html", "head", "meta", "title", "style", "body", "main", "h1", "h2", "h3", "p", "div", "nav", "a",
             "code", "span", "br", "wbr", "table", "thead", "tbody", "tr", "th", "td", "ul", "li", "b", "figure",
             "img", "figcaption", "details", "summary"}


def check_page(text: str) -> Tags:
    assert "<script" not in text.lower() and "<b>bold" not in text and "</table><script" not in text
    assert "&lt;/table&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in text and "&lt;b&gt;bold&lt;/b&gt;" in text
    assert CONTROL.search(text) is None
    assert not re.search(r"""<[a-z]+(?:\s+[a-z-]+="[^"]*")*\s+[a-z-]+=[^"\s>]""", text)  # attributes quoted
    parsed = Tags()
    parsed.feed(text)
    assert set(parsed.tags) <= PAGE_TAGS, set(parsed.tags) - PAGE_TAGS
    assert all(re.fullmatch(r"[A-Za-z0-9_-]+", i) for i in parsed.ids), [i for i in parsed.ids
                                                                         if not re.fullmatch(r"[A-Za-z0-9_-]+", i)]
    assert len(parsed.ids) == len(set(parsed.ids))
    shown = "".join(parsed.text)
    for name in HOSTILE:
        assert printable(name) in shown, name
    return parsed


def test_report_html_shows_the_names_as_text(hostile):
    check_page(html.render_html(hostile, plots_on=False))


def test_report_html_without_jinja2_escapes_headers_too(hostile, monkeypatch):
    monkeypatch.setitem(sys.modules, "jinja2", None)  # as if it were not installed
    check_page(html.render_html(hostile, plots_on=False))  # the agreement matrix is indexed by names


def test_slugs_are_ids_and_differ_for_different_names():
    slugs = {markup.slug(n) for n in HOSTILE + ["a-b", "a<b", "fx-correct"]}
    assert len(slugs) == len(HOSTILE) + 3 and markup.slug("fx-correct") == "impl-fx-correct"
    assert all(re.fullmatch(r"impl-[A-Za-z0-9_-]+", s) for s in slugs)


# ---- junit.xml --------------------------------------------------------------------------------


def xml_clean(text: str) -> str:
    """What junit.xml carries of a text: its control characters as escapes, as the terminal shows them."""
    return printable(text)


def test_junit_xml_parses_and_round_trips_the_names(hostile):
    root = ET.fromstring(junit.junit_xml(hostile).encode("utf-8"))
    assert root.get("name") == xml_clean("normdiff suite " + SUITE)
    classnames = {tc.get("classname") for tc in root.iter("testcase")}
    assert classnames == {"normdiff." + xml_clean(n) for n in HOSTILE}
    assert {s.get("name") for s in root.iter("testsuite")} == classnames
    raised = [tc for tc in root.iter("testcase") if tc.get("classname") == "normdiff.x\n# heading"]
    said = xml_clean(DETAIL)  # a carriage return shown as \r (XML would read it as a line end)
    assert raised and all(said in tc.find("failure").text for tc in raised)
    assert "normdiff.\\x1b[31mred\\x1b[0m\\x07" in classnames


def test_junit_xml_survives_nul_escape_cdata_end_and_lone_surrogates(hostile):
    evil = "nul\x00 esc\x1b[2J ]]> cdata <![CDATA[ x ]]> lone\ud800 del\x7f c1\x9b end"
    results = hostile.results.copy()
    results["implementation"] = results["implementation"].replace({SCRIPT: evil})
    results["op"] = results["op"].where(results["implementation"] != evil, "rms_norm\x00]]>")
    report = dataclasses.replace(hostile, results=results, meta={**hostile.meta, "suite": evil})
    text = junit.junit_xml(report)
    root = ET.fromstring(text.encode("utf-8"))
    assert "normdiff." + xml_clean(evil) in {tc.get("classname") for tc in root.iter("testcase")}
    assert any(tc.get("name").startswith("rms_norm\\x00]]>@") for tc in root.iter("testcase"))
    assert root.get("name") == "normdiff suite " + xml_clean(evil)


# ---- a long message, with bidirectional controls --------------------------------------------------

BIDI = "first line\nsecond \u202eenil\u2028 \u2066x\u2069 \ud800 \x0b\x0c end "
HUGE = BIDI + "x" * (5 << 20)  # an exception's 5 MB message (a whole array's repr, a log)


def test_a_5_mb_message_with_bidi_controls_is_clipped_and_escaped_in_every_report(hostile):
    results = hostile.results.copy()
    results.loc[results["implementation"] == NAMES["fx-raises"], "detail"] = HUGE
    report = dataclasses.replace(hostile, results=results)
    more = f"... ({len(HUGE) - SHOWN} more characters)"
    for name, text in (("summary.md", summary_markdown(report)), ("report.html", html.render_html(report, plots_on=False)),
                       ("junit.xml", junit.junit_xml(report))):
        assert more in text, name
        assert "x" * (SHOWN - len(BIDI) + 1) not in text and len(text) < len(HUGE) // 10, name
        assert not re.search("[\u202e\u2028\u2066\u2069\ud800\x0b\x0c]", text), name
        assert "\\u202eenil" in text or "\\\\u202eenil" in text, name  # shown (markdown escapes the backslash)
    ET.fromstring(junit.junit_xml(report).encode("utf-8"))


# ---- the terminal -----------------------------------------------------------------------------


def test_the_terminal_summary_shows_control_characters_as_escapes(hostile):
    text = render.terminal(hostile)
    assert CONTROL.search(text) is None
    assert "\\x1b[31mred\\x1b[0m\\x07" in text and "x\\n# heading" in text  # a name stays on its line
    assert not re.search(r"(?m)^# heading", text)


def test_check_describe_shows_control_characters_as_escapes():
    error = check.CheckResult("error", "rms_norm", "qwen3", "me" + ANSI, "numpy" + ANSI, {"total": 1, "error": 1},
                              message="Traceback:\n  " + DETAIL)
    text = check.describe(error, "evil\x1b[2J.py:f\nforged line")
    assert CONTROL.search(text) is None and "evil\\x1b[2J.py:f\\nforged line" in text
    assert "cannot run it: Traceback:\n  Traceback" in text  # a message is multi-line by design
    partial = check.CheckResult(
        "partial", "rms_norm", "qwen3", "me", "numpy",
        {"total": 3, "agree": 2, "identical": 1, "disagree": 0, "error": 1, "known_finding": 0},
        not_run=[{"dtype": "bfloat16", "cases": 1, "reason": "boom " + ANSI, "example": "case\x07\nid"}],
        margin={"worst_ulp": 1.0, "budget_ulp": 2.0, "share_of_budget": 0.5, "case_id": "c" + ANSI,
                "identical": 1, "of": 2}, output_dtype="float32" + ANSI)
    text = check.describe(partial, "t")
    assert CONTROL.search(text) is None and "e.g. case\\x07\\nid" in text and "boom \\x1b[31mred" in text


def test_repro_describe_shows_control_characters_as_escapes(fixtures_dir):
    case = Case.of("rms_norm", "qwen3", "float32", "4x128", weight="trained")
    impl = Implementation("x\n# heading" + ANSI, "user", "numpy", f"{fixtures_dir / 'misbehaving.py'}:raises",
                          frozenset({("rms_norm", "qwen3")}), description="desc " + SCRIPT + ANSI)
    row = {"case_id": case.id, "implementation": impl.name, "outcome": "error", "detail": DETAIL,
           "known_finding": "finding" + ANSI, "output_dtype": "", "tolerance_ulp": 2.0}
    replayed = repro.Replay(case, impl, row, None, case.inputs(), np.zeros((4, 128)))
    text = repro.describe(replayed)
    assert CONTROL.search(text) is None
    assert "implementation  x\\n# heading\\x1b[31mred" in text and "finding\\x1b[31mred" in text
    assert "detail          Traceback (most recent call last):\n" in text  # the detail keeps its lines


def test_the_cli_error_line_shows_control_characters_as_escapes(monkeypatch, capsys):
    def bad(args):
        raise UsageError("no such suite '\x1b[2Jevil\x07'\nsee --help")

    monkeypatch.setattr(cli, "_list", bad)
    assert cli.main(["list", "implementations"]) == cli.USAGE_ERROR
    err = capsys.readouterr().err
    assert err == "normdiff: error: no such suite '\\x1b[2Jevil\\x07'\nsee --help\n"


# ---- what a notebook shows (_repr_html_) --------------------------------------------------------

REPR_TAGS = {"div", "style", "p", "b", "br", "code", "span", "wbr", "ul", "li", "table", "thead", "tbody", "tr",
             "th", "td", "details", "summary", "pre"}


def check_repr(text: str) -> str:
    """What a shown block must be whatever its names say: escaped, parsed into its own tags only;
    its visible text."""
    assert text.startswith('<div class="normdiff-repr">') and "<script" not in text.lower()
    assert "<b>bold" not in text and "</table><script" not in text and CONTROL.search(text) is None
    assert not re.search(r"""<[a-z]+(?:\s+[a-z-]+="[^"]*")*\s+[a-z-]+=[^"\s>]""", text)  # attributes quoted
    parsed = Tags()
    parsed.feed(text)
    assert set(parsed.tags) <= REPR_TAGS, set(parsed.tags) - REPR_TAGS
    assert all(re.fullmatch(r"[A-Za-z0-9_-]+", i) for i in parsed.ids) and len(parsed.ids) == len(set(parsed.ids))
    return "".join(parsed.text)


def test_a_reports_repr_shows_the_names_as_text(hostile):
    shown = check_repr(hostile._repr_html_())
    for name in HOSTILE:
        assert printable(name) in shown, name
    assert "normdiff run: suite " + printable(SUITE) in shown
    assert f"{printable(SCRIPT)}: " not in shown  # an agreeing implementation is in the table only
    assert "Some implementation disagrees with the reference: " + ", ".join(
        printable(rename(n)) for n in ("fx-doubles", "fx-eps_outside", "fx-raises")) in shown


def test_a_checks_repr_shows_the_names_and_messages_as_text(hostile, fixtures_dir):
    from normdiff.harness.analysis.diagnosis import Diagnosis, Match

    match = Match("bug " + SCRIPT, {}, 3, 4, 0.0, "fix " + BOLD + ANSI, symptom="symptom " + DETAIL)
    worst = {"case_id": "case" + ANSI, "headline": "headline " + SCRIPT + ANSI, "repro": "normdiff repro " + DETAIL}
    result = check.CheckResult(
        "disagrees", "rms_norm" + ANSI, "qwen3" + SCRIPT, SCRIPT, BOLD,
        {"total": 3, "agree": 1, "identical": 0, "disagree": 2, "error": 0, "known_finding": 0},
        diagnosis=Diagnosis([match]), worst_case=worst,
        not_run=[{"dtype": "bfloat16" + ANSI, "cases": 1, "reason": "boom " + DETAIL, "example": "case\x07\nid"}],
        known_findings=[{"explanation": "finding " + SCRIPT, "cases": 1, "example": "c" + ANSI}],
        eps_note="eps " + BOLD, output_dtype="float32" + ANSI, report=hostile)
    text = result._repr_html_()
    shown = check_repr(text)
    for said in (SCRIPT, BOLD, "bug " + SCRIPT, "fix " + BOLD + ANSI, "headline " + SCRIPT + ANSI,
                 "boom " + DETAIL.split("\n")[0], "finding " + SCRIPT, "eps " + BOLD):
        assert printable(said) in shown, said
    assert "normdiff check " + printable(SCRIPT) + ": " in shown
    from normdiff.harness.engine.tables import ranked, repro_command

    top = ranked(hostile.results).iloc[0]  # the worst rows are the hostile report's, with their replays
    assert printable(repro_command(top["case_id"], top["implementation"], {})) in shown
    error = dataclasses.replace(result, verdict="error", message="Traceback:\n" + DETAIL)
    assert "cannot run it: Traceback:\n" + printable(DETAIL) in check_repr(error._repr_html_())
