"""The array frameworks normdiff runs, one record per file in this folder (record.py says what a
record holds). `FRAMEWORKS` maps each name to its record; `to_numpy` converts any of their arrays.
Finding the records imports only this folder's small modules, never a framework.
"""
from __future__ import annotations

import importlib
import pkgutil

import numpy as np

from normdiff.harness.data.errors import UsageError
from normdiff.harness.data.names import unknown
from normdiff.implementations.frameworks.record import Framework


def _discover() -> dict[str, Framework]:
    found = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name != "record":
            record = importlib.import_module(f"{__name__}.{info.name}").FRAMEWORK
            found[record.name] = record
    # numpy first: the framework of plain arrays and the default for user code
    return dict(sorted(found.items(), key=lambda kv: (kv[0] != "numpy", kv[0])))


FRAMEWORKS: dict[str, Framework] = _discover()


def get_framework(name: str) -> Framework:
    if name not in FRAMEWORKS:
        raise UsageError(unknown("framework", name, FRAMEWORKS))
    return FRAMEWORKS[name]


def user_frameworks() -> tuple[str, ...]:
    """The frameworks a user's Python code can be checked in."""
    return tuple(name for name, f in FRAMEWORKS.items() if f.user_code)


def graph_framework(path: str) -> str | None:
    """The framework whose graph files end like `path` (model.onnx: onnxruntime), if any."""
    return next((name for name, f in FRAMEWORKS.items() if f.graph_files and path.endswith(f.graph_files)), None)


def to_numpy(value) -> np.ndarray:
    """Any framework's array as a NumPy array with the same dtype and bits; a subclass of one (a
    library's own tensor class, torch.nn.Parameter) as the array it is."""
    for klass in type(value).__mro__[:-1]:  # the class, then its bases (object aside)
        for record in FRAMEWORKS.values():
            if record.array_types and klass.__module__.startswith(record.array_types):
                return record.to_numpy(value)
    return np.asarray(value)
