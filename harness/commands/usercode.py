"""Finding the user's code and deciding how to run it, without importing it or any framework.

A target is `path/to/file.py:NAME` or `package.module:NAME`. Its framework is read from the source
(what it imports, what NAME's class derives from) so the parent process never imports torch or JAX
just to find out; the worker for that framework then imports the code (implementations/user.py).
"""
from __future__ import annotations

import ast
import importlib.util
import os
from dataclasses import dataclass

from normdiff.harness.data.conventions import get_contract
from normdiff.harness.data.errors import UsageError
from normdiff.harness.data.ops import get_op
from normdiff.implementations.entry import Implementation
from normdiff.implementations.frameworks import FRAMEWORKS, get_framework, user_frameworks


class TargetError(UsageError):
    """The target cannot be loaded or called; the message says why and what to do."""


@dataclass(frozen=True)
class Target:
    text: str  # as given: file.py:NAME or package.module:NAME
    source: str  # the file holding NAME
    name: str


def parse_target(text: str) -> Target:
    where, sep, name = text.rpartition(":")
    if not sep or not where or not name:
        raise TargetError(f"target {text!r} is not FILE.py:NAME or package.module:NAME")
    if where.endswith(".py") or os.sep in where:
        if not os.path.isfile(where):
            raise TargetError(f"file not found: {where} (from target {text!r})")
        return Target(f"{os.path.abspath(where)}:{name}", os.path.abspath(where), name)
    try:
        spec = importlib.util.find_spec(where)
    except (ImportError, ValueError) as exc:
        raise TargetError(f"cannot find module {where!r}: {exc}") from None
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        raise TargetError(f"module {where!r} not found (is it installed, or on PYTHONPATH?)")
    return Target(text, spec.origin, name)


def detect_framework(target: Target) -> str:
    """The framework of the target, from the source's imports (each framework record's `detect`
    roots) and NAME's base classes (a `...Module` base is torch's); numpy when nothing says."""
    try:
        tree = ast.parse(open(target.source, encoding="utf-8").read(), target.source)
    except SyntaxError as exc:
        raise TargetError(f"{target.source} does not parse: {exc}") from None
    defined = {n.name: n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    if target.name not in defined and not _assigned(tree, target.name):
        raise TargetError(f"{target.source} defines no {target.name!r}; it defines: "
                          f"{', '.join(sorted(defined)) or 'nothing'}")
    node = defined.get(target.name)
    if isinstance(node, ast.ClassDef) and any("Module" in ast.unparse(b) for b in node.bases):
        return "torch"
    roots = _imported_roots(tree)
    found = [name for name in user_frameworks() if roots & set(FRAMEWORKS[name].detect)]
    if len(found) > 1:
        raise TargetError(f"{target.source} imports {' and '.join(found)}; say which with --framework")
    return found[0] if found else "numpy"


def _assigned(tree, name: str) -> bool:
    return any(isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in n.targets)
               for n in ast.walk(tree))


def _imported_roots(tree) -> set[str]:
    roots = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            roots.add(node.module.split(".")[0])
    return roots


def user_implementation(target: str, op: str, convention: str, framework: str | None = None,
                        name: str | None = None) -> Implementation:
    """The registry entry that runs the user's NAME for (op, convention) in its framework's worker."""
    get_op(op)
    get_contract(op, convention)  # an unknown convention or an undefined pair says so here
    parsed = parse_target(target)
    fw = framework or detect_framework(parsed)
    if not get_framework(fw).user_code:
        raise UsageError(f"framework {fw!r} cannot host Python user code; the ones that can: "
                         f"{', '.join(user_frameworks())}")
    return Implementation(name or parsed.name, "user", fw, "normdiff.implementations.user:make_adapter",
                          frozenset({(op, convention)}), f"{target} ({fw})",
                          params=(("target", parsed.text), ("framework", fw), ("op", op)))
