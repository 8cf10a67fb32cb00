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

from normdiff.harness.contracts import OPS, get_contract
from normdiff.harness.registry import FRAMEWORKS, Implementation


class TargetError(ValueError):
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
    """numpy, torch or jax, from the source's imports and NAME's base classes."""
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
    found = [fw for fw, names in (("torch", {"torch"}), ("jax", {"jax", "flax"})) if roots & names]
    if len(found) > 1:
        raise TargetError(f"{target.source} imports both torch and JAX; say which with --framework")
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
    if op not in OPS:
        raise ValueError(f"unknown op {op!r}; known: {', '.join(OPS)}")
    get_contract(op, convention)  # an unknown convention or an undefined pair says so here
    parsed = parse_target(target)
    fw = framework or detect_framework(parsed)
    if fw not in FRAMEWORKS:
        raise ValueError(f"unknown framework {fw!r}; known: {', '.join(FRAMEWORKS)}")
    return Implementation(name or parsed.name, "user", fw, "normdiff.implementations.user:make_adapter",
                          frozenset({(op, convention)}), f"{target} ({fw})",
                          params=(("target", parsed.text), ("framework", fw), ("op", op)))
