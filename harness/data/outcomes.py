"""The outcomes a case x implementation can have, best first, and the families reports use.

  identical     every element equals the correctly rounded reference
  agree         within the dtype's ULP budget everywhere
  disagree      finite, beyond the budget somewhere
  nan_mismatch  NaN/Inf where the (rounded) reference has none, or the reverse
  error         the implementation raised, or returned something unusable (shape, dtype)
  crashed       its worker process died
  timeout       it did not return within the per-call limit
  unsupported   it does not implement this (op, convention)
  unavailable   its framework or class is not installed here
Pure data.
"""
from __future__ import annotations

OUTCOMES = ("identical", "agree", "disagree", "nan_mismatch", "error", "crashed", "timeout",
            "unsupported", "unavailable")
PASSING = ("identical", "agree")
DISAGREEING = ("disagree", "nan_mismatch")  # the formula is wrong: what catches a mutant
NOT_RUN = ("unsupported", "unavailable")
FAILED_TO_RUN = ("error", "crashed", "timeout", "unavailable")  # no output to judge
