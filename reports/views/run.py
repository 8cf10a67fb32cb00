"""The run itself (suite, counts, time, exit status, normdiff's version), at the top of the page; the
versions of everything else that computed it, at the end (report.html and summary.md alike)."""
from __future__ import annotations

from normdiff.clock import utc_now
from normdiff.reports import markup
from normdiff.reports.view import View
from normdiff.text import seconds as duration

FIRST = ("numpy", "torch", "jax", "jaxlib", "transformers", "flax", "ml_dtypes", "pandas")  # shown in this order


def _value(v) -> str:
    return "not installed" if v is None else str(v)


def derive(report) -> list[tuple[str, str]]:
    """(label, value) pairs of the run: what ran, for how long, how it ended, and which normdiff."""
    meta = report.meta
    versions = meta.get("versions") or {}
    seconds = meta.get("seconds")
    return [("suite", f"{meta.get('suite', '?')}" + (f" ({meta['suite_path']})" if meta.get("suite_path") else "")),
            ("cases", str(meta.get("cases", "?"))),
            ("implementations", str(meta.get("implementations", "?"))),
            ("run time", duration(seconds) if isinstance(seconds, (int, float)) else "?"),
            ("exit status", str(meta.get("exit_code", "?"))),
            ("normdiff", f"{_value(versions.get('normdiff'))}, git revision {meta.get('git_revision') or 'unknown'}"),
            ("report written", utc_now().strftime("%Y-%m-%d %H:%M:%S UTC"))]


def versions(report) -> list[tuple[str, str]]:
    """(label, value) pairs of the versions: Python, the platform, then the packages (FIRST first)."""
    rest = dict(report.meta.get("versions") or {})
    rest.pop("normdiff", None)  # the run's own rows say it
    rows = [("python", _value(rest.pop("python", None))), ("platform", _value(rest.pop("platform", None)))]
    rows += [(name, _value(rest.pop(name))) for name in FIRST if name in rest]
    return rows + [(k, _value(v)) for k, v in rest.items()]


def _html(report, rows, page) -> str:
    return '<h2 id="run">Run</h2>' + markup.kv_table(rows)


def _html_versions(report, rows, page) -> str:
    return '<h2 id="versions">Versions</h2>' + markup.kv_table(rows)


def _markdown_versions(report, rows) -> str:
    return "## Versions\n\n" + "\n".join(f"- {markup.md_text(k)}: {markup.md_text(v)}"
                                       for k, v in (report.meta.get("versions") or {}).items())


RUN = View("run", 10, derive=derive, html=_html, nav="Run")
VERSIONS = View("versions", 120, derive=versions, markdown=_markdown_versions, html=_html_versions, nav="Versions",
                describes=(("meta.json", "the run's metadata"),))
