"""The layers only point down, and no module imports itself round a cycle.

Every module's imports are read with `ast`, those inside functions included (an import that runs
late still ties two modules together); only `if TYPE_CHECKING:` blocks are left out, since they never
run. The layers, bottom first:

    base      normdiff (the package root: version, files, clock, text, wording)
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

Reading the source cannot see an import made through a callable handed down: an upper layer's
function, given to a lower one and called there, imports the upper layer from inside the lower one's
call. So the imports are also watched at run time (`WATCH`): a real run and a real check, in a fresh
process, with a finder first on sys.meta_path that sees every normdiff module as it is first imported
and the stack that imports it. A frame of a lower layer's module on that stack is an upward import,
whichever function made it. (What runs in other processes, the workers, is not watched.)
"""
from __future__ import annotations

import ast
import json
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
    assert "normdiff.harness.analysis.diagnosis" in edges["normdiff.harness.commands.check"]
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


# Run in a fresh process (argv: the tests folder, where to write what it found, then the scenario's
# own arguments), so the finder sees every first import and leaves no hook behind in this one.
WATCH = """
import json, sys, threading
sys.path.insert(0, sys.argv[1])
from test_layers import LAYERS, layer_of


def ours(name):
    return name == "normdiff" or name.startswith("normdiff.")


def note(what, text):  # a line at once: a forked child (the report's page) writes its own, then ends
    with open(sys.argv[2], "a") as out:
        out.write(json.dumps([what, text]) + "\\n")


def callers(frame):  # the module of each frame from `frame` out; on a thread, then those of the
    # stack that started it (a callable handed to a thread runs on behalf of whoever started it)
    while frame is not None:
        yield frame.f_globals.get("__name__") or ""
        frame = frame.f_back
    yield from getattr(threading.current_thread(), "started_by", ())


start = threading.Thread.start


def started(thread):
    thread.started_by = list(callers(sys._getframe(1)))
    return start(thread)


class Watch:
    # first on sys.meta_path: asked about every module not yet imported; it finds none itself
    def find_spec(self, fullname, path=None, target=None):
        if ours(fullname):
            note("seen", fullname)
            wanted = layer_of(fullname)
            for name in callers(sys._getframe(1)):
                if ours(name) and layer_of(name) < wanted:  # the nearest such frame: whose call it was
                    note("upward", f"{name} ({LAYERS[layer_of(name)][0]}) imports {fullname} "
                                   f"({LAYERS[wanted][0]}) at run time")
                    break
        return None


threading.Thread.start = started
sys.meta_path.insert(0, Watch())
exec(compile(SCENARIO, "scenario", "exec"))
"""

SCENARIOS = {
    # the Python API and the CLI's run (it writes every report file) on a small suite, NumPy only
    "run": """
import io
from normdiff.cases import suites
from normdiff.harness import api
from normdiff.harness.commands import cli
from normdiff.reports.progress import progress_printer

class Terminal(io.StringIO):
    def isatty(self):
        return True


# with a progress bar: a reports-layer function the engine calls as outcomes arrive
report = api.run_suite(suites.load(sys.argv[3]), api.select(["numpy"]), progress=progress_printer(Terminal()))
assert len(report.results), "nothing ran"
assert cli.main(["run", "--suite", sys.argv[3], "-i", "numpy", "--out", sys.argv[4], "-q"]) == 0
""",
    # normdiff check on a NumPy function with a bug: the run, then the diagnosis (analysis layer)
    "check": """
from normdiff.harness.commands import cli

code = cli.main(["check", sys.argv[5], "--op", "rms_norm", "--convention", "qwen3", "--suite", sys.argv[3],
                 "--json"])
assert code == 1, code
""",
    # the old hand-down, planted: the engine's runner calls back into a function that imports the
    # report layer (as harness/api.py once handed its run `meanwhile=_import_reports`)
    "planted": """
import importlib
from normdiff.cases import suites
from normdiff.harness.engine import runner
from normdiff.implementations import registry

runner.run(suites.load(sys.argv[3]), [registry.get("numpy")],
           meanwhile=lambda: importlib.import_module("normdiff.reports.report"))
""",
    # the same handed to a thread that an engine module starts: the thread's own stack holds no
    # engine frame, the stack that started it does
    "planted-thread": """
import importlib
engine = {"__name__": "normdiff.harness.engine.planted"}
exec("import threading\\n"
     "def overlap(meanwhile):\\n"
     "    thread = threading.Thread(target=meanwhile)\\n"
     "    thread.start()\\n"
     "    thread.join()\\n", engine)
engine["overlap"](lambda: importlib.import_module("normdiff.reports.report"))
""",
}


def watched(scenario: str, tmp_path: Path) -> dict:
    """What `scenario` imported in a fresh process: "upward", the upward imports made at run time;
    "seen", every normdiff module the finder was asked about."""
    suite = tmp_path / "small.toml"
    suite.write_text('[[group]]\nops = ["rms_norm"]\nconventions = ["qwen3"]\ndtypes = ["bfloat16", "float32"]\n'
                     'shapes = ["8x128"]\nregimes = ["normal", "tiny_rms:1e-3"]\nweights = ["trained"]\n')
    found = tmp_path / "found.jsonl"
    target = ROOT / "tests" / "fixtures" / "user" / "numpy_norms.py"
    code = f"SCENARIO = {SCENARIOS[scenario]!r}\n" + WATCH
    proc = subprocess.run([sys.executable, "-c", code, str(ROOT / "tests"), str(found), str(suite),
                           str(tmp_path / "report"), f"{target}:rms_norm_eps_outside"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = [json.loads(line) for line in found.read_text().splitlines()]
    return {what: sorted({text for kind, text in lines if kind == what}) for what in ("upward", "seen")}


@pytest.mark.parametrize("scenario, imported", [
    ("run", ["normdiff.harness.engine.tables", "normdiff.reports.report", "normdiff.reports.render"]),
    ("check", ["normdiff.harness.analysis.diagnosis", "normdiff.harness.analysis.fitting", "normdiff.reports.report"]),
])
def test_no_layer_imports_an_upper_one_at_run_time(scenario, imported, tmp_path):
    found = watched(scenario, tmp_path)
    assert set(imported) <= set(found["seen"])  # the finder really saw the run's imports
    assert found["upward"] == []


@pytest.mark.parametrize("scenario, caller", [("planted", "normdiff.harness.engine.runner"),
                                              ("planted-thread", "normdiff.harness.engine.planted")])
def test_a_callable_handed_down_that_imports_upward_is_caught(scenario, caller, tmp_path):
    found = watched(scenario, tmp_path)["upward"]
    assert f"{caller} (engine) imports normdiff.reports.report (reports) at run time" in found
    assert all(" (engine) imports normdiff.reports" in f for f in found), found
