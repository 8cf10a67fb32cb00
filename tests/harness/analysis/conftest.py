"""Outputs made to order for the analysis tests: our NumPy implementation with a knob turned."""
from __future__ import annotations

import numpy as np
import pytest

from normdiff.cases import suites
from normdiff.implementations import numpy_own


def _outputs(op, convention, changes, regimes=("normal", "tiny_rms:1e-3", "mean_shift:1"), eps=("config", 1e-5),
             dtypes=("bfloat16", "float32")):
    heads = op in ("qk_norm", "qk_norm_rope")
    cases = suites.expand(dict(ops=[op], conventions=[convention], dtypes=list(dtypes),
                               shapes=["8x4x64" if heads else "8x256"], regimes=list(regimes), weights=["trained"],
                               eps=list(eps)))
    with np.errstate(all="ignore"):
        return {c.id: numpy_own.run(op, c.contract.replace(**changes), c.inputs()) for c in cases}


@pytest.fixture
def outputs():
    """outputs(op, convention, changes, regimes=..., eps=..., dtypes=...): case id -> output of the
    convention's contract with `changes` turned, on suite cases made for the test."""
    return _outputs
