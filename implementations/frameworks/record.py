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


def _nothing(*args):
    return None


def plain_weights(module) -> dict:
    """The array attributes of a module: name -> shape (for frameworks without parameter lists)."""
    return {name: tuple(np.shape(v)) for name, v in vars(module).items()
            if hasattr(v, "shape") and hasattr(v, "dtype") and not name.startswith("_")}


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
    strides     whether its arrays have strides and from_numpy keeps NumPy's: only then does a case
                in a non-contiguous layout (cases/layouts.py) reach its code as laid out
    setup       () -> None: what must hold before its first import (an environment variable)
    missing     () -> a reason it cannot run here beyond a missing module (a compiler), or None
    A user's module class (`check CLASS`):
    module_types  prefixes of the modules of a class's bases that make it this framework's module
    constructor  cls -> what builds its modules: the class itself, or a stand-in that builds it
                where its framework allows (haiku: inside hk.transform, at `build`)
    init_extras  cls -> extra constructor arguments its modules need (flax nnx: rngs)
    prepare_module  (module, x) -> the module, ready for inputs like x (e.g. moved to x's dtype)
    build       (module, x) -> None: whatever must run before its weights exist (keras: build)
    weights     module -> {name: shape} of its parameters, where the gain is looked for
    set_weight  (module, name, NumPy weight) -> None: load the case's weight, bits kept
    differentiate  (forward, arrays, dy, params) -> {name: gradient}: J^T dy of forward(leaves) (a
                function of {name: its array}) with respect to each of `arrays` (NumPy, made
                the framework's differentiable arrays here) and of `params` (name -> a module's
                parameter, already holding the case's bits); None: no backward for user code
    differentiates_modules  whether it differentiates a module class too (not flax nnx's, yet)
    A user's graph (ONNX):
    graph_files  the file suffixes of its graphs (".onnx"): such a file is a target by itself
    load_graph  (path or object) -> a runnable graph (an InferenceSession), or None
    graph_inputs  graph -> {input name: the NumPy dtype it takes, or None}
    run_graph   (graph, {input name: NumPy array}) -> the first output, as NumPy
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
    strides: bool = False
    setup: Callable = _nothing
    missing: Callable = _nothing
    module_types: tuple[str, ...] = ()
    constructor: Callable = _same
    init_extras: Callable = lambda cls: {}  # noqa: E731
    prepare_module: Callable = lambda module, x: module  # noqa: E731
    build: Callable = _nothing
    weights: Callable = plain_weights
    set_weight: Callable | None = None  # None: the attribute is replaced by from_numpy(weight)
    differentiate: Callable | None = None
    differentiates_modules: bool = True  # whether `differentiate` takes a module class's parameters
    graph_files: tuple[str, ...] = ()
    load_graph: Callable | None = None
    graph_inputs: Callable | None = None
    run_graph: Callable | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "worker", self.worker or self.name)

    def extra_for(self, module: str) -> str:
        """The pip extra that installs `module` (the framework itself, or one of its libraries)."""
        return self.libraries.get(module, self.extra or "all")
