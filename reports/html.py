"""`report.html`: one self-contained page (inline CSS, plots as base64 data URIs, no scripts, no
external fonts) with every view's HTML section in report order (reports/views/).

Tables are written by markup.table (no jinja2 needed). Plots need matplotlib; without it the page is
still written, with a note where the plots would be.
"""
from __future__ import annotations

import contextlib

from normdiff import processes
from normdiff.reports import markup, plots
from normdiff.reports.views import VIEWS

CSS = """
:root { color-scheme: light; }
body { font: 14px/1.45 -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif;
       color: #1f2937; background: #fff; margin: 0; }
main { max-width: 1360px; margin: 0 auto; padding: 16px 28px 48px; }
h1 { font-size: 24px; margin: 8px 0 4px; }
h2 { font-size: 19px; margin: 34px 0 10px; padding-bottom: 4px; border-bottom: 2px solid #e5e7eb; }
h3 { font-size: 15px; margin: 22px 0 6px; }
p { margin: 6px 0; }
code, .mono { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, "DejaVu Sans Mono", monospace;
              font-size: 12px; }
code { background: #f3f4f6; padding: 1px 4px; border-radius: 3px; }
.banner { padding: 10px 14px; border-radius: 6px; margin: 10px 0 4px; font-weight: 600; }
.banner.ok { background: #d7f0dc; color: #14532d; }
.banner.fail { background: #f9d6d5; color: #7f1d1d; }
nav { margin: 8px 0 0; font-size: 13px; }
nav a { margin-right: 12px; color: #1d4ed8; text-decoration: none; }
.scroll { overflow-x: auto; max-width: 100%; }
table.data { border-collapse: collapse; font-size: 12.5px; margin: 6px 0 10px; }
table.data th, table.data td { border: 1px solid #d1d5db; padding: 3px 7px; text-align: left;
                               vertical-align: top; }
table.data th { background: #f3f4f6; font-weight: 600; }
table.data td.num, table.data td.data { font-variant-numeric: tabular-nums; }
table.data td.wrap { white-space: normal; min-width: 180px; max-width: 420px; }
table.data td.nowrap { white-space: nowrap; }
table.data td.regimes { white-space: normal; min-width: 120px; max-width: 220px; }
table.kv th { width: 200px; }
table.sbs td { text-align: right; font-family: ui-monospace, Menlo, Consolas, "DejaVu Sans Mono", monospace;
               font-size: 12px; }
.cmd { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, "DejaVu Sans Mono", monospace;
       font-size: 11.5px; color: #374151; }
table.data td.casecol { min-width: 260px; }
table.data td.casecol .case { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, "DejaVu Sans Mono",
                              monospace; font-size: 12px; }
table.data td.casecol .cmd { font-size: 11px; color: #6b7280; }
.muted { color: #6b7280; }
.note { background: #f9fafb; border-left: 3px solid #9ca3af; padding: 6px 10px; margin: 8px 0; }
ul.groups li { margin: 3px 0; }
figure { margin: 10px 0 18px; }
figure img { max-width: 100%; height: auto; border: 1px solid #e5e7eb; }
figcaption { font-size: 12.5px; color: #4b5563; margin-top: 4px; max-width: 1000px; }
details summary { cursor: pointer; color: #1d4ed8; margin: 6px 0; }
.impl { border-left: 4px solid #d1d5db; padding: 2px 0 2px 12px; margin: 14px 0; }
.impl.bad { border-left-color: #dc2626; }
.impl.good { border-left-color: #16a34a; }
.impl.known { border-left-color: #ca8a04; }
.badge { font-size: 12px; padding: 1px 7px; border-radius: 10px; font-weight: 500; margin-left: 6px; }
"""


def render_html(report, out_dir=None, plots_on: bool | None = None) -> str:
    """The page as text. Plots are drawn here (and written to OUT_DIR/plots/); `plots_on` False
    leaves them out (default: when matplotlib is installed)."""
    text, drawn = page_and_plots(report, plots_on)
    if out_dir is not None:
        markup.write_plots(out_dir, drawn)
    return text


def page_and_plots(report, plots_on: bool | None = None) -> tuple[str, dict[str, bytes]]:
    """The page as text, and the PNG bytes of each plot it embeds, by name (for OUT_DIR/plots/):
    nothing is written, so a forked child can compute them (reports/render.py). Each plot is drawn
    in a forked child of its own while the page's tables are written (processes.forked)."""
    with contextlib.ExitStack() as drawing:
        page = markup.Page(plots_on, start=lambda draw, data: drawing.enter_context(processes.forked(draw, data, None)))
        if page.on:
            drawing.enter_context(plots.settings_folder())  # left last, once every drawing child is done
            plots.load()  # once, before the children fork: each would import it again
        text = _page(report, page)
        return page.finish(text), page.drawn


def verdict(meta: dict) -> tuple[bool, str]:
    """Whether the run passed, and the sentence that says so (the page's banner, and the first line
    of a Report shown in a notebook: reports/notebook.py)."""
    ok = meta.get("exit_code") == 0
    failing = meta.get("failing") or []
    said = ("Every non-mutant implementation agrees with the reference." if ok else
            "Some implementation disagrees with the reference: " + ", ".join(failing))
    if meta.get("incomplete"):
        ok, said = False, f"INCOMPLETE: {meta['incomplete']}; the cases that did not finish have no rows. " + said
    return ok, said


def _page(report, page: markup.Page) -> str:
    sections = [(view, view.html(report, report.view(view.name), page)) for view in VIEWS.values() if view.html]
    sections = [(view, text) for view, text in sections if text]
    meta = report.meta
    ok, banner = verdict(meta)
    nav = "".join(f'<a href="#{view.name}">{markup.esc(view.nav)}</a>' for view, _ in sections if view.nav)
    body = (f"<h1>normdiff report: suite <code>{markup.esc(meta.get('suite', '?'))}</code></h1>"
            f'<p class="muted">{markup.esc(meta.get("cases", "?"))} cases x '
            f'{markup.esc(meta.get("implementations", "?"))} implementations; exit status '
            f"{markup.esc(meta.get('exit_code', '?'))}</p>"
            f'<div class="banner {"ok" if ok else "fail"}">{markup.esc(banner)}</div><nav>{nav}</nav>'
            + "".join(text for _, text in sections))
    title = f"normdiff report: {meta.get('suite', '')}"
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>{markup.esc(title)}</title>"
            f"<style>{CSS}</style></head><body><main>{body}</main></body></html>\n")
