"""`normdiff explain [BUG]`: the teaching view of a catalogued bug.

Every number printed comes from running the bug's mutant over the default suite's cases of its
(op, convention) against the oracle, not from the catalogue's text.
"""
from __future__ import annotations

from normdiff.cases import suites
from normdiff.harness.bugs import BUGS, Bug, get_bug
from normdiff.harness.compare import DISAGREEING

SIDE_BY_SIDE = 6  # elements shown from the worst row


def bug_table() -> str:
    width = max(len(b) for b in BUGS)
    lines = [f"{'bug':<{width}}  {'op@convention':<26} symptom"]
    lines += [f"{b.id:<{width}}  {b.op + '@' + b.convention:<26} {b.symptom}" for b in BUGS.values()]
    lines.append("\nnormdiff explain BUG shows one with measured numbers.")
    return "\n".join(lines)


def run_bug(bug: Bug, suite: str = "default"):
    """The mutant's report over the suite's cases of the bug's (op, convention), outputs kept."""
    from normdiff.cases.suites import Suite
    from normdiff.harness import api, registry

    full = suites.load(suite)
    cases = tuple(c for c in full.cases if (c.op, c.convention) == (bug.op, bug.convention))
    if not cases:
        raise ValueError(f"suite {suite!r} has no {bug.op}@{bug.convention} cases to run {bug.id} on")
    return api.run_suite(Suite(full.name, full.description, cases), [registry.get(bug.id)], keep_outputs=True)


def explain(bug_id: str, suite: str = "default", plot: str | None = None) -> str:
    bug = get_bug(bug_id)
    report = run_bug(bug, suite)
    rows = report.results
    caught = rows[rows["outcome"].isin(DISAGREEING)]
    typical = rows[rows["regime"] == "normal"]
    lines = [f"{bug.id}: {bug.symptom}", f"  op {bug.op} under convention {bug.convention}; the mutant turns "
             f"{', '.join(f'{k}={v!r}' for k, v in bug.changes.items())}", "",
             f"  right: {bug.right}", f"  wrong: {bug.wrong}", "", _plausible(typical), ""]
    if len(typical):
        # bf16 first: where models run, and where a small error hides under the rounding floor
        pool = typical[typical["dtype"] == "bfloat16"] if (typical["dtype"] == "bfloat16").any() else typical
        best = pool.sort_values(["cosine", "rel_l2"], ascending=[False, True]).iloc[0]
        lines += [f"Looks right here: {best['case_id']} ({best['outcome']}, rel_l2 {best['rel_l2']:.3g}, "
                  f"cosine {best['cosine']:.6f})", _side_by_side(report, best["case_id"], bug.id), ""]
    if len(caught):
        worst = caught.sort_values("rel_l2", ascending=False).iloc[0]
        lines += [f"Exposed by {bug.exposes}. Badly wrong here: {worst['case_id']} ({worst['outcome']}, "
                  f"rel_l2 {worst['rel_l2']:.3g}, max {worst['max_ulp']:.3g} ulp)",
                  _side_by_side(report, worst["case_id"], bug.id), "",
                  f"Caught by {len(caught)} of {len(rows)} {bug.op}@{bug.convention} cases of suite "
                  f"'{suite}', in regimes: {', '.join(sorted(caught['regime'].unique()))}"]
        lines += [f"  {cid}" for cid in sorted(caught["case_id"])[:12]]
        if len(caught) > 12:
            lines.append(f"  ... and {len(caught) - 12} more (kill_matrix.csv of a normdiff run lists all)")
    else:
        lines.append(f"NOT caught by any case of suite '{suite}': the harness is blind to this bug there.")
    lines += ["", "Seen in: " + "; ".join(bug.seen_in)]
    if plot:
        from normdiff.reports.plots import plot_bug

        lines.append(f"plot written to {plot_bug(bug, report, plot)}")
    return "\n".join(lines)


def _plausible(typical) -> str:
    if typical.empty:
        return "No typical (N(0, 1)) cases in this suite for it."
    passes = int(typical["assert_close"].astype(bool).sum())
    return (f"On typical N(0, 1) inputs ({len(typical)} cases) it looks plausible: output rms "
            f"{typical['rms_ratio'].min():.3g}-{typical['rms_ratio'].max():.3g} x the reference's, "
            f"{int(typical['nan_count'].sum())} NaN, cosine to the reference >= {typical['cosine'].min():.6f}; "
            f"torch.testing.assert_close's defaults pass it on {passes}/{len(typical)}; "
            f"rel_l2 {typical['rel_l2'].min():.3g}-{typical['rel_l2'].max():.3g}.")


def _side_by_side(report, case_id: str, impl: str) -> str:
    from normdiff.reports import worst

    return worst.as_text(worst.side_by_side(report.outputs, case_id, impl), indent="    ")
