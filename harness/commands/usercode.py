"""Finding the user's code and deciding which framework runs it, without importing it.

A target is what Python resolves: `package.module:attr.path` (imported, then walked with getattr:
`mlx.core.fast:rms_norm`, `keras.ops:rms_normalization`, `keras.layers:RMSNormalization`), a file
`path/to/file.py:NAME` (NAME may be dotted too), or an ONNX graph `path/to/model.onnx`.

Its framework is decided here, in the parent, which never imports torch or JAX just to find out:
  1. a module of a framework itself (`mlx.core.fast`, `keras.ops`, `flax.nnx`) is that framework's;
  2. a class defined in the file is its bases' framework (`nn.Module` with `from torch import nn`);
  3. otherwise the frameworks the file imports *at top level* (an import inside a function is lazy
     and says nothing about what the target takes); none means NumPy;
  4. when the file imports several, or the module is compiled, the target is called once in a
     probe process (implementations/user.py: probe) and what it takes and returns decides.
`--framework` forces it; the worker for that framework then imports the code.
"""
from __future__ import annotations

import ast
import importlib.util
import json
import os
import subprocess
import sys
from dataclasses import dataclass

from normdiff.harness.data.conventions import get_contract
from normdiff.harness.data.errors import UsageError
from normdiff.harness.data.ops import get_op
from normdiff.implementations.calls import names_for, parse
from normdiff.implementations.entry import Implementation
from normdiff.implementations.frameworks import FRAMEWORKS, get_framework, graph_framework, user_frameworks

PROBE_TIMEOUT = 120.0  # seconds the one-call probe may take (it imports the target's frameworks)


class TargetError(UsageError):
    """The target cannot be loaded or called; the message says why and what to do."""


@dataclass(frozen=True)
class Target:
    text: str  # as the worker loads it: /abs/file.py:attr.path, package.module:attr.path, /abs/model.onnx
    given: str  # as the user wrote it (what a repro command repeats)
    module: str  # the module's dotted name ("" for a file)
    attr: str  # the attribute path ("" for a graph file)
    source: str | None  # the .py file whose imports are read (None: compiled, or a graph)

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


def parse_target(text: str) -> Target:
    if graph_framework(text):
        if not os.path.isfile(text):
            raise TargetError(f"file not found: {text}")
        return Target(os.path.abspath(text), text, "", "", None)
    where, sep, attr = text.rpartition(":")
    if not sep or not where or not attr or not all(part.isidentifier() for part in attr.split(".")):
        raise TargetError(f"target {text!r} is not FILE.py:NAME, package.module:NAME or FILE.onnx")
    if where.endswith(".py") or os.sep in where:
        if not os.path.isfile(where):
            raise TargetError(f"file not found: {where} (from target {text!r})")
        path = os.path.abspath(where)
        return Target(f"{path}:{attr}", text, "", attr, path)
    return Target(text, text, where, attr, _module_source(where))


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
        raise TargetError(f"module {root!r} not found (is it installed, or on PYTHONPATH?)")
    origin, places = spec.origin, list(spec.submodule_search_locations or [])
    for part in parts:
        found = [p for place in places for p in (os.path.join(place, part, "__init__.py"),
                                                  os.path.join(place, f"{part}.py")) if os.path.isfile(p)]
        if not found:
            return None
        origin, places = found[0], [os.path.dirname(found[0])] if found[0].endswith("__init__.py") else []
    return origin if origin and origin.endswith(".py") else None


def _framework_of_module(dotted: str) -> str | None:
    """The framework a module belongs to (its root is one of a record's `detect` roots)."""
    root = dotted.split(".")[0]
    return next((name for name in user_frameworks() if root in FRAMEWORKS[name].detect), None)


def detect_framework(target: Target, op: str) -> str:
    """The framework that runs the target (the module docstring says how it is decided)."""
    if target.graph:
        return graph_framework(target.text)
    if target.module and _framework_of_module(target.module):
        return _framework_of_module(target.module)
    if target.source is None:
        return probe(target, op, [n for n in user_frameworks() if n != "numpy"])
    tree = _parse(target.source)
    imports = _top_level_imports(tree)
    first = target.attr.split(".")[0]
    if not target.module and first not in _top_level_names(tree) | set(imports):
        defined = sorted(_top_level_names(tree))
        raise TargetError(f"{target.source} defines no {first!r}; it defines: {', '.join(defined) or 'nothing'}")
    by_base = _framework_of_class(tree, first, imports)
    if by_base:
        return by_base
    found = list(dict.fromkeys(f for f in map(_framework_of_module, imports.values()) if f))
    if len(found) > 1:
        return probe(target, op, found)
    return found[0] if found else "numpy"


def _parse(path: str) -> ast.Module:
    try:
        return ast.parse(open(path, encoding="utf-8").read(), path)
    except (OSError, SyntaxError, ValueError) as exc:
        raise TargetError(f"{path} cannot be read as Python: {exc}") from None


def _module_level(tree: ast.Module):
    """The statements that run at import: the module body and the bodies of its top-level if / try /
    with blocks, never a function's or a class's."""
    pending = list(tree.body)
    while pending:
        node = pending.pop(0)
        yield node
        if isinstance(node, (ast.If, ast.Try, ast.With)):
            for name in ("body", "orelse", "finalbody"):
                pending += getattr(node, name, [])
            pending += [s for h in getattr(node, "handlers", []) for s in h.body]


def _top_level_imports(tree: ast.Module) -> dict[str, str]:
    """alias -> the dotted module (or module.attribute) it names, for the imports that run at import."""
    found = {}
    for node in _module_level(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                found[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                found[a.asname or a.name] = f"{node.module}.{a.name}"
    return found


def _top_level_names(tree: ast.Module) -> set[str]:
    names = set()
    for node in _module_level(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return names


def _framework_of_class(tree: ast.Module, name: str, imports: dict[str, str]) -> str | None:
    """A class's framework from its bases, each resolved through the file's imports
    (`nn.Module` with `from torch import nn` is torch.nn.Module)."""
    node = next((n for n in _module_level(tree) if isinstance(n, ast.ClassDef) and n.name == name), None)
    for base in node.bases if node is not None else ():
        head, _, rest = ast.unparse(base).partition(".")
        dotted = imports.get(head, head) + (f".{rest}" if rest else "")
        for fw in user_frameworks():
            if FRAMEWORKS[fw].module_types and dotted.startswith(FRAMEWORKS[fw].module_types):
                return fw
        found = _framework_of_module(dotted) if head in imports else None
        if found:
            return found
    return None


def probe(target: Target, op: str, candidates: list[str]) -> str:
    """Call the target once in a separate process with each candidate framework's arrays (then
    NumPy's); the first that runs and returns its own kind of array wins, else the first that runs.
    A target that runs with none is given the first candidate: the run then says what it raised."""
    installed = [c for c in candidates if FRAMEWORKS[c].modules and
                 all(importlib.util.find_spec(m) is not None for m in FRAMEWORKS[c].modules)]
    order = installed + ["numpy"]
    request = json.dumps({"target": target.text, "op": op, "candidates": order})
    code = "import sys; from normdiff.implementations.user import probe_main; probe_main(sys.argv[1])"
    try:
        proc = subprocess.run([sys.executable, "-c", code, request], capture_output=True, text=True,
                              timeout=PROBE_TIMEOUT)
        lines = proc.stdout.strip().splitlines()
        chosen = json.loads(lines[-1])["framework"] if proc.returncode == 0 and lines else None
    except (subprocess.TimeoutExpired, json.JSONDecodeError, KeyError):
        chosen = None
    return chosen if chosen in FRAMEWORKS else order[0]


def user_implementation(target: str, op: str, convention: str, framework: str | None = None,
                        name: str | None = None, call: str = "", init: str = "",
                        weight_attr: str = "") -> Implementation:
    """The registry entry that runs the user's target for (op, convention) in its framework's
    worker. The templates are parsed here, so a malformed --call or --init stops before any work."""
    record = get_op(op)
    get_contract(op, convention)  # an unknown convention or an undefined pair says so here
    for template in (call, init):
        if template:  # a forward's names, or an explicit backward's (its further upstream gradients)
            parse(template, names_for(record) | names_for(record, backward=True))
    parsed = parse_target(target)
    fw = framework or detect_framework(parsed, op)
    if not get_framework(fw).user_code:
        raise UsageError(f"framework {fw!r} cannot host Python user code; the ones that can: "
                         f"{', '.join(user_frameworks())}")
    replay = ["--target", parsed.given] + (["--framework", fw] if framework else [])
    for flag, value in (("--call", call), ("--init", init), ("--weight-attr", weight_attr)):
        replay += [flag, value] if value else []
    how = "; ".join(f"{flag} {value}" for flag, value in (("call", call), ("init", init)) if value)
    passes = target_passes(parsed, fw)
    what = "explicit backward" if passes == ("backward",) else fw
    return Implementation(name or parsed.name, "user", fw,
                          "normdiff.implementations.user:make_adapter" if "forward" in passes else "",
                          frozenset({(op, convention)}), f"{parsed.given} ({what}{'; ' + how if how else ''})",
                          params=(("target", parsed.text), ("framework", fw), ("op", op), ("call", call),
                                  ("init", init), ("weight_attr", weight_attr), ("forced", bool(framework))),
                          replay=tuple(replay),
                          backward="normdiff.implementations.user:make_backward_adapter" if "backward" in passes else "")


def target_passes(target: Target, framework: str) -> tuple[str, ...]:
    """The passes a target runs: an explicit backward (a function whose first parameter is dy, read
    from its source) the backward only; a forward in a framework normdiff differentiates (torch,
    JAX) both; any other forward the forward only. A compiled or re-exported target is taken for a
    forward (its worker says so if its first parameter turns out to be dy)."""
    from normdiff.implementations.user import UPSTREAM_NAMES

    fw = FRAMEWORKS[framework]
    is_class = target.attr.rpartition(".")[2][:1].isupper()  # a library's class: RMSNorm, RMSNormalization
    if target.source is not None and target.attr and "." not in target.attr:
        for node in _parse(target.source).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == target.attr:
                first = (node.args.posonlyargs + node.args.args)[:1]
                if first and first[0].arg in UPSTREAM_NAMES:
                    return ("backward",)
                is_class = False
            elif isinstance(node, ast.ClassDef) and node.name == target.attr:
                is_class = True
    if fw.differentiate is None or (is_class and not fw.differentiates_modules):
        return ("forward",)
    return ("forward", "backward")


def user_code_implementation(spec: dict, op: str, convention: str, timeout: float, name: str | None = None,
                             passes=("forward",)):
    """A user's target or command as an Implementation; a command that cannot start is refused
    here, before any case runs. `passes`: those a command implements (a Python target's come from
    its code)."""
    if spec.get("command"):
        from normdiff.implementations.command import command_implementation, command_problem

        for flag in ("call", "init", "framework", "weight_attr"):
            if spec.get(flag):
                raise UsageError(f"--{flag.replace('_', '-')} applies to a Python target, not to --command")
        problem = command_problem(spec["command"])
        if problem:
            raise TargetError(problem)
        return command_implementation(spec["command"], op, convention, name=name, timeout=timeout, passes=passes)
    return user_implementation(spec["target"], op, convention, spec.get("framework"), name=name,
                               call=spec.get("call") or "", init=spec.get("init") or "",
                               weight_attr=spec.get("weight_attr") or "")
