"""The pieces every rendering is built from: escaping, tables in markdown and HTML, colours, figures.

Views (reports/views/) render their sections with these; reports/markdown.py and reports/html.py
assemble the sections into summary.md and report.html. Names and every other value are data: they
are escaped on the way out, never taken as markup.
"""
from __future__ import annotations

import base64
import html as _html
import importlib.util
import re

import pandas as pd

from normdiff.harness.engine.tables import repro_command
from normdiff.text import number

# ---- markdown ---------------------------------------------------------------------------------


def markdown_table(frame: pd.DataFrame, index: bool = False) -> str:
    """A GitHub-flavoured markdown table (no tabulate dependency)."""
    if index:
        frame = frame.reset_index()
    cells = [[md_cell(v) for v in row] for row in frame.itertuples(index=False)]
    head = [str(c) for c in frame.columns]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in cells]
    return "\n".join(lines)


def md_cell(value) -> str:
    if isinstance(value, float):
        return number(value)
    return str(value).replace("|", "\\|").replace("\r", " ").replace("\n", " ")  # one table row per line


# ---- HTML -------------------------------------------------------------------------------------

VERDICT_STYLE = {
    "agrees": "background-color: #d7f0dc; color: #14532d",
    "caught": "background-color: #d7f0dc; color: #14532d",
    "disagrees": "background-color: #f9d6d5; color: #7f1d1d; font-weight: 600",
    "missed": "background-color: #f9d6d5; color: #7f1d1d; font-weight: 600",
    "known finding": "background-color: #fdf0c4; color: #713f12",
    "unavailable": "background-color: #e5e7eb; color: #374151",
    "nothing to run": "background-color: #e5e7eb; color: #374151",
}
OUTCOME_STYLE = {"identical": VERDICT_STYLE["agrees"], "agree": VERDICT_STYLE["agrees"],
                 "unsupported": VERDICT_STYLE["unavailable"], "unavailable": VERDICT_STYLE["unavailable"]}
BAD_STYLE = VERDICT_STYLE["disagrees"]
CASE_COLUMN = "case id and replay command"
ROW_CLASSES = {CASE_COLUMN: "casecol", "implementation": "nowrap", "max_ulp": "nowrap", "budget": "nowrap",
               "rel_l2": "nowrap", "detail": "wrap"}


def esc(text) -> str:
    return _html.escape(str(text))


def code(text) -> str:
    return f'<span class="cmd">{esc(text)}</span>'


def breakable(text) -> str:
    """Escaped text that may wrap after each '/' (case ids are long and have no spaces)."""
    return esc(text).replace("/", "/<wbr>")


def case_cell(case_id, implementation, replays: dict | None = None) -> str:
    """A case id with the command that replays it underneath (`replays`: a run's meta["replay"])."""
    return (f'<span class="case">{breakable(case_id)}</span><br>'
            f'<span class="cmd">{breakable(repro_command(case_id, implementation, replays))}</span>')


def slug(name: str) -> str:
    return "impl-" + re.sub(r"[^A-Za-z0-9_-]+", "-", str(name))


def outcome_style(value) -> str:
    if "known finding" in str(value):
        return VERDICT_STYLE["known finding"]
    return OUTCOME_STYLE.get(str(value), BAD_STYLE)


def shade(share) -> str:
    """Background for a share in [0, 1]: red (0) - amber - green (1), readable with dark text."""
    if share is None or share != share:
        return "background-color: #f3f4f6; color: #9ca3af"
    share = min(max(float(share), 0.0), 1.0)
    stops = [(0.0, (0xf4, 0xa6, 0xa3)), (0.5, (0xfb, 0xe3, 0x8e)), (0.95, (0xd9, 0xef, 0xb0)),
             (1.0, (0x86, 0xd1, 0x9a))]
    for (a, ca), (b, cb) in zip(stops, stops[1:]):
        if share <= b:
            t = 0.0 if b == a else (share - a) / (b - a)
            rgb = tuple(round(x + (y - x) * t) for x, y in zip(ca, cb))
            return "background-color: #%02x%02x%02x" % rgb
    return "background-color: #86d19a"


def kv_table(rows) -> str:
    """A two-column table of (label, value) pairs, both escaped."""
    body = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in rows)
    return f'<div class="scroll"><table class="data kv">{body}</table></div>'


def _has_styler() -> bool:
    return importlib.util.find_spec("jinja2") is not None


def table(frame: pd.DataFrame, uuid: str, styles: dict[str, object] | None = None,
          html_columns: tuple[str, ...] = (), classes: dict[str, str] | None = None,
          formats: dict[str, object] | None = None, index: bool = False, extra_class: str = "",
          na_rep: str = "") -> str:
    """A table through pandas' Styler: values HTML-escaped except `html_columns` (already HTML),
    `styles` maps a column to a function value -> CSS, `classes` a column to a td class,
    `formats` a column to a formatter. Without jinja2: plain DataFrame.to_html, no colours."""
    table_class = f"data {extra_class}".strip()
    if not _has_styler():
        shown = frame.copy()
        for column, fn in (formats or {}).items():
            shown[column] = shown[column].map(fn)
        for column in shown.columns:
            if column not in html_columns:
                shown[column] = shown[column].map(lambda v: _html.escape(number(v)))
        return ('<div class="scroll">' + shown.to_html(index=index, escape=False, classes=table_class, border=0,
                                                        na_rep=na_rep) + "</div>")
    styler = (frame.style.set_uuid(uuid).set_table_attributes(f'class="{table_class}"')
              .format_index(escape="html", axis=0).format_index(escape="html", axis=1))
    if not index:
        styler = styler.hide(axis="index")
    plain = [c for c in frame.columns if c not in html_columns]
    if plain:
        styler = styler.format(lambda v: number(v), subset=plain, escape="html", na_rep=na_rep)
    for column, fn in (formats or {}).items():
        styler = styler.format(fn, subset=[column], escape=None if column in html_columns else "html",
                               na_rep=na_rep)
    for column, fn in (styles or {}).items():
        if column in frame.columns:
            styler = styler.map(lambda v, fn=fn: fn(v) or "", subset=[column])
    if classes:
        td = pd.DataFrame("", index=frame.index, columns=frame.columns)
        for column, cls in classes.items():
            if column in td.columns:
                td[column] = cls
        styler = styler.set_td_classes(td)
    return f'<div class="scroll">{styler.to_html()}</div>'


class Page:
    """What a view's HTML section may draw into: figures, embedded as data URIs and also written to
    OUT_DIR/plots/NAME.png. Plots receive data (reports/plots.py); without matplotlib, or when a
    plot fails, the section shows a note instead and the page is still written."""

    def __init__(self, out_dir=None, plots_on: bool | None = None):
        from normdiff.reports import plots

        self.out_dir = out_dir
        self.on = plots.available() if plots_on is None else plots_on
        self.note = "" if self.on else "Plots are left out: matplotlib is not installed (pip install 'normdiff[plot]')."
        self.drawn: dict[str, bytes] = {}

    def figure(self, name: str, draw, data, alt: str, caption: str) -> str:
        """<figure> of `draw(data, path)` (PNG bytes), or a note saying why there is none."""
        if self.on and name not in self.drawn:
            try:
                self.drawn[name] = draw(data, self._path(name))
            except Exception as exc:  # a plot must never cost the report
                self.note = f"Plots could not be drawn: {type(exc).__name__}: {exc}"
        png = self.drawn.get(name)
        if png is None:
            return f'<p class="note">{esc(self.note)}</p>'
        uri = "data:image/png;base64," + base64.b64encode(png).decode("ascii")
        return (f'<figure><img src="{uri}" alt="{esc(alt)}">'
                f"<figcaption>{caption} (also <code>plots/{esc(name)}.png</code>)</figcaption></figure>")

    def _path(self, name: str):
        if self.out_dir is None:
            return None
        from pathlib import Path

        folder = Path(self.out_dir) / "plots"
        folder.mkdir(parents=True, exist_ok=True)
        return folder / f"{name}.png"
