"""Each implementation's worst rows, and the side-by-side of actual values (reference against
implementation) on the worst row of a case.

The ranking is the engine's (`engine/tables.ranked`: a run needs it to know which outputs to keep);
the side-by-side also needs the implementation's output for the case (`Report.outputs`, filled when
a run keeps outputs). The reference side is recomputed from the case id by the float64 oracle, which
is cheap.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from normdiff.cases.model import Case
from normdiff.harness.data.dtypes import get_format
from normdiff.harness.engine.runner import prepare
from normdiff.harness.engine import verdict
from normdiff.harness.engine.columns import C
from normdiff.harness.engine.tables import ranked
from normdiff.text import columns, ulps

SIDE_BY_SIDE = 6  # elements shown from the start of the worst row (plus its worst element)


def worst_rows(results: pd.DataFrame, per_implementation: int = 5, mutants: bool = False) -> pd.DataFrame:
    """Up to `per_implementation` worst rows of each implementation (non-mutants unless `mutants`)."""
    rows = ranked(results if mutants else results[~verdict.expected(results)])
    return rows.groupby(C.implementation, sort=True).head(per_implementation)


def side_by_side(outputs: dict, case_id: str, implementation: str,
                 elements: int = SIDE_BY_SIDE) -> pd.DataFrame | None:
    """The input, the exact result (float64), the reference (the exact result rounded once to the
    case dtype: what a correct implementation returns) and the implementation's output on the row of
    the case where it is furthest from the exact result: the row's first `elements` elements and its
    worst element, with the error in ULPs counted as the judge counts it (so the worst equals the
    row's max_ulp). The input is the one the output lines up with element by element: x beside a
    forward result, the operand a gradient is of beside it (the weight beside dw); a frame without
    one (attrs["input"] '') has no such row. None when the output was not kept or the case cannot be
    rebuilt from its id."""
    out = outputs.get((case_id, implementation))
    if out is None:
        return None
    try:
        case = Case.from_id(case_id)
        fmt = get_format(case.dtype)
        # the case's own output as the run judged it: y, a fused add's residual_out, or a gradient
        prepared = prepare(case, [case])
        ref, inputs = prepared.ref, prepared.inputs
        if case.record.quantizes:  # q and its scale: no ULP grid of the case dtype to line up (not yet)
            return None
        exact = ref.exact
        out = np.asarray(out).astype(np.float64)
        if out.shape != exact.shape:
            return None
    except Exception:  # a hand-made id, or an output of another shape: nothing to line up
        return None
    width = exact.shape[-1]
    ulp = ref.ulp.reshape(-1, width)
    rounded = fmt.round(exact).reshape(-1, width)
    exact, out = exact.reshape(-1, width), out.reshape(-1, width)
    # the input element by element beside the output: x beside y (and a fused add's residual_out),
    # the operand a gradient is of beside it (the weight beside dw, whose shape is the weight's)
    given = case.operand or "x"
    shown = inputs.arrays[given].astype(np.float64)
    shown = shown.reshape(-1, width) if shown.size == exact.size else None
    with np.errstate(invalid="ignore", over="ignore"):
        ulps = np.abs(out - exact) / ulp
    # equal to the rounded reference where that is not finite (both NaN, the same infinity): 0 apart;
    # any other NaN or infinity on one side only is the worst there is
    same = (out == rounded) | (np.isnan(out) & np.isnan(rounded))
    ulps = np.where(np.isfinite(ulps), ulps, np.where(same, 0.0, np.inf))
    row, col = (int(i) for i in np.unravel_index(int(np.argmax(ulps)), ulps.shape))
    cols = list(range(min(elements, width)))
    if col not in cols:
        cols.append(col)
    lines = {} if shown is None else {f"{given} (input)": shown[row][cols]}
    lines.update({"exact (float64)": exact[row][cols], f"reference ({case.dtype})": rounded[row][cols],
                  implementation: out[row][cols], "ulps from exact": ulps[row][cols]})
    frame = pd.DataFrame(lines, index=[f"[{c}]" + (" worst" if c == col else "") for c in cols]).T
    frame.attrs.update(row=row, column=col, dtype=case.dtype, input=given if shown is not None else "")
    return frame


def as_text(frame: pd.DataFrame | None, indent: str = "  ") -> str:
    """The side-by-side as aligned text lines (explain, check, repro print it)."""
    if frame is None:
        return f"{indent}(no output kept for this case)"
    a = frame.attrs
    names = ([a["input"]] if a["input"] else []) + ["exact", "reference", frame.index[-2][:12], "ulp error"]
    head = (f"worst element: row {a['row']}, column {a['column']} ({ulps(frame.iloc[-1].max(), 4, missing='nan')}); "
            f"row {a['row']}, columns {', '.join(c.split(']')[0].strip('[') for c in frame.columns)} ({a['dtype']}):")
    lines = [indent + head]
    lines += [f"{indent}{name:<12}" + columns(frame.iloc[i], 12, 6) for i, name in enumerate(names)]
    return "\n".join(lines)


def as_values(frame: pd.DataFrame | None) -> dict:
    """The side-by-side as plain lists (check --json)."""
    if frame is None:
        return {}
    given = frame.attrs["input"]
    return {"row": frame.attrs["row"], "columns": [c.split("]")[0].strip("[") for c in frame.columns],
            "input": given, **({given: frame.iloc[0].tolist()} if given else {}),
            "reference": frame.iloc[-3].tolist(), "yours": frame.iloc[-2].tolist(), "ulp_error": frame.iloc[-1].tolist()}
