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
        old_flat, new_flat = _bits(old), _bits(new)
        if np.array_equal(old_flat, new_flat):  # the usual case, ~50x faster than counting below
            continue
        old_bytes = old_flat.view(np.uint8).reshape(old.size, -1)
        new_bytes = new_flat.view(np.uint8).reshape(new.size, -1)
        count = int((old_bytes != new_bytes).any(axis=1).sum())
        if count:
            return (f"modified its input {name!r} in place ({count} of {old.size} elements changed): an "
                    "implementation must not write to its inputs (the caller's tensor would be corrupted); "
                    "compute into a new array")
    return None


_UNSIGNED = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def _bits(array: np.ndarray) -> np.ndarray:
    """The array's elements as unsigned integers of their width (bytes for other widths), flat:
    equal bits compare equal, NaN and -0 included."""
    flat = np.ascontiguousarray(array).reshape(-1)
    return flat.view(_UNSIGNED.get(flat.dtype.itemsize, np.uint8))
