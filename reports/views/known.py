"""Known findings: real libraries that disagree with their contract (harness/data/findings.py).
Their rows keep their outcome but do not fail the run; a finding that stops reproducing is said."""
from __future__ import annotations

from normdiff.harness.engine.tables import repro_command
from normdiff.harness.engine.columns import C
from normdiff.harness.engine.verdict import explained
from normdiff.reports import markup
from normdiff.reports.view import View


def derive(report) -> dict:
    results = report.results
    known = results[explained(results)] if C.known_finding in results else results.iloc[:0]
    return {"rows": known, "stale": list(report.meta.get("stale_findings") or [])}


def _by_finding(known):
    return known.groupby([C.implementation, C.known_finding])


def _markdown(report, data) -> str:
    lines = []
    if not data["rows"].empty:
        lines += ["## Known findings (real libraries that disagree with their contract; not failures)", ""]
        for (impl, text), rows in _by_finding(data["rows"]):
            cases = ", ".join(markup.md_text(c) for c in sorted(rows[C.case_id]))
            lines.append(f"- **{markup.md_text(impl)}**, {len(rows)} case(s) ({cases}): {markup.md_text(text)}")
    for note in data["stale"]:
        lines += ["", f"Known finding no longer reproduces: {markup.md_text(note)}"]
    return "\n".join(lines).strip("\n")


def _html(report, data, page) -> str:
    if data["rows"].empty and not data["stale"]:
        return ""
    parts = ['<h2 id="known">Known findings</h2><p>Real libraries that disagree with their contract; their rows '
             "keep their outcome but do not fail the run.</p><ul>"]
    for (impl, text), rows in _by_finding(data["rows"]):
        cases = "".join(f"<li><code>{markup.esc(c)}</code> {markup.code(repro_command(c, impl))}</li>"
                        for c in sorted(rows[C.case_id]))
        parts.append(f"<li><b>{markup.esc(impl)}</b>, {len(rows)} case(s): {markup.esc(text)}<ul>{cases}</ul></li>")
    parts.append("</ul>")
    parts += [f'<p class="note">Known finding no longer reproduces: {markup.esc(n)}</p>' for n in data["stale"]]
    return "".join(parts)


KNOWN = View("known", 80, derive=derive, markdown=_markdown, html=_html, nav="Known findings")
