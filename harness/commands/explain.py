"""`normdiff explain [BUG]`: the teaching view of a catalogued bug.

Every number printed comes from running the bug's mutant over the default suite's cases of its
(op, convention) against the oracle, not from the catalogue's text.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from normdiff.cases import suites
from normdiff.cases.suites import Suite
from normdiff.harness import api
from normdiff.harness.data.backward_bugs import BACKWARD_BUGS, BackwardBug
from normdiff.harness.data.bugs import BUGS, Bug, get_bug
from normdiff.harness.data.errors import OutputError, UsageError
from normdiff.harness.data.ops import get_op
from normdiff.harness.data.outcomes import DISAGREEING, PASSING
from normdiff.harness.engine.columns import C
from normdiff.implementations import registry
from normdiff.text import fixed, general, number, ulps

SWEEP_RMS = np.logspace(-5, 1, 13)  # input RMS of the sweep for the bugs tiny inputs expose
SWEEP_DTYPES = ("float32", "bfloat16")


def bug_table() -> str:
    every = {**BUGS, **BACKWARD_BUGS}
    width = max(len(b) for b in every)
    lines = [f"{'bug':<{width}}  {'op@convention':<26} {'pass':<9} symptom"]
    lines += [f"{b.id:<{width}}  {b.op + '@' + b.convention:<26} {'backward' if b.id in BACKWARD_BUGS else 'forward':<9} "
              f"{b.symptom}" for b in every.values()]
    lines.append("\nnormdiff explain BUG shows one with measured numbers.")
    return "\n".join(lines)


def run_bug(bug: Bug | BackwardBug, suite: str = "default", passes: str = "both"):
    """The mutant's report over the suite's cases of the bug's (op, convention) and of the pass it
    corrupts (a backward bug: the backward cases of the outputs it corrupts), outputs kept."""
    full = suites.for_pass(suites.load(suite), passes)
    backward = isinstance(bug, BackwardBug)
    cases = tuple(c for c in full.cases if (c.op, c.convention) == (bug.op, bug.convention)
                  and (c.output in bug.outputs if backward else c.pass_ == "forward"))
    if not cases:
        what = f"backward {'/'.join(bug.outputs)}" if backward else "forward"
        raise UsageError(f"suite {suite!r} has no {what} {bug.op}@{bug.convention} cases to run {bug.id} on"
                         + (f" with --pass {passes}" if passes != "both" else ""))
    return api.run_suite(Suite(full.name, full.description, cases), [registry.get(bug.id)], keep_outputs=True)


def explain(bug_id: str, suite: str = "default", plot: str | None = None, passes: str = "both") -> str:
    if bug_id in BACKWARD_BUGS:
        return explain_backward(BACKWARD_BUGS[bug_id], suite, passes)
    bug = get_bug(bug_id)
    report = run_bug(bug, suite, passes)
    if get_op(bug.op).quantizes:
        return explain_quantizing(bug, report, suite, plot)
    rows = report.results
    caught = rows[rows[C.outcome].isin(DISAGREEING)]
    typical = rows[rows[C.regime] == "normal"]
    lines = [*_heading(bug), _plausible(typical), ""]
    if len(typical):
        said, best = closest_to_right(typical)
        lines += [f"{said}: {best[C.case_id]} ({best[C.outcome]}, "
                  f"rel_l2 {number(best[C.rel_l2], missing='nan')}, cosine {fixed(best[C.cosine], 6)})",
                  _side_by_side(report, best[C.case_id], bug.id), ""]
    if len(caught):
        worst = caught.sort_values(C.rel_l2, ascending=False).iloc[0]
        lines += [f"Exposed by {bug.exposes}. Badly wrong here: {worst[C.case_id]} ({worst[C.outcome]}, "
                  f"rel_l2 {number(worst[C.rel_l2], missing='nan')}, max {ulps(worst[C.max_ulp], missing='nan')})",
                  _side_by_side(report, worst[C.case_id], bug.id), "",
                  f"Caught by {len(caught)} of {len(rows)} {bug.op}@{bug.convention} cases of suite "
                  f"'{suite}', in regimes: {', '.join(sorted(caught[C.regime].unique()))}"]
        lines += [f"  {cid}" for cid in sorted(caught[C.case_id])[:12]]
        if len(caught) > 12:
            lines.append(f"  ... and {len(caught) - 12} more (kill_matrix.csv of a normdiff run lists all)")
    else:
        lines.append(f"NOT caught by any case of suite '{suite}': the harness is blind to this bug there.")
    lines += ["", "Seen in: " + "; ".join(bug.seen_in)]
    if plot:
        sweep = rms_sweep(bug, report.cases) if "tiny_rms" in bug.exposing_regimes else None
        _plot(bug, sweep, per_regime(rows), plot, lines)
    return "\n".join(lines)


def _heading(bug: Bug) -> list[str]:
    return [f"{bug.id}: {bug.symptom}", f"  op {bug.op} under convention {bug.convention}; the mutant turns "
            f"{', '.join(f'{k}={v!r}' for k, v in bug.changes.items())}", "",
            f"  right: {bug.right}", f"  wrong: {bug.wrong}", ""]


def _plot(bug: Bug, sweep, regimes: dict, plot: str, lines: list[str], blocks: dict | None = None) -> None:
    from normdiff.reports.plots import plot_bug

    try:
        plot_bug(f"{bug.id}: {bug.op}@{bug.convention}", sweep, regimes, plot, blocks)
    except OutputError as exc:  # the disk refused the plot: the explanation is still printed
        exc.kept = "\n".join(lines)
        raise
    lines.append(f"plot written to {plot}")


def explain_quantizing(bug: Bug, report, suite: str, plot: str | None = None) -> str:
    """The teaching view of a quantizing bug: the case shown is a call (its q, with its scale's
    judgement beside it), and in place of a side-by-side of y the format's grid around its worst
    element, where saturation bites, and the error against the block's amax over every call
    (harness/analysis/quant_explain.py)."""
    from normdiff.harness.analysis import quant_explain as qx

    rows = report.results
    calls = qx.call_rows(rows)  # one row per call: its q, its scale's outcome beside it
    caught = rows[rows[C.outcome].isin(DISAGREEING)]
    typical = calls[calls[C.regime] == "normal"]
    lines = [*_heading(bug), _plausible(typical, "its q * scale (dequantized, to the exact y)", "calls"),
             *qx.judged(rows[rows[C.regime] == "normal"]), ""]
    kept = {cid: qx.call_of(cid, report.outputs, bug.id) for cid in calls[C.case_id]}
    if len(typical):
        said, best = closest_to_right(typical)
        lines += [f"{said}: {best[C.case_id]} ({qx.described(best)})", *_grid(qx, kept[best[C.case_id]]), ""]
    bad = calls[calls[C.outcome].isin(DISAGREEING)]
    if len(bad):
        worst = bad.sort_values([C.rel_l2, C.nan_count], ascending=False).iloc[0]
        call = kept[worst[C.case_id]]
        lines += [f"Exposed by {bug.exposes}. Badly wrong here: {worst[C.case_id]} ({qx.described(worst)})",
                  *_grid(qx, call), *(qx.saturation(call, tuple(bug.changes)) if call else ()), "",
                  f"Caught by {len(caught)} of {len(rows)} {bug.op}@{bug.convention} cases (q and scale) of suite "
                  f"'{suite}', in regimes: {', '.join(sorted(caught[C.regime].unique()))}"]
        lines += [f"  {cid}" for cid in sorted(caught[C.case_id])[:12]]
        if len(caught) > 12:
            lines.append(f"  ... and {len(caught) - 12} more (kill_matrix.csv of a normdiff run lists all)")
    else:
        lines.append(f"NOT caught by any case of suite '{suite}': the harness is blind to this bug there.")
    measured = [c for c in kept.values() if c is not None]
    lines += ["", *qx.amax_table(measured, indent=""), "", "Seen in: " + "; ".join(bug.seen_in)]
    if plot:
        _plot(bug, None, per_regime(calls), plot, lines, qx.amax_points(measured) if measured else None)
    return "\n".join(lines)


def _grid(qx, call) -> list[str]:
    return qx.grid(call) if call is not None else ["    (no output kept for this case)"]


def explain_backward(bug: BackwardBug, suite: str = "default", passes: str = "both") -> str:
    """The teaching view of a backward bug: how plausible its gradients look (cosine to the exact
    VJP, their scale against it), where they are caught and by how much."""
    report = run_bug(bug, suite, passes)
    rows = report.results
    caught = rows[rows[C.outcome].isin(DISAGREEING)]
    lines = [f"{bug.id}: {bug.symptom}", f"  backward of {bug.op} under convention {bug.convention}; corrupts "
             f"{', '.join(bug.outputs)} in {', '.join(bug.dtypes)}", "", f"  wrong: {bug.formula}", ""]
    for output, of in rows.groupby(C.output):
        cosine = f"{fixed(of[C.cosine].min(), 6)}-{fixed(of[C.cosine].max(), 6)}"
        scale = f"{number(of[C.rms_ratio].min(), missing='nan')}-{number(of[C.rms_ratio].max(), missing='nan')}"
        lines.append(f"  {output}: cosine to the exact gradient {cosine}, scale (rms ratio) {scale}, torch.testing."
                     f"assert_close passes {int(of[C.assert_close].astype(bool).sum())}/{len(of)}; caught on "
                     f"{int(of[C.outcome].isin(DISAGREEING).sum())}/{len(of)}")
    if len(caught):
        worst = caught.sort_values(C.rel_l2, ascending=False).iloc[0]
        lines += ["", f"Badly wrong here: {worst[C.case_id]} ({worst[C.outcome]}, "
                      f"rel_l2 {number(worst[C.rel_l2], missing='nan')}, "
                      f"max {ulps(worst[C.max_ulp], missing='nan')} of the gradient's terms)",
                  _side_by_side(report, worst[C.case_id], bug.id), "",
                  f"Caught by {len(caught)} of {len(rows)} backward {bug.op}@{bug.convention} cases of suite '{suite}', "
                  f"with dy: {', '.join(sorted(caught[C.dy].unique()))}"]
        lines += [f"  {cid}" for cid in sorted(caught[C.case_id])[:12]]
    else:
        lines.append(f"NOT caught by any backward case of suite '{suite}': the harness is blind to this bug there.")
    lines += ["", f"Seen in: {bug.source}"]
    return "\n".join(lines)


def rms_sweep(bug: Bug, cases) -> dict:
    """The mutant's rel_l2 as the input RMS sweeps SWEEP_RMS, on the shape and weights of the
    suite's first case of the bug's op, in each of SWEEP_DTYPES: {label: (rms values, rel_l2)}."""
    template = cases[0]
    sweep = {}
    for dtype in SWEEP_DTYPES:
        runs = tuple(dataclasses.replace(template, dtype=dtype, regime=f"tiny_rms:{s:.3g}", sample=0)
                     for s in SWEEP_RMS)
        rows = api.run_suite(Suite("sweep", "", runs), [registry.get(bug.id)]).results.set_index(C.case_id)
        sweep[f"{bug.id} ({dtype})"] = (SWEEP_RMS, [rows.loc[c.id, C.rel_l2] for c in runs])
    return sweep


def per_regime(rows) -> dict:
    """regime -> (the worst rel_l2 there, whether a case there catches the bug)."""
    worst_rel = rows.groupby(C.regime)[C.rel_l2].max().sort_values()
    caught = rows.groupby(C.regime)[C.outcome].apply(lambda s: s.isin(DISAGREEING).any())
    return {r: (float(worst_rel[r]), bool(caught[r])) for r in worst_rel.index}


# what makes a wrong output look plausible on typical inputs, each measured on every typical case:
SAME_SCALE = 1.1  # its rms within this factor of the reference's
SAME_WAY = 0.99  # its cosine to the reference at least this


def _plausible(typical, subject: str = "it", cases: str = "cases") -> str:
    """How plausible the mutant looks on typical inputs, said by the measures themselves: it looks
    plausible only by those that say so (finite, the reference's scale, its direction, assert_close
    passing it on some, where it was measured), and a measure that does not is said to, in plain
    words. `subject`: what is judged ("it": its output)."""
    if typical.empty:
        return f"No typical (N(0, 1)) {cases} in this suite for it."
    n = len(typical)
    looks, off = [], []
    bad = int(typical[C.nan_count].sum() + typical[C.inf_count].sum())
    (looks if bad == 0 else off).append("finite (0 NaN or Inf)" if bad == 0 else f"{bad} NaN or Inf")
    low, high = typical[C.rms_ratio].min(), typical[C.rms_ratio].max()
    scale = f"output rms {number(low, missing='nan')}-{number(high, missing='nan')} x the reference's"
    (looks if 1 / SAME_SCALE <= low and high <= SAME_SCALE else off).append(scale)
    cosine = typical[C.cosine].min()
    if cosine >= SAME_WAY:
        looks.append(f"cosine to the reference >= {fixed(cosine, 6)}")
    else:
        off.append(f"cosine to the reference as low as {fixed(cosine, 6)} (below {general(SAME_WAY)}: it does not "
                   "point the reference's way)")
    if typical[C.assert_close].notna().any():  # (not measured on a quantizing op's codes)
        passes = int(typical[C.assert_close].fillna(False).astype(bool).sum())
        (looks if passes else off).append(f"torch.testing.assert_close's defaults pass it on {passes}/{n}")
    errors = f"rel_l2 {number(typical[C.rel_l2].min(), missing='nan')}-{number(typical[C.rel_l2].max(), missing='nan')}"
    head = f"On typical N(0, 1) inputs ({n} {cases}) {subject}"
    if not off:
        return f"{head} looks plausible by every measure here: {'; '.join(looks)}; {errors}."
    if not looks:
        return f"{head} does not look plausible by any measure here: {'; '.join(off)}; {errors}."
    return f"{head} looks plausible only by: {'; '.join(looks)}. Not by: {'; '.join(off)}; {errors}."


def closest_to_right(typical) -> tuple[str, object]:
    """The typical case to show as the mutant's most plausible output, and what to call it: one the
    budget passes ("Looks right here"), else one assert_close passes, else the one nearest the
    reference, said to be caught. bf16 first: where models run, and where a small error hides under
    the rounding floor; then the highest cosine, the smallest rel_l2."""
    passing = typical[typical[C.outcome].isin(PASSING)]
    close = typical[typical[C.assert_close].astype(bool)]
    said, pool = (("Looks right here", passing) if len(passing) else
                  ("assert_close passes it here, its budget does not", close) if len(close) else
                  ("Nearest to right on typical inputs, and still caught", typical))
    bf16 = pool[pool[C.dtype] == "bfloat16"]
    pool = bf16 if len(bf16) else pool
    return said, pool.sort_values([C.cosine, C.rel_l2], ascending=[False, True]).iloc[0]


def _side_by_side(report, case_id: str, impl: str) -> str:
    from normdiff.reports import worst  # pandas: only once a bug is explained, not for the table

    return worst.as_text(worst.side_by_side(report.outputs, case_id, impl), indent="    ")
