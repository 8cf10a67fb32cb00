"""The layers only point down, and no module imports itself round a cycle.

Every module's imports are read with `ast`, those inside functions included (an import that runs
late still ties two modules together); only `if TYPE_CHECKING:` blocks are left out, since they never
run. The layers, bottom first:

    base      normdiff (the package root: version, files, clock, text)
    data      normdiff.harness (its __init__), normdiff.harness.data
    cases     normdiff.cases, normdiff.strategies (Hypothesis strategies composed from the case model)
    impls     normdiff.implementations
    engine    normdiff.harness.engine
    analysis  normdiff.harness.analysis (diagnosis, fitting, backward diagnosis: which bug outputs show)
    reports   normdiff.reports
    commands  normdiff.harness.commands, normdiff.harness.api

A module may import its own layer or one below. The registries that find their members by listing a
folder (implementations/frameworks/, reports/views/) import them with importlib, which is not an
import statement: the members import the record they are made of (frameworks/record.py,
reports/view.py), never the registry, so nothing here is a cycle at run time either.
"""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"normdiff": "normdiff", "harness": "normdiff.harness", "cases": "normdiff.cases",
           "implementations": "normdiff.implementations", "reports": "normdiff.reports"}
LAYERS = [  # (name, module prefixes), bottom first; the longest matching prefix decides
    ("base", ("normdiff",)),
    ("data", ("normdiff.harness", "normdiff.harness.data")),
    ("cases", ("normdiff.cases", "normdiff.strategies")),
    ("impls", ("normdiff.implementations",)),
    ("engine", ("normdiff.harness.engine",)),
    ("analysis", ("normdiff.harness.analysis",)),
    ("reports", ("normdiff.reports",)),
    ("commands", ("normdiff.harness.commands", "normdiff.harness.api")),
]


def sources() -> dict[str, str]:
    """module name -> its source, for every module of the package."""
    found = {}
    for folder, package in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join([package, *parts])] = path.read_text(encoding="utf-8")
    return found


def layer_of(module: str) -> int:
    best, depth = None, -1
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and prefix.count(".") > depth:
                best, depth = index, prefix.count(".")
    return best


def _runtime_nodes(tree: ast.AST):
    """Every node but those under `if TYPE_CHECKING:`."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            stack.extend(node.orelse)
            continue
        yield node
        stack.extend(ast.iter_child_nodes(node))


def imports(module: str, source: str, known: set[str]) -> set[str]:
    """The package's modules `module` imports (a `from X import Y` of a submodule Y counts as X.Y)."""
    found = set()
    for node in _runtime_nodes(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            assert not node.level, f"{module}: relative import (the package imports absolutely)"
            base = node.module or ""
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        found |= {n for n in names if n in known and n != module}
    return found


def graph(mods: dict[str, str]) -> dict[str, set[str]]:
    known = set(mods)
    return {m: imports(m, src, known) for m, src in mods.items()}


def upward(edges: dict[str, set[str]]) -> list[str]:
    return sorted(f"{a} ({LAYERS[layer_of(a)][0]}) imports {b} ({LAYERS[layer_of(b)][0]})"
                  for a, targets in edges.items() for b in targets if layer_of(b) > layer_of(a))


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10000))
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_every_module_has_a_layer():
    assert [m for m in sources() if layer_of(m) is None] == []


def test_imports_only_point_down_and_never_cycle():
    edges = graph(sources())
    # the walk really reads imports, top-level and inside functions (explain imports worst late)
    assert "normdiff.harness.engine.judge" in edges["normdiff.harness.engine.runner"]
    assert "normdiff.reports.worst" in edges["normdiff.harness.commands.explain"]
    assert upward(edges) == []
    assert cycles(edges) == []


def test_a_planted_upward_import_and_a_planted_cycle_are_caught():
    mods = sources()
    planted = dict(mods)
    planted["normdiff.harness.data.ops"] += "\n\ndef _late():\n    from normdiff.reports import render  # noqa\n"
    planted["normdiff.harness.engine.pool"] += "\nimport normdiff.harness.engine.runner  # noqa\n"
    edges = graph(planted)
    assert upward(edges) == ["normdiff.harness.data.ops (data) imports normdiff.reports.render (reports)"]
    assert ["normdiff.harness.engine.pool", "normdiff.harness.engine.runner"] in cycles(edges)
    # an import only a type checker sees is no dependency
    typed = dict(mods)
    typed["normdiff.harness.data.ops"] += "\nif TYPE_CHECKING:\n    from normdiff.reports import render  # noqa\n"
    assert upward(graph(typed)) == []


@pytest.mark.parametrize("module", ["normdiff.harness.api", "normdiff.harness.engine.api"])
def test_importing_the_run_api_loads_no_pandas_and_no_framework(module):
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c", f"import {module}"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    loaded = {line.split("|")[-1].strip().split(".")[0] for line in proc.stderr.splitlines() if "|" in line}
    assert module.split(".")[0] in loaded or "normdiff" in loaded  # importtime really listed modules
    assert not loaded & {"pandas", "torch", "jax", "transformers", "matplotlib"}, sorted(loaded)
