"""A user's target: the code `normdiff check`, `run --with`, `fuzz --with`, `model --norm`, `repro
--target` and the pytest plugin run, as one typed value (`UserTarget`) that its Implementation
carries (entry.py `target`), so that nothing reads it back by key.

A target is what Python resolves: `package.module:attr.path` (imported, then walked with getattr:
`mlx.core.fast:rms_norm`, `keras.ops:rms_normalization`, `keras.layers:RMSNormalization`), a file
`path/to/file.py:NAME` (NAME may be dotted too), or an ONNX graph `path/to/model.onnx`. `locate`
finds it without importing anything of it, reads its .py file and parses it with `ast`, once: the
commands decide its framework from that tree (harness/commands/usercode.py), and the facts read from
it are decided here, once, for every reader: whether it is an explicit backward (a function whose
first parameter is dy) and whether it is a class. The tree stays in the process that located the
target: a worker receives the target pickled without it, the facts decided from it included.
"""
from __future__ import annotations

import ast
import importlib.util
import inspect
import os
from dataclasses import dataclass, field

from normdiff.harness.data import inputs
from normdiff.harness.data.errors import UsageError
from normdiff.implementations import calls
from normdiff.implementations.frameworks import FRAMEWORKS, graph_framework

# the first parameter names that make a function an explicit backward (`rms_norm_backward(dy, ...)`)
UPSTREAM_NAMES = ("dy", "grad_output", "grad_out", "dout", "grad_y", "dy_")


class TargetError(UsageError):
    """The target cannot be loaded or called; the message says why and what to do."""


@dataclass(frozen=True)
class UserTarget:
    text: str  # as the worker loads it: /abs/file.py:attr.path, package.module:attr.path, /abs/model.onnx
    given: str  # as the user wrote it (what a repro command repeats)
    module: str  # the module's dotted name ("" for a file)
    attr: str  # the attribute path ("" for a graph file)
    source: str | None  # the .py file whose source is read (None: compiled, or a graph)
    # How it runs: the framework that runs it ("" until the commands decide it), whether --framework
    # forced it, the op, the --call and --init templates and --weight-attr.
    framework: str = ""
    forced: bool = False
    op: str = ""
    call: str = ""
    init: str = ""
    weight_attr: str = ""
    # What `locate` derived, once: the parsed source (None for a graph or compiled code; never
    # pickled, so never sent to a worker), whether it is an explicit backward (None: its source
    # does not say, as for compiled or re-exported code: its loaded signature decides, `backward_of`)
    # and whether it is a class.
    tree: ast.Module | None = field(default=None, compare=False, repr=False)
    explicit_backward: bool | None = None
    is_class: bool = False

    @property
    def name(self) -> str:
        """What reports call it: a file's function by its name, a library's by module:name (in a run
        beside built-ins, `rms_norm` alone would not say whose), a graph file by its file name."""
        if not self.attr:
            return os.path.basename(self.text)
        return f"{self.module}:{self.attr}" if self.module else self.attr

    @property
    def graph(self) -> bool:
        return not self.attr

    @property
    def shown(self) -> str:
        """What an adapter's messages call it: its attribute, or a graph's path."""
        return self.text.rpartition(":")[2] or self.text

    @property
    def passes(self) -> tuple[str, ...]:
        """The passes it runs: an explicit backward the backward only; a forward in a framework
        normdiff differentiates (torch, JAX) both; any other forward the forward only. A target
        whose source does not say is taken for a forward (its worker says so if its first
        parameter turns out to be dy)."""
        if self.explicit_backward:
            return ("backward",)
        fw = FRAMEWORKS[self.framework]
        if fw.differentiate is None or (self.is_class and not fw.differentiates_modules):
            return ("forward",)
        return ("forward", "backward")

    @property
    def params(self) -> tuple:
        """Its worker factory's keyword arguments as plain values (what a repro script passes
        make_adapter, and what identifies it in a fuzz database's folder name)."""
        return (("target", self.text), ("framework", self.framework), ("op", self.op), ("call", self.call),
                ("init", self.init), ("weight_attr", self.weight_attr), ("forced", self.forced))

    @property
    def replay(self) -> tuple[str, ...]:
        """The arguments that make `normdiff repro` rebuild it."""
        replay = ["--target", self.given] + (["--framework", self.framework] if self.forced else [])
        for flag, value in (("--call", self.call), ("--init", self.init), ("--weight-attr", self.weight_attr)):
            replay += [flag, value] if value else []
        return tuple(replay)

    def backward_of(self, loaded) -> bool:
        """Whether the loaded target is an explicit backward: what its source said when it said
        (`explicit_backward`); else what the loaded object's signature says (compiled code, a
        re-export, a name bound otherwise than by a top-level def)."""
        if self.explicit_backward is not None:
            return self.explicit_backward
        params = calls.parameters(loaded) if callable(loaded) and not inspect.isclass(loaded) else None
        return bool(params) and params[0].name in UPSTREAM_NAMES

    def __getstate__(self) -> dict:
        return {**self.__dict__, "tree": None}  # the facts travel; the tree stays where it was parsed


def locate(text: str, **how) -> UserTarget:
    """The target `text` names, found without importing anything of it, its source parsed once and
    what that says decided; `how`: its fields after `source` (framework, forced, op, call, init,
    weight_attr). TargetError says what is wrong with it."""
    if graph_framework(text):
        _check_file(text, f"file not found: {text}", "give the graph's file")
        return _located(os.path.abspath(text), text, "", "", None, how)
    where, sep, attr = text.rpartition(":")
    if os.path.isdir(text if not sep else where) and not (sep and where.isidentifier() and _found(where)):
        folder = text if not sep else where
        raise TargetError(f"target {text!r}: {folder} is a folder, not a Python file; give FILE.py:NAME (a file in "
                          "it), or package.module:NAME with the folder that holds the package on PYTHONPATH")
    if not sep or not where or not attr or not all(part.isidentifier() for part in attr.split(".")):
        raise TargetError(f"target {text!r} is not FILE.py:NAME, package.module:NAME or FILE.onnx")
    if where.endswith(".py") or os.sep in where:
        _check_file(where, f"file not found: {where} (from target {text!r})", "give a Python file")
        path = os.path.abspath(where)
        return _located(f"{path}:{attr}", text, "", attr, path, how)
    return _located(text, text, where, attr, _module_source(where), how)


def _located(text: str, given: str, module: str, attr: str, source: str | None, how: dict) -> UserTarget:
    """The target with its source parsed (the one parse) and what the source says decided: a
    top-level function of the name whose first parameter is dy is an explicit backward; one with
    another first parameter, or a class, is not; a library's capitalised name (RMSNorm) is taken
    for a class unless its source says otherwise. Where the source defines no function or class of
    the name (or the name is dotted), whether it is a backward is left to its loaded signature."""
    tree = _parse(source) if source is not None else None
    explicit, is_class = None, attr.rpartition(".")[2][:1].isupper()
    if tree is not None and attr and "." not in attr:
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == attr:
                first = (node.args.posonlyargs + node.args.args)[:1]
                if first and first[0].arg in UPSTREAM_NAMES:
                    explicit = True
                    break
                explicit, is_class = False, False
            elif isinstance(node, ast.ClassDef) and node.name == attr:
                explicit, is_class = False, True
    return UserTarget(text, given, module, attr, source, **how, tree=tree, explicit_backward=explicit,
                      is_class=is_class)


def _module_source(module: str) -> str | None:
    """The .py file of `module`, found without importing anything of it (find_spec of a dotted name
    would import its parents: keras, mlx); None for a compiled module or a name only an import
    makes (a lazy re-export)."""
    root, *parts = module.split(".")
    try:
        spec = importlib.util.find_spec(root)
    except (ImportError, ValueError) as exc:
        raise TargetError(f"cannot find module {root!r}: {exc}") from None
    if spec is None:
        extra = next((fw.extra_for(root) for fw in FRAMEWORKS.values() if root in fw.libraries), "")
        raise TargetError(f"module {root!r} not found (is it installed, or on PYTHONPATH?)"
                          + (f"; install it with `pip install 'normdiff[{extra}]'`" if extra else ""))
    origin, places = spec.origin, list(spec.submodule_search_locations or [])
    for part in parts:
        found = [p for place in places for p in (os.path.join(place, part, "__init__.py"),
                                                  os.path.join(place, f"{part}.py")) if os.path.isfile(p)]
        if not found:
            return None
        origin, places = found[0], [os.path.dirname(found[0])] if found[0].endswith("__init__.py") else []
    return origin if origin and origin.endswith(".py") else None


def _found(module: str) -> bool:
    """Whether Python finds the top-level `module` as a module or a package on its path. A folder
    without __init__.py (a namespace package) does not count: it defines nothing of its own, so
    `folder:NAME` names nothing in it."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return False
    return spec is not None and spec.origin is not None


def _check_file(path: str, missing: str, fix: str) -> None:
    """A target's file: `missing` when there is none; a pipe, a device or a folder in its place is
    named as what it is (reading one would block, or never end)."""
    if not os.path.lexists(path):
        raise TargetError(missing)
    try:
        inputs.check_file(path, fix)
    except inputs.InputError as exc:
        raise TargetError(str(exc)) from None


def _parse(path: str) -> ast.Module:
    try:  # a regular file of at most 64 MiB, opened without blocking; bytes: its coding line is honoured
        return ast.parse(inputs.read_bytes(path, "source", "give a Python file"), path)
    except inputs.InputError as exc:
        raise TargetError(str(exc)) from None
    except (SyntaxError, ValueError, RecursionError) as exc:
        raise TargetError(f"{path} cannot be read as Python: {exc}") from None
