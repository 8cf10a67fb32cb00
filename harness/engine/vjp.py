"""The oracle's backward pass: the exact float64 vector-Jacobian product of `oracle.evaluate`, which
is the op's (its record's `vjp`, harness/data/ops/; the norms' is ops/norm.py, whose docstring
derives it stage by stage)."""
from __future__ import annotations

import numpy as np

from normdiff.harness.data.contracts import Contract


def vjp(contract: Contract, arrays: dict[str, np.ndarray], dy: np.ndarray, num_heads: int = 1,
        absolute: bool = False, floor: float = 0.0, power="nearest") -> dict[str, np.ndarray]:
    """J^T dy of `oracle.evaluate(contract, arrays, num_heads)`, float64: a gradient per float
    operand in `arrays`, each shaped like it (ops/norm.py `vjp` says what `absolute`, `floor` and
    `power` mean)."""
    return contract.record.vjp(contract, arrays, dy, num_heads, absolute, floor, power)
