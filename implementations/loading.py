"""Loading an implementation's entry ('package.module:attribute' or 'path/to/file.py:attribute')
inside the worker that runs it."""
from __future__ import annotations

import importlib
import importlib.util
import os
import sys


def load_entry(entry: str):
    """The attribute `entry` names; a FileNotFoundError or AttributeError says what is missing."""
    module_name, _, attr = entry.rpartition(":")
    if module_name.endswith(".py"):
        module = _import_file(module_name)
    else:
        module = importlib.import_module(module_name)
    try:
        return getattr(module, attr)
    except AttributeError:
        raise AttributeError(f"{module_name} has no attribute {attr!r}") from None


def _import_file(path: str):
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no such file: {path}")
    name = "normdiff_user_" + os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
