"""The framework record: everything normdiff needs to know about one array framework.

A framework is one file in this folder defining `FRAMEWORK = Framework(...)`; the folder's
`__init__` finds them, so adding a framework (MLX, keras, onnxruntime, ...) is adding a file (and its
pip extra in pyproject.toml and constraints.txt, which a test checks). A record never imports its
framework at module import: the conversions import it when they are first called, inside the
worker that runs the framework.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np


def _same(value):
    return value


@dataclass(frozen=True)
class Framework:
    """name        what implementations and reports call it ("torch")
    modules     the importable modules it needs; a missing one makes its implementations
                `unavailable` (looked up without importing)
    extra       the pip extra of normdiff that installs it (`pip install 'normdiff[torch]'`)
    distributions  the installed distributions whose versions a report records
    libraries   modules built on it that implementations may require, and their extras
                ({"transformers": "hf"})
    worker      the worker process that runs its implementations (default: its name)
    user_code   whether a user's Python function or class in it can be checked (`check --framework`)
    detect      import roots in a user's source that mean this framework
    array_types  prefixes of `type(value).__module__` that identify its arrays
    to_numpy    its array -> a NumPy array with the same dtype and bits (bf16 through ml_dtypes)
    from_numpy  a NumPy array (bf16 as ml_dtypes) -> its array with exactly those bits
    prepare_module  a user's module instance, made ready for inputs like x (e.g. moved to x's dtype)
    set_weight  (module, attribute, NumPy weight) -> None: load the case's weight into a module
    """

    name: str
    modules: tuple[str, ...] = ()
    extra: str = ""
    distributions: tuple[str, ...] = ()
    libraries: dict[str, str] = field(default_factory=dict)
    worker: str = ""
    user_code: bool = False
    detect: tuple[str, ...] = ()
    array_types: tuple[str, ...] = ()
    to_numpy: Callable = np.asarray
    from_numpy: Callable = _same
    prepare_module: Callable = lambda module, x: module  # noqa: E731
    set_weight: Callable | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "worker", self.worker or self.name)

    def extra_for(self, module: str) -> str:
        """The pip extra that installs `module` (the framework itself, or one of its libraries)."""
        return self.libraries.get(module, self.extra or "all")
