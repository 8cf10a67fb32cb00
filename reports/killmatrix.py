"""The kill matrix: which cases catch which mutant, and how plausible each mutant looks.

A mutant is *caught* (killed) by a case when its outcome there is `disagree` or `nan_mismatch`.
Derived from the results table alone.
"""
from __future__ import annotations

import pandas as pd

from normdiff.harness.compare import DISAGREEING

KILLS = DISAGREEING
TYPICAL = "normal"


def mutant_rows(results: pd.DataFrame) -> pd.DataFrame:
    rows = results[(results["kind"] == "mutant") & ~results["outcome"].isin(("unsupported", "unavailable"))]
    return rows.assign(killed=rows["outcome"].isin(KILLS))


def kill_matrix(results: pd.DataFrame) -> pd.DataFrame:
    """Cases x mutants: the outcome of each mutant on each case it ran (empty where it did not)."""
    rows = mutant_rows(results)
    if rows.empty:
        return pd.DataFrame()
    return rows.pivot(index="case_id", columns="implementation", values="outcome").astype("object").fillna("")


def kill_summary(results: pd.DataFrame) -> pd.DataFrame:
    """One row per mutant: how many cases catch it, in which regimes it hides, its error on typical
    inputs against its error where it is exposed, and how plausible it looks on typical inputs."""
    rows = mutant_rows(results)
    out = []
    for name, group in rows.groupby("implementation", sort=True):
        by_regime = group.groupby("regime")["killed"].any()
        typical = group[group["regime"] == TYPICAL]
        kills = group[group["killed"]]
        worst = kills.sort_values("rel_l2", ascending=False).head(1)
        out.append({
            "mutant": name, "op": group["op"].iloc[0], "convention": group["convention"].iloc[0],
            "cases": len(group), "caught_by": int(group["killed"].sum()), "caught": bool(group["killed"].any()),
            "exposing_regimes": ", ".join(sorted(by_regime[by_regime].index)),
            "invisible_regimes": ", ".join(sorted(by_regime[~by_regime].index)),
            "typical_rel_l2": float(typical["rel_l2"].median()) if len(typical) else float("nan"),
            "exposed_rel_l2": float(worst["rel_l2"].iloc[0]) if len(worst) else float("nan"),
            "exposed_case": worst["case_id"].iloc[0] if len(worst) else "",
            "typical_cosine": float(typical["cosine"].min()) if len(typical) else float("nan"),
            "typical_rms_ratio": float(typical["rms_ratio"].median()) if len(typical) else float("nan"),
            "typical_nan": int(typical["nan_count"].sum()) if len(typical) else 0,
            "typical_assert_close_passes": (f"{int(typical['assert_close'].astype(bool).sum())}/{len(typical)}"
                                            if len(typical) else ""),
        })
    return pd.DataFrame(out)
