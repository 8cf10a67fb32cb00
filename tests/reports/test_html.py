"""report.html: self-contained, every section, plots inline, every shown failing row with its case id
and replay command; the report folder render.write leaves; the headless-browser check."""
import base64
import dataclasses
import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from normdiff.harness.engine import provenance
from normdiff.harness.engine.tables import worst_keys
from normdiff.harness.engine.verdict import failing_rows
from normdiff.reports import html, plots, render
from normdiff.reports.markdown import summary_markdown

ROOT = Path(__file__).resolve().parents[2]
SECTIONS = ["run", "summary", "errors", "agreement", "worst", "failing", "mutants", "conventions", "budgets",
            "versions", "files"]
HAS_MPL = importlib.util.find_spec("matplotlib") is not None
TINY = "rms_norm@qwen3/bf16/4x128/tiny_rms:1e-3/w=trained"


@pytest.fixture(scope="module")
def worst_only(small_report):
    """The report as a run with keep_outputs="worst" leaves it: only the worst cases' outputs."""
    keep = worst_keys(small_report.results)
    return dataclasses.replace(small_report, outputs={k: v for k, v in small_report.outputs.items() if k in keep})


@pytest.fixture(scope="module")
def page(worst_only, tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    return html.render_html(worst_only, out), out


def external_references(text: str) -> list[str]:
    """src=/href=/url()/@import that would reach the network (plain-text links are fine)."""
    refs = re.findall(r"""(?:src|href)\s*=\s*["']?\s*((?:https?:)?//[^"'\s>]*)""", text, flags=re.I)
    refs += re.findall(r"""url\(\s*["']?\s*((?:https?:)?//[^)"']*)""", text, flags=re.I)
    refs += re.findall(r"@import[^;]*", text, flags=re.I)
    return refs


def test_the_page_is_self_contained(page):
    text, _ = page
    assert text.startswith("<!DOCTYPE html>") and text.rstrip().endswith("</html>")
    assert external_references(text) == []
    assert "<script" not in text.lower() and "<link" not in text.lower() and "<iframe" not in text.lower()
    for match in re.findall(r"""<img[^>]*src="([^"]*)\"""", text):
        assert match.startswith("data:image/png;base64,")


def test_every_section_is_there(page):
    text, _ = page
    for section in SECTIONS:
        assert f'id="{section}"' in text, section
    assert "git revision" in text and "transformers" in text and "platform" in text
    assert "Every mutant caught" not in text and "Missed (the harness went blind): mut-missed" in text


def test_the_sections_come_in_order_the_versions_after_the_results(page):
    text, _ = page
    at = [text.index(f'<h2 id="{section}"') for section in SECTIONS]
    assert at == sorted(at)
    run = text[at[0]:at[1]]
    assert "git revision" in run and "platform" not in run and "transformers" not in run
    versions = text[at[SECTIONS.index("versions")]:at[SECTIONS.index("files")]]
    assert "platform" in versions and "transformers" in versions and "python" in versions


@pytest.mark.skipif(not HAS_MPL, reason="matplotlib is not installed")
def test_plots_are_inline_and_written_as_files(page):
    text, out = page
    images = re.findall(r'<img src="data:image/png;base64,([A-Za-z0-9+/=]+)"', text)
    assert len(images) == 2
    files = sorted(p.name for p in (out / "plots").iterdir())
    assert files == ["agreement.png", "regime_errors.png"]
    for encoded in images:
        assert base64.b64decode(encoded).startswith(b"\x89PNG\r\n\x1a\n")
    assert base64.b64decode(images[0]) == (out / "plots" / "regime_errors.png").read_bytes()


def test_failing_rows_carry_their_case_id_and_replay_command(page, small_report):
    text, _ = page
    plain = re.sub(r"<wbr>", "", text)
    bad = failing_rows(small_report.results)
    assert len(bad) > 0
    for row in bad.itertuples():
        assert row.case_id in plain
        assert f"normdiff repro {row.case_id} --implementation {row.implementation}" in plain


def test_side_by_side_shown_when_kept_else_the_replay_command(worst_only, small_report):
    text = re.sub(r"<wbr>", "", html.render_html(worst_only, plots_on=False))
    assert "Side-by-side, <code>" + TINY in text  # fx-eps_outside's worst case, kept
    assert "ulps from exact" in text and "exact (float64)" in text
    bare = re.sub(r"<wbr>", "", html.render_html(dataclasses.replace(worst_only, outputs={}), plots_on=False))
    assert "this run did not keep its output" in bare and "ulps from exact" not in bare
    assert f"replay it with <span class=\"cmd\">normdiff repro {TINY} --implementation fx-eps_outside" in bare


def test_without_matplotlib_the_page_is_written_with_a_note(small_report, monkeypatch):
    monkeypatch.setattr(plots, "available", lambda: False)
    text = html.render_html(small_report)
    assert "matplotlib is not installed" in text and "<img" not in text
    assert 'id="agreement"' in text


def test_a_plot_that_fails_leaves_a_note_and_the_other_plot(small_report, monkeypatch):
    def fails(table, path=None):
        raise ValueError("no regimes <here>")

    monkeypatch.setattr(plots, "regime_errors", fails)
    text = html.render_html(small_report)
    assert "Plots could not be drawn: ValueError: no regimes &lt;here&gt;" in text
    assert text.count("<img") == 1 and "<!--figure" not in text  # the heat map, and no marker left


PAGE_IN_A_FRESH_PROCESS = """
import os, sys
from normdiff import processes
from normdiff.reports import markup
import contextlib

def pid(data, path):
    return str(os.getpid()).encode()

with contextlib.ExitStack() as drawing:
    page = markup.Page(True, start=lambda draw, data: drawing.enter_context(processes.forked(draw, data, None)))
    text = "".join(page.figure(name, pid, None, "alt", "caption") for name in ("a", "b", "a"))
    text = page.finish(text)
print(os.getpid(), *(page.drawn[name].decode() for name in ("a", "b")), text.count("<figure>"))
"""


def test_each_figure_is_drawn_in_a_child_of_its_own():
    # (in a fresh process: pytest-xdist's threads make processes.forked draw in the caller)
    proc = subprocess.run([sys.executable, "-c", PAGE_IN_A_FRESH_PROCESS], capture_output=True, text=True,
                          cwd=ROOT, timeout=60)
    assert proc.returncode == 0, proc.stderr
    page, a, b, figures = proc.stdout.split()
    assert len({page, a, b}) == 3 and figures == "3"  # "a" drawn once, shown twice


def test_tables_need_no_jinja2(small_report, monkeypatch):
    page = html.render_html(small_report, plots_on=False)
    monkeypatch.setitem(sys.modules, "jinja2", None)  # as if it were not installed
    text = html.render_html(small_report, plots_on=False)
    assert text == page and '<table id="T_summary" class="data">' in text
    assert "fx-doubles" in text and external_references(text) == []


def test_text_is_escaped(small_report):
    results = small_report.results.copy()
    results.loc[results["implementation"] == "fx-raises", "detail"] = "<script>alert(1)</script>"
    text = html.render_html(dataclasses.replace(small_report, results=results), plots_on=False)
    assert "<script>" not in text and "&lt;script&gt;alert(1)&lt;/script&gt;" in text


def test_git_revision_is_a_commit_or_unknown(monkeypatch):
    rev = provenance.git_revision()
    assert rev == "unknown" or re.fullmatch(r"[0-9a-f]{4,40}", rev)

    def no_git(*args, **kwargs):
        raise FileNotFoundError("git")

    monkeypatch.setattr(provenance.subprocess, "run", no_git)
    assert provenance.git_revision() == "unknown"


def test_write_leaves_every_view(small_report, tmp_path):
    out = render.write(small_report, tmp_path / "r")
    names = {p.name for p in out.iterdir()}
    assert {"report.html", "junit.xml", "summary.md", "results.csv", "meta.json"} <= names
    assert not [n for n in names if n.endswith(".tmp")]
    if HAS_MPL:
        assert {p.name for p in (out / "plots").iterdir()} == {"agreement.png", "regime_errors.png"}
    summary = (out / "summary.md").read_text()
    failing = summary.split("## Failing rows")[1].split("\n## ")[0]
    assert f"| {TINY} | fx-eps_outside |" in failing
    assert f"`normdiff repro {TINY} --implementation fx-eps_outside` |" in failing


def test_the_report_views_stay_out_of_the_import_path_of_list():
    code = ("import sys; from normdiff.harness.commands import cli; cli.main(['list', 'implementations']); "
            "from normdiff.reports import render, html, junit, plots, worst; "
            "assert 'matplotlib' not in sys.modules, 'matplotlib imported'")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.skipif(not (shutil.which("chromium") or shutil.which("chromium-browser")),
                    reason="chromium is not installed (apt-get install chromium)")
def test_a_headless_browser_renders_the_page(small_report, tmp_path):
    """scripts/screenshot_report.sh: Chromium opens the page offline and paints a real page."""
    out = render.write(small_report, tmp_path / "r")
    shot = tmp_path / "report.png"
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "screenshot_report.sh"), str(out), str(shot), "1200x1600"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = shot.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    Image = pytest.importorskip("PIL.Image")
    import io

    image = Image.open(io.BytesIO(data)).convert("L")
    assert image.size == (1200, 1600)
    low, high = image.getextrema()
    assert high - low > 100  # text and colour, not a blank page
    histogram = image.histogram()
    assert sum(histogram[:200]) > 0.01 * image.size[0] * image.size[1]  # a good share of painted pixels


def test_summary_markdown_keeps_one_table_row_per_failing_row(small_report):
    results = small_report.results.copy()
    results.loc[results["implementation"] == "fx-raises", "detail"] = "Traceback:\n  line 1 | here\nBoom"
    text = summary_markdown(dataclasses.replace(small_report, results=results))
    failing = text.split("## Failing rows")[1].split("\n## ")[0]
    rows = [line for line in failing.splitlines() if line.startswith("| ") and "fx-raises" in line]
    assert rows and all(line.endswith("--implementation fx-raises` |") for line in rows)
    assert "Traceback:   line 1 \\| here Boom" in rows[0]
