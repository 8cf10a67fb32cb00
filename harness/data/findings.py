"""Known findings: real libraries that disagree with the contract they implement, as data.

A finding stays in every report (its rows keep their real outcome and carry the explanation in the
`known_finding` column), but it does not fail the run: CI then goes red only for a *new*
disagreement. When a finding stops reproducing (a library fixed it), the summary says so. The
matching against the results table is the engine's (`engine/tables.py`); this module is pure data.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Finding:
    implementation: str
    outcome: str  # the outcome its rows show
    where: tuple[tuple[str, str], ...]  # (results column, value) pairs every matching row has
    explanation: str
    # the same library function as a user's target (`normdiff check torch.nn.functional:normalize`):
    # a check of it carries the finding too
    targets: tuple[str, ...] = ()


KNOWN: tuple[Finding, ...] = (
    Finding("torch-F.normalize", "nan_mismatch",
            (("op", "l2_norm"), ("dtype", "float16"), ("regime", "zero_rows")),
            "F.normalize clamps the norm with eps=1e-12 in the input dtype; 1e-12 rounds to 0 in fp16, "
            "so an all-zero row is 0/0 = NaN where x / max(norm, eps) gives 0 (bf16 and fp32 keep eps).",
            ("torch.nn.functional:normalize",)),
)
