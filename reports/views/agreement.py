"""Which implementations agree: the pairwise matrices, the groups that agree on every shared case,
and the bit-exact families per dtype."""
from __future__ import annotations

from collections import defaultdict

import pandas as pd

from normdiff.harness.data.outcomes import NOT_RUN
from normdiff.harness.engine import verdict
from normdiff.harness.engine.columns import C
from normdiff.reports import markup, plots
from normdiff.reports.view import View
from normdiff.text import share

# Two implementations with the same cast points still differ by an ulp now and then (a float32 sum
# taken in another order crosses a rounding boundary: ~1e-4 of bf16 elements), while different
# rounding orders (Llama cast vs one rounding) differ on ~25 % of elements; this share separates them.
EXACT_SHARE = 0.99


def agreement_matrix(pairs: pd.DataFrame, value: str = "agree") -> pd.DataFrame:
    """Fraction of shared cases on which two implementations agree (or are `identical`)."""
    if pairs.empty:
        return pd.DataFrame()
    both = pd.concat([pairs, pairs.rename(columns={"a": "b", "b": "a"})])
    matrix = both.pivot_table(index="a", columns="b", values=value, aggfunc="mean")
    names = sorted(set(matrix.index) | set(matrix.columns))
    matrix = matrix.reindex(index=names, columns=names)
    for name in names:
        matrix.loc[name, name] = 1.0
    matrix.index.name, matrix.columns.name = None, None
    return matrix


def groups(pairs: pd.DataFrame, names: list[str], value: str = "agree", share: float = 1.0) -> list[list[str]]:
    """Implementations linked by `value` on at least `share` of the cases they share (connected
    components; share=1.0: on every case)."""
    parent = {n: n for n in names}

    def root(n):
        while parent[n] != n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    if not pairs.empty:
        linked = pairs.groupby(["a", "b"])[value].mean()
        for (a, b), fraction in linked.items():
            if fraction >= share and a in parent and b in parent:
                parent[root(a)] = root(b)
    members = defaultdict(list)
    for n in names:
        members[root(n)].append(n)
    return sorted((sorted(g) for g in members.values()), key=lambda g: (-len(g), g))


def report_groups(report, value: str = "agree", dtype: str | None = None, share: float = 1.0) -> list[list[str]]:
    """The groups among a report's implementations that ran (mutants are each their own group by
    design; the kill summary speaks for them), over the cases of `dtype` when given."""
    results = report.results[[C.implementation, C.outcome, C.kind, C.dtype]]  # not the table's forty columns
    ran = results[~results[C.outcome].isin(NOT_RUN) & ~verdict.expected(results)]
    pairs = report.pairs
    if dtype is not None:
        ran, pairs = ran[ran[C.dtype] == dtype], pairs[pairs["dtype"] == dtype]
    return groups(pairs, sorted(ran[C.implementation].unique()), value, share)


def exact_families(report) -> dict[str, list[list[str]]]:
    """Bit-exact families per dtype: implementations whose outputs are bit-identical on at least
    EXACT_SHARE of the elements of their shared cases."""
    return {d: report_groups(report, "identical_elements", d, EXACT_SHARE) for d in sorted(report.results[C.dtype].unique())}


def derive(report) -> dict:
    return {"agree": report.agreement("agree"), "identical": report.agreement("identical"),
            "groups": report.groups("agree"), "families": report.exact_families()}


def _files(report, data) -> dict[str, str]:
    return {"agreement.csv": data["agree"].to_csv(), "identical.csv": data["identical"].to_csv()}


def braces(group) -> str:
    return "{" + ", ".join(group) + "}"


def _markdown(report, data) -> str:
    lines = ["## Groups that agree on every shared case (within the ULP budget)", ""]
    lines += [f"- {', '.join(markup.md_text(n) for n in g)}" for g in data["groups"]]
    lines += ["", f"## Bit-exact families (bit-identical on at least {share(EXACT_SHARE)} of the elements of shared cases)", ""]
    lines += [f"- {markup.md_text(dtype)}: " + "; ".join(braces(markup.md_text(n) for n in g) for g in fams)
              for dtype, fams in data["families"].items()]
    return "\n".join(lines)


def _html(report, data, page) -> str:
    parts = ['<h2 id="agreement">Agreement</h2>',
             page.figure("agreement", plots.agreement_heatmap, (data["agree"], data["identical"]),
                         "pairwise agreement heat maps",
                         "Share of the cases two implementations share on which they agree within the ULP budget "
                         "(left) and on which their outputs are bit-identical (right). Grey: the two share no case."),
             "<h3>Groups that agree on every shared case (within the ULP budget)</h3>"
             '<p class="muted">Connected groups: two implementations are linked when they agree on every case '
             "they share; a group can hold two members that never met, or met on a case where they are further "
             "apart than the budget (each is within the budget of the reference).</p>"]
    parts.append('<ul class="groups">' + "".join(f"<li>{markup.esc(', '.join(g))}</li>" for g in data["groups"])
                 + "</ul>" if data["groups"] else "<p>None.</p>")
    parts.append(f"<h3>Bit-exact families (bit-identical on at least {share(EXACT_SHARE)} of the elements of "
                 "shared cases)</h3>")
    rows = "".join(f'<tr><th>{markup.esc(d)}</th><td>{"<br>".join(markup.esc(braces(g)) for g in fams)}</td></tr>'
                   for d, fams in data["families"].items())
    parts.append(f'<div class="scroll"><table class="data kv">{rows}</table></div>' if rows else "<p>None.</p>")
    for value, title in (("agree", "agree within the budget"), ("identical", "bit-identical")):
        matrix = data[value]
        if matrix.empty:
            continue
        styles = {c: markup.shade for c in matrix.columns}
        formats = {c: (lambda v: "" if v != v else share(v)) for c in matrix.columns}
        parts.append(f"<details><summary>Matrix as numbers: share of shared cases on which two implementations "
                     f"{title}</summary>" + markup.table(matrix, f"matrix_{value}", styles=styles,
                                                         formats=formats, index=True) + "</details>")
    return "".join(parts)


AGREEMENT = View("agreement", 50, derive=derive, files=_files, markdown=_markdown, html=_html, nav="Agreement",
                 owns=("agreement.csv", "identical.csv"),
                describes=(("agreement.csv, identical.csv", "the pairwise matrices"),
                            ("plots/*.png", "the plots on this page")))
