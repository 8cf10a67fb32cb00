"""What a call of an implementation may not do to what it was given, checked by whoever makes the
call: a worker for `normdiff run` (harness/engine/worker.py), a model's norm site in-process for
`normdiff model` (implementations/hf_model_sites.py). Pure NumPy."""
from __future__ import annotations

import numpy as np


def changed_inputs(before: dict, after: dict) -> str | None:
    """Which inputs the call wrote to, compared bit for bit (NaN and -0 included)."""
    for name, old in before.items():
        new = after[name]
        if new.shape != old.shape or new.dtype != old.dtype:
            return f"changed its input {name!r} in place (now {new.dtype}{new.shape}): compute into a new array"
        if not old.size:
            continue
        # flat, contiguous copies: a 0-d or Fortran-ordered array cannot be viewed as bytes as it is
        old_bytes = np.ascontiguousarray(old).reshape(-1).view(np.uint8).reshape(old.size, -1)
        new_bytes = np.ascontiguousarray(new).reshape(-1).view(np.uint8).reshape(new.size, -1)
        differs = old_bytes != new_bytes
        count = int(differs.any(axis=1).sum())
        if count:
            return (f"modified its input {name!r} in place ({count} of {old.size} elements changed): an "
                    "implementation must not write to its inputs (the caller's tensor would be corrupted); "
                    "compute into a new array")
    return None
