"""Loading an implementation's entry ('package.module:attr.path' or 'path/to/file.py:attr.path')
inside the worker that runs it: the module imported (or the file executed), then each part of the
attribute path looked up with getattr, as Python resolves `keras.ops.rms_normalization`
(re-exports and lazily loaded attributes included)."""
from __future__ import annotations

import importlib
import importlib.util
import os
import sys


def make_adapter(impl, pass_: str = "forward"):
    """The callable that runs `impl`'s `pass_`: its entry, called with its user target or its params
    when it has them (a factory), after its framework's setup (e.g. KERAS_BACKEND, before the first
    import)."""
    from normdiff.implementations.frameworks import FRAMEWORKS

    FRAMEWORKS[impl.framework].setup()
    entry = load_entry(impl.entry_for(pass_))
    if impl.target is not None:  # a user's code: its factory takes the typed target, facts and all
        return entry(impl.target)
    return entry(**dict(impl.params)) if impl.params else entry


def load_entry(entry: str):
    """The attribute `entry` names; a FileNotFoundError or AttributeError says what is missing."""
    module_name, _, attr = entry.rpartition(":")
    if module_name.endswith(".py"):
        module = _import_file(module_name)
    else:
        module = importlib.import_module(module_name)
    value, walked = module, module_name
    for part in attr.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            public = sorted(n for n in dir(value) if not n.startswith("_"))[:12]
            raise AttributeError(f"{walked} has no attribute {part!r}" +
                                 (f" (it has: {', '.join(public)}, ...)" if public else "")) from None
        walked = f"{walked}.{part}"
    return value


def _import_file(path: str):
    """The module of a .py file, imported as Python would import it from where it lies: a file in a
    package (its folder has __init__.py) by its dotted name, with the package's parent on the import
    path, so that its relative imports work; any other with its own folder on the import path, so
    that it can import a sibling module (`from helpers import ...`) wherever normdiff runs from."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no such file: {path}")
    path = os.path.abspath(path)
    folder, stem = os.path.split(os.path.splitext(path)[0])
    parts = [stem]
    while os.path.isfile(os.path.join(folder, "__init__.py")):
        folder, package = os.path.split(folder)
        parts.insert(0, package)
    _on_path(folder)
    if len(parts) > 1 and all(p.isidentifier() for p in parts):
        return importlib.import_module(".".join(parts))
    name = "normdiff_user_" + stem
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def put_module_on_path(module: str, source: str) -> None:
    """Put the folder under which `source` is module `module`'s file (where the process that
    located it found it on its own import path) first on the import path: a worker starts with no
    current folder on its path (python -P), and a user's module may live there."""
    path = os.path.splitext(os.path.abspath(source))[0]
    if os.path.basename(path) == "__init__":
        path = os.path.dirname(path)
    for _ in module.split("."):
        path = os.path.dirname(path)
    _on_path(path)


def _on_path(folder: str) -> None:
    if folder not in sys.path:
        sys.path.insert(0, folder)
