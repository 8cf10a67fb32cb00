"""Deciding which framework runs the user's code, without importing it, and building its registry
entry.

The target itself (what Python resolves: FILE.py:NAME, package.module:NAME, FILE.onnx) is found and
its source parsed once by implementations/target.py (`locate`), which also decides whether it is an
explicit backward and whether it is a class; its framework is decided here, in the parent, from that
parsed source, never importing torch or JAX just to find out:
  1. a module of a framework itself (`mlx.core.fast`, `keras.ops`, `flax.nnx`) is that framework's;
  2. a file that imports triton (or liger_kernel) at top level is Triton's: it launches kernels on
     torch tensors, and a torch module or autograd.Function there is their launcher;
  2b. a class defined in the file is its bases' framework (`nn.Module` with `from torch import nn`);
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
import tempfile
import time
from dataclasses import replace

from normdiff import processes
from normdiff.harness.data import inputs
from normdiff.harness.data.conventions import CONVENTIONS, defining, get_contract
from normdiff.harness.data.errors import UsageError
from normdiff.harness.data.names import resolve
from normdiff.harness.data.ops import OPS, get_op
from normdiff.implementations.calls import names_for, parse
from normdiff.implementations.entry import Implementation
from normdiff.implementations.frameworks import FRAMEWORKS, get_framework, graph_framework, user_frameworks
from normdiff.implementations.target import TargetError, UserTarget, locate

__all__ = ["TargetError", "detect_framework", "identifying_implementation", "locate", "user_code_implementation",
           "user_implementation"]

PROBE_TIMEOUT = 120.0  # seconds the one-call probe may take (it imports the target's frameworks)
PROBE_REPLY_BYTES = 4096  # the end of its output that is read: its answer is the last line


def _framework_of_module(dotted: str) -> str | None:
    """The framework a module belongs to (its root is one of a record's `detect` roots)."""
    root = dotted.split(".")[0]
    return next((name for name in user_frameworks() if root in FRAMEWORKS[name].detect), None)


def detect_framework(target: UserTarget, op: str) -> str:
    """The framework that runs the target (the module docstring says how it is decided)."""
    if target.graph:
        return graph_framework(target.text)
    if target.module and _framework_of_module(target.module):
        return _framework_of_module(target.module)
    if target.source is None:
        return probe(target, op, [n for n in user_frameworks() if n != "numpy"])
    tree = target.tree  # parsed once, when it was located
    imports = _top_level_imports(tree)
    first = target.attr.split(".")[0]
    if not target.module and first not in _top_level_names(tree) | set(imports):
        defined = sorted(_top_level_names(tree))
        raise TargetError(f"{target.source} defines no {first!r}; it defines: {', '.join(defined) or 'nothing'}")
    found = list(dict.fromkeys(f for f in map(_framework_of_module, imports.values()) if f))
    if "triton" in found:  # its kernels are launched on torch tensors: a torch module there is their launcher
        return "triton"
    by_base = _framework_of_class(tree, first, imports)
    if by_base:
        return by_base
    if len(found) > 1:
        return probe(target, op, found)
    return found[0] if found else "numpy"


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


def probe(target: UserTarget, op: str, candidates: list[str]) -> str:
    """Call the target once in a separate process with each candidate framework's arrays (then
    NumPy's); the first that runs and returns its own kind of array wins, else the first that runs.
    A target that runs with none is given the first candidate: the run then says what it raised.

    The probe runs in a session of its own and is waited for by its exit, never by its output's
    end: a thread the code leaves running at import does not hold it (it exits at once once it has
    answered), a child it forked (which keeps the output open) does not either, and whatever it
    left is killed with it, as a worker's is. PROBE_TIMEOUT bounds the whole."""
    installed = [c for c in candidates if FRAMEWORKS[c].modules and
                 all(importlib.util.find_spec(m) is not None for m in FRAMEWORKS[c].modules)]
    order = installed + ["numpy"]
    request = json.dumps({"target": target.text, "op": op, "candidates": order, "module": target.module,
                          "source": target.source})
    code = "import sys; from normdiff.implementations.user import probe_main; probe_main(sys.argv[1])"
    with tempfile.TemporaryFile(prefix="normdiff-probe-") as out:  # unlinked at once: nothing is left
        # -P: as in a worker, no numpy.py or normdiff.py in the current folder is imported
        proc = subprocess.Popen([sys.executable, "-P", "-c", code, request], stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            deadline = time.monotonic() + PROBE_TIMEOUT
            while not processes.exited(proc.pid) and time.monotonic() < deadline:
                time.sleep(0.02)
        finally:  # its group and everything below it, whatever the code started (collected after)
            processes.kill_tree(proc.pid)
            proc.wait()
        out.seek(max(0, out.seek(0, os.SEEK_END) - PROBE_REPLY_BYTES))
        lines = out.read().decode(errors="replace").strip().splitlines()
    try:
        chosen = json.loads(lines[-1])["framework"] if proc.returncode == 0 and lines else None
    except (json.JSONDecodeError, KeyError, TypeError):
        chosen = None
    return chosen if chosen in FRAMEWORKS else order[0]


def user_implementation(target: str, op: str, convention: str, framework: str | None = None,
                        name: str | None = None, call: str = "", init: str = "",
                        weight_attr: str = "") -> Implementation:
    """The registry entry that runs the user's target for (op, convention) in its framework's
    worker. The templates are parsed here, so a malformed --call or --init stops before any work.
    Every argument is checked first (UsageError naming it): a target is a string or a pathlib.Path,
    names are read as the CLI reads them ('RMS_norm' is rms_norm)."""
    target = inputs.path(target, "target", "FILE.py:NAME, package.module:NAME or FILE.onnx")
    op = resolve("op", op, OPS, what="op")
    convention = resolve("convention", convention, CONVENTIONS, "normdiff list conventions", what="convention")
    if framework is not None:
        framework = resolve("framework", framework, user_frameworks(), what="framework")
    if name is not None and (not isinstance(name, str) or not name.strip()):
        raise UsageError(f"name must be None or the name its report rows carry (a string); got {name!r}")
    for keyword, value in (("call", call), ("init", init), ("weight_attr", weight_attr)):
        if not isinstance(value, str):
            raise UsageError(f"{keyword} must be a string (a template such as 'f(x, weight, eps=eps)', or '' for "
                             f"none); got {value!r} ({type(value).__name__})")
    record = get_op(op)
    get_contract(op, convention)  # an unknown convention or an undefined pair says so here
    for template in (call, init):
        if template:  # a forward's names, or an explicit backward's (its further upstream gradients)
            parse(template, names_for(record) | names_for(record, backward=True))
    located = locate(target, framework=framework or "", forced=bool(framework), op=op, call=call, init=init,
                     weight_attr=weight_attr)
    user = located if framework else replace(located, framework=detect_framework(located, op))
    if not get_framework(user.framework).user_code:
        raise UsageError(f"framework {user.framework!r} cannot host Python user code; the ones that can: "
                         f"{', '.join(user_frameworks())}")
    how = "; ".join(f"{flag} {value}" for flag, value in (("call", call), ("init", init)) if value)
    passes = user.passes
    what = "explicit backward" if passes == ("backward",) else user.framework
    return Implementation(name or user.name, "user", user.framework,
                          "normdiff.implementations.user:make_adapter" if "forward" in passes else "",
                          frozenset({(op, convention)}), f"{user.given} ({what}{'; ' + how if how else ''})",
                          replay=user.replay, target=user,
                          backward="normdiff.implementations.user:make_backward_adapter" if "backward" in passes else "")


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


def identifying_implementation(spec: dict, op: str, timeout: float, passes=("forward",)):
    """A user's target or command as one Implementation of every convention that defines `op`
    (`normdiff check` without --convention): its worker loads it once, and the cases of several
    conventions whose inputs, and what its call reads of their contracts, are the same make one call
    (entry.py `shares_calls`). A command is told no one convention: each call's metadata names those
    whose contract it is (it is told the whole contract, so only cases of one contract share a call)."""
    conventions = defining(op)
    impl = user_code_implementation(spec, op, conventions[0], timeout, passes=passes)
    pairs = frozenset((op, name) for name in conventions)
    if not spec.get("command"):
        return replace(impl, op_conventions=pairs, shares_calls=True)
    params = tuple((k, None if k == "convention" else v) for k, v in impl.params)
    return replace(impl, op_conventions=pairs, shares_calls=True, params=params)
