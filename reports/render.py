"""Write a report folder and render the short terminal summary, all from the tables in `tables`."""
from __future__ import annotations

import json
import os
import platform
import subprocess
from dataclasses import dataclass, field
from functools import cached_property
from importlib import metadata
from pathlib import Path

import pandas as pd

from normdiff.harness.findings import explained
from normdiff.reports import conventions, killmatrix, tables
from normdiff.reports.worst import repro_command

EXACT_SHARE = 0.99
SUMMARY_COLUMNS = ["implementation", "kind", "framework", "identical", "agree", "disagree",
                   "nan_mismatch", "error", "crashed", "timeout", "unavailable", "verdict"]


@dataclass
class Report:
    results: pd.DataFrame
    pairs: pd.DataFrame
    meta: dict
    # (case_id, implementation) -> output array, kept only when asked for (explain, repro)
    outputs: dict = field(default_factory=dict)
    # the comparison with a baseline (reports/baseline.py), when the run was given --baseline
    baseline: object = None
    # the suite's cases, from which the conventions view is derived when a report is written
    cases: tuple = ()

    @cached_property
    def conventions(self) -> pd.DataFrame | None:
        """How the conventions' exact contracts differ on the suite's inputs (reports/conventions.py);
        computed only when asked for, so check, explain and repro do not pay for it."""
        return conventions.divergence(self.cases) if self.cases else None

    @property
    def summary(self) -> pd.DataFrame:
        return tables.summary(self.results)

    @property
    def kill_summary(self) -> pd.DataFrame:
        return killmatrix.kill_summary(self.results)

    def agreement(self, value: str = "agree") -> pd.DataFrame:
        return tables.agreement_matrix(self.pairs, value)

    def groups(self, value: str = "agree", dtype: str | None = None, share: float = 1.0) -> list[list[str]]:
        """Implementations linked by `value` on `share` of shared cases (of `dtype`, when given)."""
        # mutants are each their own group by design; the kill summary speaks for them
        ran = self.results[~self.results["outcome"].isin(tables.NOT_RUN) & (self.results["kind"] != "mutant")]
        pairs = self.pairs
        if dtype is not None:
            ran, pairs = ran[ran["dtype"] == dtype], pairs[pairs["dtype"] == dtype]
        return tables.groups(pairs, sorted(ran["implementation"].unique()), value, share)

    def exact_families(self) -> dict[str, list[list[str]]]:
        """Bit-exact families per dtype: implementations whose outputs are bit-identical on at
        least EXACT_SHARE of the elements of their shared cases. Two implementations with the
        same cast points still differ by an ulp now and then (a float32 sum taken in another order
        crosses a rounding boundary: ~1e-4 of bf16 elements), while different rounding orders
        (Llama cast vs one rounding) differ on ~25 % of elements; the threshold separates the two."""
        return {d: self.groups("identical_elements", d, EXACT_SHARE) for d in sorted(self.results["dtype"].unique())}


def versions() -> dict:
    found = {"python": platform.python_version(), "platform": platform.platform()}
    for dist in ("normdiff", "numpy", "ml_dtypes", "pandas", "torch", "jax", "jaxlib", "transformers", "flax"):
        try:
            found[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            found[dist] = None
    return found


def git_revision() -> str:
    """The short commit of the normdiff checkout this code runs from, or "unknown" (no git, or an
    installed copy that is not a checkout: a site-packages copy inside some other repository does
    not count)."""
    source = Path(__file__).resolve().parent.parent  # reports/ -> the checkout root
    try:
        proc = subprocess.run(["git", "-C", str(source), "rev-parse", "--show-toplevel", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    lines = proc.stdout.split("\n")
    if proc.returncode != 0 or len(lines) < 2 or not lines[1].strip():
        return "unknown"
    try:
        if Path(lines[0].strip()).resolve() != source or not (source / "pyproject.toml").is_file():
            return "unknown"
    except OSError:
        return "unknown"
    return lines[1].strip()


def markdown_table(frame: pd.DataFrame, index: bool = False) -> str:
    """A GitHub-flavoured markdown table (no tabulate dependency)."""
    if index:
        frame = frame.reset_index()
    cells = [[_cell(v) for v in row] for row in frame.itertuples(index=False)]
    head = [str(c) for c in frame.columns]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in cells]
    return "\n".join(lines)


def _cell(value) -> str:
    if isinstance(value, float):
        return "" if pd.isna(value) else f"{value:.3g}"
    return str(value).replace("|", "\\|").replace("\r", " ").replace("\n", " ")  # one table row per line


def _verdict(meta: dict) -> str:
    if meta["exit_code"] == 0:
        return "every non-mutant implementation agrees with the reference."
    reasons = []
    if meta.get("failing"):
        reasons.append("disagreeing: " + ", ".join(meta["failing"]) + " (see Failing rows)")
    if meta["exit_code"] and not meta.get("failing"):
        reasons.append("regressions since the baseline (see Changes since baseline)")
    return "; ".join(reasons) + "."


def summary_markdown(report: Report) -> str:
    meta = report.meta
    summary = report.summary
    lines = [f"# normdiff report: suite `{meta['suite']}`", "",
             f"{meta['cases']} cases x {meta['implementations']} implementations in "
             f"{meta['seconds']:.1f} s. Exit status {meta['exit_code']}: {_verdict(meta)}", "",
             "## Implementations", "", markdown_table(summary[SUMMARY_COLUMNS + ["worst_max_ulp", "worst_case"]]), "",
             "## Groups that agree on every shared case (within the ULP budget)", ""]
    lines += [f"- {', '.join(g)}" for g in report.groups("agree")]
    lines += ["", f"## Bit-exact families (bit-identical on at least {EXACT_SHARE:.0%} of the elements of shared cases)", ""]
    lines += [f"- {dtype}: " + "; ".join("{" + ", ".join(g) + "}" for g in fams)
              for dtype, fams in report.exact_families().items()]
    if report.baseline is not None:  # `normdiff run --baseline FILE`
        lines += ["", report.baseline.markdown()]
    bad = tables.failing_rows(report.results)
    if not bad.empty:
        worst = bad.sort_values("max_ulp", ascending=False).head(20)
        worst = worst.assign(replay=[f"`{repro_command(c, i)}`"
                                     for c, i in zip(worst["case_id"], worst["implementation"])])
        lines += ["", "## Failing rows (worst 20)", "",
                  markdown_table(worst[["case_id", "implementation", "outcome", "max_ulp", "rel_l2", "detail",
                                        "replay"]])]
    known = report.results[explained(report.results)]
    if not known.empty:
        lines += ["", "## Known findings (real libraries that disagree with their contract; not failures)", ""]
        for (impl, text), rows in known.groupby(["implementation", "known_finding"]):
            lines.append(f"- **{impl}**, {len(rows)} case(s) ({', '.join(sorted(rows['case_id']))}): {text}")
    for note in meta.get("stale_findings", []):
        lines += ["", f"Known finding no longer reproduces: {note}"]
    kills = report.kill_summary
    if not kills.empty:
        lines += ["", "## Mutants (catalogued bugs; the harness's self-test)", "",
                  "Each must be caught (`disagree` or `nan_mismatch`) by some case; the typical columns show "
                  "how plausible it looks on N(0, 1) inputs.", "",
                  markdown_table(kills[["mutant", "op", "convention", "caught_by", "cases", "exposing_regimes",
                                        "invisible_regimes", "typical_rel_l2", "exposed_rel_l2", "typical_cosine",
                                        "typical_assert_close_passes"]])]
    if report.conventions is not None and not report.conventions.empty:
        lines += ["", "## How the conventions differ on the same inputs", "",
                  "The exact contracts of each pair of conventions with different maths, evaluated on the suite's "
                  "inputs (relative L2 distance); conventions that differ only in rounding are listed together.", "",
                  markdown_table(conventions.summary(report.conventions))]
    lines += ["", "## Budgets (ULPs of the output dtype)", ""]
    lines += [f"- {dtype}: " + ", ".join(f"{op if op != '*' else 'every op'} {v:g}" for op, v in per_op.items())
              for dtype, per_op in meta["budgets"].items()]
    lines += ["", "## Versions", ""] + [f"- {k}: {v}" for k, v in meta["versions"].items()]
    return "\n".join(lines) + "\n"


def write(report: Report, out_dir: str | os.PathLike) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    _atomic_write(out / "results.csv", report.results.to_csv(index=False))
    _atomic_write(out / "pairs.csv", report.pairs.to_csv(index=False))
    _atomic_write(out / "agreement.csv", report.agreement().to_csv())
    _atomic_write(out / "identical.csv", report.agreement("identical").to_csv())
    _atomic_write(out / "summary.csv", report.summary.to_csv(index=False))
    if report.conventions is not None:
        _atomic_write(out / "conventions.csv", report.conventions.to_csv(index=False))
    _atomic_write(out / "kill_matrix.csv", killmatrix.kill_matrix(report.results).to_csv())
    _atomic_write(out / "kill_summary.csv", report.kill_summary.to_csv(index=False))
    _atomic_write(out / "summary.md", summary_markdown(report))
    _atomic_write(out / "meta.json", json.dumps(report.meta, indent=2, default=str) + "\n")
    from normdiff.reports import html, junit  # report.html draws its plots into out/plots/

    _atomic_write(out / "junit.xml", junit.junit_xml(report))
    _atomic_write(out / "report.html", html.render_html(report, out))
    if report.baseline is not None:
        _atomic_write(out / "changes.csv", report.baseline.changes.to_csv(index=False))
    else:
        (out / "changes.csv").unlink(missing_ok=True)  # an earlier run's, not this one's
    return out


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def terminal(report: Report) -> str:
    summary = report.summary[SUMMARY_COLUMNS + ["worst_max_ulp"]]
    summary = summary[summary["kind"] != "mutant"]
    summary = summary.loc[:, (summary != 0).any(axis=0)]  # drop all-zero outcome columns
    with pd.option_context("display.width", 160, "display.max_columns", 30):
        text = summary.to_string(index=False, float_format=lambda v: f"{v:.3g}")
    groups = "; ".join("{" + ", ".join(g) + "}" for g in report.groups("agree"))
    exact = "\n".join(f"  {dtype:<9} " + "; ".join("{" + ", ".join(g) + "}" for g in fams)
                      for dtype, fams in report.exact_families().items())
    return (f"{text}\n\n{_mutant_line(report)}agreement groups: {groups}\n"
            f"bit-exact families (identical on >= {EXACT_SHARE:.0%} of elements):\n{exact}\n")


def _mutant_line(report: Report) -> str:
    kills = report.kill_summary
    if kills.empty:
        return ""
    missed = kills[~kills["caught"]]["mutant"].tolist()
    line = f"mutants caught: {int(kills['caught'].sum())}/{len(kills)}"
    return line + (f"; MISSED (the harness went blind): {', '.join(missed)}" if missed else "") + "\n"
