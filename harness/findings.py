"""Known findings: real libraries that disagree with the contract they implement.

A finding stays in every report (its rows keep their real outcome and carry the explanation in the
`known_finding` column), but it does not fail the run: CI then goes red only for a *new*
disagreement. When a finding stops reproducing (a library fixed it), the summary says so.
"""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd


@dataclass(frozen=True)
class Finding:
    implementation: str
    outcome: str  # the outcome its rows show
    where: tuple[tuple[str, str], ...]  # (results column, value) pairs every matching row has
    explanation: str

    def mask(self, results: pd.DataFrame) -> pd.Series:
        hit = results["implementation"] == self.implementation
        for column, value in self.where:
            hit &= results[column].astype(str) == value
        return hit


KNOWN: tuple[Finding, ...] = (
    Finding("torch-F.normalize", "nan_mismatch",
            (("op", "l2_norm"), ("dtype", "float16"), ("regime", "zero_rows")),
            "F.normalize clamps the norm with eps=1e-12 in the input dtype; 1e-12 rounds to 0 in fp16, "
            "so an all-zero row is 0/0 = NaN where x / max(norm, eps) gives 0 (bf16 and fp32 keep eps)."),
)


def explained(rows: pd.DataFrame) -> pd.Series:
    """Which rows a known finding explains (False everywhere for a table without the column; a
    table read back from CSV has NaN where there is none)."""
    if "known_finding" not in rows:
        return pd.Series(False, index=rows.index)
    return rows["known_finding"].fillna("").astype(str) != ""


def annotate(results: pd.DataFrame, known: tuple[Finding, ...] = KNOWN) -> tuple[pd.DataFrame, list[str]]:
    """Mark rows explained by a known finding; also return the findings that did not reproduce."""
    results = results.assign(known_finding="")
    stale = []
    for finding in known:
        matching = finding.mask(results)
        shows = matching & (results["outcome"].astype(str) == finding.outcome)
        results.loc[shows, "known_finding"] = finding.explanation
        if matching.any() and not shows.any():
            stale.append(f"{finding.implementation}: expected {finding.outcome} where "
                         f"{dict(finding.where)}, and it no longer shows: {finding.explanation}")
    return results, stale
