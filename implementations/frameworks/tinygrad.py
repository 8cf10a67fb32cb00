"""tinygrad on its CPU device, which compiles kernels with clang. bf16 kernels need clang >= 16
(Debian 12's clang 14 fails: "__bf16 is not supported on this target"); normdiff points tinygrad at
clang-16 when the machine has it (`apt-get install clang-16`). Its kernel cache (a SQLite file of
compiled kernels) is not keyed by the compiler, so normdiff gives it a file of its own per compiler
and version ($NORMDIFF_TINYGRAD_CACHE, default ~/.cache/normdiff/tinygrad; empty: no cache, CACHELEVEL=0):
a second check of the same shapes does not compile them again (a tinygrad check 12.0 s -> 7.7 s,
measured)."""
from __future__ import annotations

import os
import shutil

import numpy as np

from normdiff.implementations.frameworks.record import Framework


def _compiler() -> str | None:
    return next((c for c in ("clang-16", "clang-17", "clang-18", "clang-19") if shutil.which(c)), None)


CACHE_ENV = "NORMDIFF_TINYGRAD_CACHE"


def setup() -> None:
    os.environ.setdefault("DEV", "CPU")
    compiler = _compiler()
    if compiler:
        os.environ.setdefault("CC", compiler)
    if "CACHELEVEL" not in os.environ and "CACHEDB" not in os.environ:  # (a user's own settings win)
        database = _cache_file(os.environ.get("CC", compiler or "cc"))
        os.environ.update({"CACHEDB": database} if database else {"CACHELEVEL": "0"})


def _cache_file(compiler: str) -> str | None:
    """The kernel cache's file for this compiler and its version, or None (no cache)."""
    import hashlib
    import subprocess

    from normdiff.files import cache_dir

    folder = cache_dir(CACHE_ENV, "tinygrad")
    if folder is None:
        return None
    try:
        version = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    key = hashlib.sha256(f"{shutil.which(compiler)}\n{version}".encode()).hexdigest()[:16]
    return os.path.join(folder, f"cache-{key}.db")


def missing() -> str | None:
    if _compiler() is None:
        return ("tinygrad's CPU backend needs clang >= 16 for bfloat16 kernels; install it with "
                "`apt-get install clang-16`")
    return None


def _dtype_pairs():
    import ml_dtypes
    from tinygrad import dtypes

    return {np.dtype(ml_dtypes.bfloat16): dtypes.bfloat16, np.dtype(np.float16): dtypes.half,
            np.dtype(np.float32): dtypes.float32, np.dtype(np.int64): dtypes.int64}


def from_numpy(array: np.ndarray):
    """A realized tensor in the array's dtype (bf16 through float32, exact)."""
    from tinygrad import Tensor

    target = _dtype_pairs()[array.dtype]
    source = array.astype(np.float32) if array.dtype.name == "bfloat16" else array
    return Tensor(np.ascontiguousarray(source)).cast(target).realize()


def to_numpy(value) -> np.ndarray:
    import ml_dtypes
    from tinygrad import dtypes

    value = value.realize()  # in its own dtype: the cast to float32 below is then exact
    if value.dtype == dtypes.bfloat16:
        return value.cast(dtypes.float32).numpy().astype(ml_dtypes.bfloat16)
    return value.numpy()


def prepare_module(module, x: np.ndarray):
    from tinygrad.nn.state import get_state_dict

    target = _dtype_pairs()[x.dtype]
    for name, tensor in get_state_dict(module).items():
        _assign(module, name, tensor.cast(target).realize())
    return module


def _assign(module, name: str, value) -> None:
    *path, last = name.split(".")
    for part in path:
        module = getattr(module, part)
    setattr(module, last, value)


def weights(module) -> dict:
    from tinygrad.nn.state import get_state_dict

    return {name: tuple(t.shape) for name, t in get_state_dict(module).items()}


def set_weight(module, name: str, weight: np.ndarray) -> None:
    _assign(module, name, from_numpy(weight))


FRAMEWORK = Framework("tinygrad", modules=("tinygrad",), extra="tinygrad", distributions=("tinygrad",),
                      user_code=True, detect=("tinygrad",), array_types=("tinygrad",), to_numpy=to_numpy,
                      from_numpy=from_numpy, setup=setup, missing=missing, module_types=("tinygrad",),
                      prepare_module=prepare_module, weights=weights, set_weight=set_weight)
