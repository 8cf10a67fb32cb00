"""The run itself: suite, counts, time, exit status, and the versions of everything that computed it."""
from __future__ import annotations

from normdiff.clock import utc_now
from normdiff.reports import markup
from normdiff.reports.view import View
from normdiff.text import seconds as duration

FIRST = ("numpy", "torch", "jax", "jaxlib", "transformers", "flax", "ml_dtypes", "pandas")  # shown in this order


def derive(report) -> list[tuple[str, str]]:
    """(label, value) pairs: the run, then the versions."""
    meta = report.meta
    versions = dict(meta.get("versions") or {})
    value = lambda v: "not installed" if v is None else str(v)  # noqa: E731
    seconds = meta.get("seconds")
    rows = [("suite", f"{meta.get('suite', '?')}" + (f" ({meta['suite_path']})" if meta.get("suite_path") else "")),
            ("cases", str(meta.get("cases", "?"))),
            ("implementations", str(meta.get("implementations", "?"))),
            ("run time", duration(seconds) if isinstance(seconds, (int, float)) else "?"),
            ("exit status", str(meta.get("exit_code", "?"))),
            ("normdiff", f"{value(versions.pop('normdiff', None))}, git revision {meta.get('git_revision') or 'unknown'}"),
            ("python", value(versions.pop("python", None))),
            ("platform", value(versions.pop("platform", None)))]
    rows += [(name, value(versions.pop(name))) for name in FIRST if name in versions]
    rows += [(k, value(v)) for k, v in versions.items()]
    rows.append(("report written", utc_now().strftime("%Y-%m-%d %H:%M:%S UTC")))
    return rows


def _html(report, rows, page) -> str:
    return '<h2 id="run">Run</h2>' + markup.kv_table(rows)


def _markdown_versions(report, rows) -> str:
    return "## Versions\n\n" + "\n".join(f"- {markup.md_text(k)}: {markup.md_text(v)}"
                                       for k, v in (report.meta.get("versions") or {}).items())


RUN = View("run", 10, derive=derive, html=_html, nav="Run")
VERSIONS = View("versions", 120, markdown=_markdown_versions,
                describes=(("meta.json", "the run's metadata"),))
