"""The report folder's files and what each holds, as the views that write them describe them."""
from __future__ import annotations

from normdiff.reports import markup
from normdiff.reports.view import View

WRITTEN_BY_RENDERERS = (("junit.xml", "one test case per implementation x op@convention, for CI test reports"),
                        ("report.html", "this page"))


def derive(report) -> list[tuple[str, str]]:
    from normdiff.reports.views import VIEWS  # the registry that found this module: asked at run time

    return [d for view in VIEWS.values() for d in view.describes] + list(WRITTEN_BY_RENDERERS)


def _html(report, rows, page) -> str:
    body = "".join(f"<tr><th><code>{markup.esc(f)}</code></th><td>{markup.esc(d)}</td></tr>" for f, d in rows)
    return f'<h2 id="files">Files in this folder</h2><div class="scroll"><table class="data kv">{body}</table></div>'


FILES = View("files", 200, derive=derive, html=_html, nav="Files")
