"""report.html fits a 1400 px window, and the plots hold everything they draw.

The page: every table cell can wrap within MAX_RUN characters (a case id after each '/', a path
too), so no column is wider than a window leaves it (read from the markup: CI has no browser); and,
where Chromium is installed (`apt-get install chromium`; scripts/screenshot_report.sh takes a
picture of the page for people), the page laid out at 1400 px: nothing scrolls sideways but the
number matrices, which sit folded in a <details>. The report measured has the default suite's
longest case ids and a long implementation name. The plots: every artist a report plot draws lies
inside its figure (a label cut at the edge reads "rmal" for "normal").
"""
import dataclasses
import html as _html
import json
import re
import shutil
import subprocess

import numpy as np
import pandas as pd
import pytest

from normdiff.cases import suites
from normdiff.reports import html, plots

WIDTH = 1400
CONTENT = 1304  # px a table has at that width: <main> at most 1360 px, less its 28 px padding each side
CHAR = 7.2  # px of a character at the tables' 12-12.5 px (a monospace 12 px one is 7.2)
CELL = 15  # px a column adds around its text: 7 px padding each side and a border
LONG_NAME = "onnx-SimplifiedLayerNormalization"  # the longest registered implementation's name


@pytest.fixture(scope="module")
def long_report(small_report):
    """The small run with the default suite's longest case ids and a long implementation name."""
    ids = sorted(small_report.results["case_id"].unique())
    longest = sorted({c.id for c in suites.load("default").cases}, key=len)[-len(ids):]
    case = dict(zip(ids, longest))
    name = {"fx-rms-only": LONG_NAME}
    results = small_report.results.assign(case_id=small_report.results["case_id"].map(case), repro="",
                                          implementation=small_report.results["implementation"].replace(name))
    pairs = small_report.pairs.assign(case_id=small_report.pairs["case_id"].map(case),
                                      a=small_report.pairs["a"].replace(name), b=small_report.pairs["b"].replace(name))
    meta = {**small_report.meta, "suite_path": "/home/runner/work/normdiff/normdiff/cases/suites/default.toml",
            "failing": [name.get(n, n) for n in small_report.meta["failing"]]}
    outputs = {(case[c], name.get(i, i)): v for (c, i), v in small_report.outputs.items()}
    return dataclasses.replace(small_report, results=results, pairs=pairs, meta=meta, outputs=outputs)


def longest_run(cell: str, nowrap: bool) -> str:
    """The longest text of a cell's HTML with no place to wrap: between spaces, <wbr> and <br> (the
    whole text where the cell does not wrap)."""
    text = re.sub(r"<(?:wbr|br)\s*/?>", " ", cell)
    text = _html.unescape(re.sub(r"<[^>]*>", "", text))
    return max([text] if nowrap else text.split(), key=len, default="")


def narrowest(table: str) -> tuple[float, list[str]]:
    """The width (px) a table cannot be laid out narrower than, as a browser lays one out: each
    column as wide as its longest text with no place to wrap; and those texts, column by column."""
    columns: dict[int, str] = {}
    for row in re.findall(r"<tr>(.*?)</tr>", table, flags=re.S):
        for i, (attrs, cell) in enumerate(re.findall(r"<t[hd]([^>]*)>(.*?)</t[hd]>", row, flags=re.S)):
            run = longest_run(cell, "nowrap" in attrs)
            columns[i] = max(columns.get(i, ""), run, key=len)
    return sum(len(run) * CHAR + CELL for run in columns.values()), list(columns.values())


def test_every_table_can_be_as_narrow_as_the_page(long_report):
    page = html.render_html(long_report, plots_on=False)
    # the number matrices sit folded in a <details>, in a box that scrolls: one column per implementation
    shown = re.sub(r"<details>.*?</details>", "", page, flags=re.S)
    tables = re.findall(r"<table.*?</table>", shown, flags=re.S)
    assert len(tables) > 8
    for table in tables:
        width, runs = narrowest(table)
        assert width <= CONTENT, (width, runs)
    # the long ids are there, wrapping after each '/'
    shown_id = long_report.results["case_id"].iloc[0].replace("/", "/<wbr>").replace("@", "@<wbr>")
    assert f'<span class="case">{shown_id}</span>' in page


MEASURE = """<script>
addEventListener('load', () => {
  const out = {width: innerWidth, page: document.documentElement.scrollWidth, scrolls: []};
  for (const el of document.querySelectorAll('.scroll, figure, img')) {
    if (el.closest('details:not([open])')) continue;  // folded: the number matrices
    const r = el.getBoundingClientRect();
    if (r.right > innerWidth + 0.5 || el.scrollWidth > el.clientWidth + 0.5)
      out.scrolls.push((el.querySelector('table') || el).id || el.tagName);
  }
  const pre = document.createElement('pre');
  pre.id = 'normdiff-measure';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def laid_out(page: str, tmp_path, width: int) -> dict:
    """The page laid out by headless Chromium `width` px wide: the document's width and what scrolls
    sideways or runs past the window (a script of the test's own, added to a copy of the page)."""
    copy = tmp_path / "page.html"
    copy.write_text(page.replace("</body>", MEASURE + "</body>"), encoding="utf-8")
    proc = subprocess.run([chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                           "--no-first-run", "--disable-background-networking", "--disable-component-update",
                           "--disable-sync", "--hide-scrollbars", f"--user-data-dir={tmp_path / 'profile'}",
                           f"--window-size={width},2000", "--dump-dom", copy.as_uri()],
                          capture_output=True, text=True, timeout=120)
    found = re.search(r'<pre id="normdiff-measure">(.*?)</pre>', proc.stdout, flags=re.S)
    assert found, proc.stdout[-2000:] + proc.stderr[-2000:]
    return json.loads(_html.unescape(found.group(1)))


@pytest.mark.slow
@pytest.mark.skipif(chromium() is None, reason="Chromium is not installed (apt-get install chromium); the markup "
                                               "test above holds the cells' widths without it")
def test_the_page_fits_1400_px_in_chromium(long_report, tmp_path):
    measured = laid_out(html.render_html(long_report), tmp_path, WIDTH)
    assert measured["width"] == WIDTH and measured["page"] <= WIDTH, measured
    assert measured["scrolls"] == [], measured


# ---- the plots --------------------------------------------------------------------------------


def drawn_outside(draw, data) -> list[float]:
    """How far (inches) what a plot draws reaches past its figure's edges, left, bottom, right, top:
    matplotlib's tight box of every artist drawn (what savefig's bbox_inches="tight" would keep)
    against the figure's own box. All 0 when nothing is cut."""
    figures = []
    finish = plots._finish
    plots._finish = lambda fig, path: figures.append(fig) or finish(fig, path)
    try:
        draw(data)
    finally:
        plots._finish = finish
    (fig,) = figures
    drawn = fig.get_tightbbox(fig.canvas.get_renderer())
    width, height = fig.get_size_inches()
    return [round(max(0.0, v), 3) for v in (-drawn.x0, -drawn.y0, drawn.x1 - width, drawn.y1 - height)]


REGIMES = ["normal", "group_scales", "head_scales", "head_scales:lognormal", "head_scales:logspace", "large",
           "mean_shift:0.3", "narrow:0.1", "tiny_rms:1e-3", "zero_heads", "zero_rows"]


@pytest.mark.parametrize("regimes, names", [(REGIMES, 40), (REGIMES[::-1], 3), (["head_scales:lognormal"], 1)])
def test_the_regime_plot_holds_its_labels(regimes, names):
    pytest.importorskip("matplotlib")
    rng = np.random.default_rng(0)
    table = pd.DataFrame(10.0 ** rng.uniform(-2, 6, (len(regimes), names)), index=regimes,
                         columns=[f"{LONG_NAME}-{i}" for i in range(names)])
    assert drawn_outside(plots.regime_errors, table) == [0, 0, 0, 0]


def test_the_agreement_plot_holds_its_labels():
    pytest.importorskip("matplotlib")
    names = [f"{LONG_NAME}-{i}" for i in range(30)]
    matrix = pd.DataFrame(np.random.default_rng(1).uniform(0, 1, (30, 30)), index=names, columns=names)
    assert drawn_outside(plots.agreement_heatmap, (matrix, matrix)) == [0, 0, 0, 0]
