"""The pieces every rendering is built from: escaping, tables in markdown and HTML, colours, figures.

Views (reports/views/) render their sections with these; reports/markdown.py and reports/html.py
assemble the sections into summary.md and report.html. Names and every other value are data: they
are escaped on the way out, never taken as markup.
"""
from __future__ import annotations

import base64
import hashlib
import html as _html
import re
import secrets

import pandas as pd

from normdiff.harness.engine.tables import repro_command
from normdiff.text import number, printable

# ---- markdown ---------------------------------------------------------------------------------
#
# GitHub renders raw HTML in markdown and takes `|`, backticks, `*`, `_`, `[`, `]` and a leading `#`
# as structure, so a name (an implementation's, a suite's, a file's) or an exception's text reaches
# summary.md only through md_text (inline text) or md_code (a code span); markdown_table puts every
# cell and header through md_cell. Both make the value one line and show its control characters.


class Markdown(str):
    """Markdown already made and safe in a table cell too (what md_text and md_code(..., table=True)
    return): md_cell leaves it as it is."""


_BACKSLASHED = re.compile(r"[\\`*\[\]|~]|(?<![^\W_])_|_(?![^\W_])")  # `_` inside a word is no emphasis
# what would start a heading, a list item, a thematic break, a numbered item or a block quote at the
# start of a line
_BLOCK_START = re.compile(r"^(?:(#)(?=#{0,5}(?:[ \t]|$))|([+-])(?=[ \t-]|$)|(\d{1,9})([.)])(?=[ \t]|$)|>)")


def _one_line(value) -> str:
    """`value` as one line: newlines, carriage returns and tabs as spaces, any other control
    character as a visible escape (\\x1b)."""
    return printable(str(value).translate({10: " ", 13: " ", 9: " "}), newlines=False)


def md_text(value) -> Markdown:
    r"""`value` as inline markdown text that renders as itself and nothing else, in a paragraph, a
    list item, a heading or a table cell: `<` and `&` as entities (no tag, comment, autolink or
    entity survives), the markdown metacharacters backslash-escaped (`a|b` -> `a\|b`, `_x_` ->
    `\_x\_`; an underscore inside a word, as in max_ulp, is no emphasis and stays), a leading `# `,
    `- `, `+ `, `1. ` or `>` escaped, and one line (see _one_line), without surrounding spaces. A `>`
    past the start stays as it is: with every `<` an entity it closes nothing, and an arrow (`->`)
    reads as one in the file too, not as `-&gt;`."""
    text = _one_line(value).strip().replace("&", "&amp;").replace("<", "&lt;")
    text = _BACKSLASHED.sub(lambda m: "\\" + m.group(), text)
    text = _BLOCK_START.sub(lambda m: m.group(3) + "\\" + m.group(4) if m.group(3) else "\\" + m.group(), text)
    return Markdown(text)


def md_code(value, table: bool = False) -> str:
    """`value` as a code span nothing in it can end: fenced by one backtick more than its longest run
    of backticks, padded with a space where it starts or ends with a backtick or a space (CommonMark
    takes one off each side), one line (see _one_line). Inside a code span HTML is text (`<script>`
    shows as typed) and backslashes are literal, so nothing else is escaped; in a GFM table cell
    (`table`) a `|` still ends the cell, so it is written `\\|`, which the table gives back as `|`
    (only then is it a Markdown: a span made for running text put in a cell is escaped as text). A
    value with a backslash before a `|` is no code span in a cell: GitHub's table scanner takes
    `\\\\|` as an escaped backslash and a cell's end, so it is md_text there."""
    text = _one_line(value)
    if not text:
        return Markdown("") if table else ""
    if table and "\\|" in text:
        return md_text(text)
    fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    if text[0] == "`" or text[-1] == "`" or (text[0] == " " and text[-1] == " " and text.strip()):
        text = f" {text} "
    if not table:
        return fence + text + fence
    return Markdown(fence + text.replace("|", "\\|") + fence)


def markdown_table(frame: pd.DataFrame, index: bool = False) -> str:
    """A GitHub-flavoured markdown table (no tabulate dependency); every header and cell is data
    (md_cell)."""
    if index:
        frame = frame.reset_index()
    cells = [[md_cell(v) for v in row] for row in frame.itertuples(index=False)]
    head = [md_cell(str(c)) for c in frame.columns]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in cells]
    return "\n".join(lines)


def md_cell(value) -> str:
    """One table cell: a float as `number` writes it, markdown already made (a Markdown: md_code(...,
    table=True)) as it is, anything else as md_text (one line, so one table row per line)."""
    if isinstance(value, Markdown):
        return value
    if isinstance(value, float):
        return number(value)
    return md_text(value)


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
               "rel_l2": "nowrap", "detail": "wrap", "diagnosis": "wrap"}


def esc(text) -> str:
    """`text` as HTML text or a quoted attribute value: `<`, `>`, `&` and quotes as entities, control
    characters shown as escapes (normdiff.text.printable)."""
    return _html.escape(printable(text))


def code(text) -> str:
    return f'<span class="cmd">{esc(text)}</span>'


def breakable(text) -> str:
    """Escaped text that may wrap after each '/' and '@' (case ids are long and have no spaces:
    add_rms_norm_quant_static@flashinfer-fp8-static alone is wider than a narrow column)."""
    return esc(text).replace("/", "/<wbr>").replace("@", "@<wbr>")


def case_cell(case_id, implementation, replays: dict | None = None) -> str:
    """A case id with the command that replays it underneath (`replays`: a run's meta["replay"])."""
    return (f'<span class="case">{breakable(case_id)}</span><br>'
            f'<span class="cmd">{breakable(repro_command(case_id, implementation, replays))}</span>')


def slug(name: str) -> str:
    """An id / anchor for an implementation: its name where it holds only [A-Za-z0-9_-], else those
    characters and a hash of the whole name (two names cannot share an id)."""
    name = str(name)
    plain = re.sub(r"[^A-Za-z0-9_-]+", "-", name)
    if plain != name:
        plain += "-" + hashlib.sha1(name.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return "impl-" + plain


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
    """A two-column table of (label, value) pairs, both escaped; a value may wrap after each '/' (a
    path, a case id)."""
    body = "".join(f"<tr><th>{esc(k)}</th><td>{breakable(v)}</td></tr>" for k, v in rows)
    return f'<div class="scroll"><table class="data kv">{body}</table></div>'


def table(frame: pd.DataFrame, uuid: str, styles: dict[str, object] | None = None,
          html_columns: tuple[str, ...] = (), classes: dict[str, str] | None = None,
          formats: dict[str, object] | None = None, index: bool = False, extra_class: str = "",
          na_rep: str = "") -> str:
    """A table (id T_<uuid>) of `frame`: each value as its column's formatter (`formats`, else
    `number`) writes it and escaped (esc), except in `html_columns` (already HTML); NA values
    show `na_rep`; headers and row labels (`index`) are escaped too. `styles` maps a column to a
    function value -> CSS for its cells, `classes` a column to a td class.

    Written out here rather than by pandas' Styler, whose templates took longer than the rest of
    the page for its ~70 tables; the markup is Styler's, less its per-cell ids (styles inline)."""
    formats, styles, classes = formats or {}, styles or {}, classes or {}
    columns = [_column(frame.iloc[:, j].tolist(), name in html_columns, formats.get(name), styles.get(name),
                       classes.get(name), na_rep)
               for j, name in enumerate(frame.columns)]
    labels = [[f"<th>{esc(label)}</th>" for label in frame.index]] if index else []
    head = ("<th>&nbsp;</th>" if index else "") + "".join(f"<th>{esc(name)}</th>" for name in frame.columns)
    body = "".join(f"<tr>{''.join(cells)}</tr>\n" for cells in zip(*labels, *columns))
    table_class = f"data {extra_class}".strip()
    return (f'<div class="scroll"><table id="T_{esc(uuid)}" class="{table_class}">\n'
            f"<thead><tr>{head}</tr></thead>\n<tbody>\n{body}</tbody></table></div>")


def _column(values: list, is_html: bool, fmt, style, td_class: str | None, na_rep: str) -> list[str]:
    """One column's <td> cells (see table)."""
    opening = f'<td class="data {td_class}"' if td_class else '<td class="data"'
    cells = []
    for value in values:
        if pd.isna(value) is True:
            text = na_rep
        else:
            text = fmt(value) if fmt else (value if is_html else number(value))
        css = style(value) if style else ""
        styled = f' style="{_html.escape(css)}"' if css else ""
        cells.append(f"{opening}{styled}>{text if is_html else esc(text)}</td>")
    return cells


class Page:
    """What a view's HTML section may draw into: figures, embedded as data URIs (`drawn` keeps each
    one's PNG bytes, which render_html writes to OUT_DIR/plots/NAME.png). Plots receive data
    (reports/plots.py); without matplotlib, or when a plot fails, the section shows a note instead
    and the page is still written.

    A figure is started when a section asks for it and put in place by `finish`: `start(draw,
    data)` begins drawing and returns what yields the PNG bytes, so that the figures can be drawn
    side by side with the rest of the page (html.page_and_plots forks a child per figure); by
    default each is drawn at `finish`."""

    def __init__(self, plots_on: bool | None = None, start=None):
        from normdiff.reports import plots

        self.on = plots.available() if plots_on is None else plots_on
        self.note = "" if self.on else "Plots are left out: matplotlib is not installed (pip install 'normdiff[plot]')."
        self.start = start or (lambda draw, data: lambda: draw(data, None))
        # a section's text is escaped, so it can hold no HTML comment: the markers cannot be forged
        self.token = secrets.token_hex(8)
        self.pending: dict[str, tuple] = {}  # name -> (what yields its PNG, alt, caption)
        self.drawn: dict[str, bytes] = {}

    def figure(self, name: str, draw, data, alt: str, caption: str) -> str:
        """A marker where `finish` puts the <figure> of `draw(data, None)` (PNG bytes), or a note
        saying why there is none."""
        if not self.on:
            return f'<p class="note">{esc(self.note)}</p>'
        if name not in self.pending:
            self.pending[name] = (self.start(draw, data), alt, caption)
        return self._marker(name)

    def finish(self, text: str) -> str:
        """`text` with every figure's marker replaced by the figure (its drawing awaited)."""
        for name, (result, alt, caption) in self.pending.items():
            try:
                png = self.drawn[name] = result()
                uri = "data:image/png;base64," + base64.b64encode(png).decode("ascii")
                shown = (f'<figure><img src="{uri}" alt="{esc(alt)}">'
                         f"<figcaption>{esc(caption)} (also <code>plots/{esc(name)}.png</code>)</figcaption></figure>")
            except Exception as exc:  # a plot must never cost the report
                shown = f'<p class="note">{esc(f"Plots could not be drawn: {type(exc).__name__}: {exc}")}</p>'
            text = text.replace(self._marker(name), shown)
        return text

    def _marker(self, name: str) -> str:
        return f"<!--figure {self.token} {esc(name)}-->"


def write_plots(out_dir, drawn: dict[str, bytes]) -> None:
    """A page's plots (Page.drawn) as OUT_DIR/plots/NAME.png."""
    from pathlib import Path

    from normdiff.files import atomic_write

    folder = Path(out_dir) / "plots"
    for name, png in drawn.items():
        folder.mkdir(parents=True, exist_ok=True)
        atomic_write(folder / f"{name}.png", png)
