"""`normdiff repro CASE_ID --implementation NAME`: replay one results.csv row (a user's row:
`--target FILE.py:NAME [--call ...]` or `--command CMD`, as its repro column says).

The case is rebuilt from its id (`Case.from_id`), run through the same worker machinery as a full
run (a one-case suite), and printed with its error figures, detectors and the worst row side by
side. `--script FILE.py` writes a self-contained script that replays it without normdiff's runner:
the case's input arrays and the float64 reference are embedded (zlib + base64 of the raw
little-endian bytes, with dtype and shape), and

  * numpy (own): the own NumPy implementation's source is inlined; needs numpy and ml_dtypes;
  * torch (own) and the mutants: the own PyTorch modules' source is inlined, with the mutant's knob
    change spelled out; needs numpy, ml_dtypes and torch;
  * every other implementation (jax, HF transformers, framework built-ins): the script imports its
    normdiff adapter, as the worker does, and calls it once (normdiff and the framework needed).

The script measures errors as `engine.judge.judge` does (ULPs of the case dtype at the reference's
magnitude; for qk_norm_rope at the magnitude of each rotated pair) and prints the same `max_ulp`.
"""
from __future__ import annotations

import ast
import base64
import dataclasses
import inspect
import math
import textwrap
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from normdiff.cases import layouts
from normdiff.cases.model import Case, CaseInputs
from normdiff.cases.suites import check_case_memory
from normdiff.files import atomic_write
from normdiff.harness.commands import repro_quant
from normdiff.harness.data.bugs import BUGS
from normdiff.harness.data.contracts import Contract
from normdiff.harness.data.errors import UsageError
from normdiff.harness.data.ops import CASE
from normdiff.harness.data.outcomes import NOT_RUN, PASSING
from normdiff.harness.engine import oracle
from normdiff.harness.engine.columns import C
from normdiff.harness.engine.judge import output_format, ulp_rule
from normdiff.implementations.entry import Implementation
from normdiff.reports import messages, worst
from normdiff.reports.folder import writing
from normdiff.text import precise
from normdiff.wording import budget_of, max_ulp_with_budget

DETECTORS = (C.scale_ratio, C.ratio_spread, C.span_rms_err, C.row_bias_ulp, C.channel_bias_ulp,
             C.channel_bias_budget, C.zero_excess, C.nan_count, C.inf_count)
PLAUSIBILITY = (C.cosine, C.rms_ratio, C.assert_close)
MUTANT_ENTRY = "normdiff.implementations.mutants:"
TORCH_FRAMEWORK = "normdiff.implementations.frameworks.torch"
INLINED = {"normdiff.implementations.numpy_own:run": "numpy_own",
           "normdiff.implementations.torch_own:run": "torch_own"}


def full_case(case_id: str) -> Case:
    """The case of a full case id, as results.csv and check print it. `Case.from_id` fills in what
    an id leaves out (an operand's default regime: w=ones), so a truncated id names another case than
    the one it was cut from: replaying that silently would answer the wrong question. An id that is
    not its case's own is a usage error (exit 2) that gives the full id and the parts that differ.
    A case whose memory estimate a suite would refuse is refused too, before anything is drawn."""
    case = Case.from_id(case_id)
    given = str(case_id).strip()
    if case.id != given:
        raise UsageError(f"{given!r} is not a full case id: it reads as {case.id!r}, which {_differs(case.id, given)}; "
                         "give the full id of the case you mean, as results.csv or check prints it")
    check_case_memory(case.rows, case.width, f"case {case.id}", "replay a smaller case")
    return case


def _differs(full: str, given: str) -> str:
    """How a full id differs from the id given: the parts filled in (an operand's default), the
    parts it leaves out (an eps that is the convention's own)."""
    added = [part for part in full.split("/") if part not in given.split("/")]
    dropped = [part for part in given.split("/") if part not in full.split("/")]
    said = ([f"adds {', '.join(added)}"] if added else []) + ([f"has no {', '.join(dropped)}"] if dropped else [])
    return " and ".join(said) or "orders its parts otherwise"


def case_for(case_id: str, op: str | None = None, convention: str | None = None) -> Case:
    """The case of a full id; an --op or --convention given beside it must be the id's own."""
    case = full_case(case_id)
    for what, given, own in (("op", op, case.op), ("convention", convention, case.convention)):
        if given and given != own:
            raise UsageError(f"--{what} {given} is not the {what} of case {case_id!r} ({own}); leave it out")
    return case


def resolve(case_id: str, name: str) -> tuple[Case, Implementation]:
    """The case and the registered implementation; ValueError (exit 2) says what is wrong."""
    from normdiff.implementations import registry

    case = full_case(case_id)
    impl = registry.get(name)
    if impl.supports(case.op, case.convention) or impl.supports(case.op, case.convention, "backward"):
        if not impl.supports(case.op, case.convention, case.pass_):
            raise UsageError(f"implementation {name!r} has no {case.pass_} pass; it runs: {', '.join(impl.passes)}")
    else:
        pairs = ", ".join(sorted(f"{op}@{conv}" for op, conv in impl.op_conventions))
        raise UsageError(f"implementation {name!r} does not implement {case.op}@{case.convention}; it "
                         f"implements: {pairs}")
    reason = impl.unavailable_reason() or impl.layout_problem(case.layout)
    if reason:
        raise UsageError(f"implementation {name!r} cannot run {case_id!r} here: {reason}")
    return case, impl


@dataclass
class Replay:
    case: Case
    impl: Implementation
    row: dict  # the results.csv row
    output: np.ndarray | None
    inputs: CaseInputs
    exact: np.ndarray  # the oracle's float64 output (a backward case's: its exact gradient)

    @property
    def exit_code(self) -> int:
        """0 when the case passes (identical / agree), 1 when it does not."""
        return 0 if str(self.row[C.outcome]) in PASSING + NOT_RUN else 1


def replay(case: Case, impl: Implementation, timeout: float = 60.0) -> Replay:
    """Run one case through one implementation with the runner's workers, output kept."""
    from normdiff.cases.suites import Suite
    from normdiff.harness import api

    report = api.run_suite(Suite("repro", f"repro of {case.id}", (case,)), [impl], timeout=timeout,
                           keep_outputs=True, diagnose=False)  # one case: no diagnosis to show
    row = report.results.iloc[0].to_dict()
    inputs = case.inputs()
    exact = prepared_reference(case).exact  # the case's own output: y, a further result, or a gradient
    return Replay(case, impl, row, report.outputs.get((case.id, impl.name)), inputs, exact)


def prepared_reference(case: Case):
    """The judge's reference for `case` (its exact output and where its ULPs are counted), as the
    run prepares it."""
    from normdiff.harness.engine.runner import prepare

    return prepare(case, [case]).ref


def _py_float(value) -> str:
    """A float as Python source (nan for a missing value)."""
    if value is None or not math.isfinite(float(value)):
        return "float('nan')" if value is None or math.isnan(float(value)) else f"float('{float(value)}')"
    return repr(float(value))


def describe(r: Replay) -> str:
    """The replay as text for a terminal. Names, the description, the detail (an exception's text or
    a command's stderr) come from the user: their control characters print as escapes
    (normdiff.text.printable), and a name stays on its line."""
    from normdiff.text import printable

    def one(value) -> str:
        return printable(value, newlines=False)

    row, case, impl = r.row, r.case, r.impl
    budget = row.get(C.tolerance_ulp)
    lines = [f"case            {one(case.id)}",
             f"contract        {case.contract.describe()}",
             f"implementation  {one(impl.name)} ({one(impl.kind)}, {one(impl.framework)}): {one(impl.description)}",
             f"outcome         {one(row[C.outcome])}" + (f" ({budget_of(budget, one(output_format(case).name))})"
                                                        if budget == budget and budget is not None else ""),
             f"measured        {one(messages.headline(row))}",
             "errors          " + "  ".join(f"{k} {precise(row.get(k))}" for k in
                                           (C.max_ulp, C.p99_ulp, C.max_abs, C.rel_l2)),
             "detectors       " + "  ".join(f"{k} {precise(row.get(k))}" for k in DETECTORS),
             "plausibility    " + "  ".join(f"{k} {precise(row.get(k))}" for k in PLAUSIBILITY)]
    if row.get(C.output_dtype):
        lines.append(f"output          {one(row[C.output_dtype])}, digest {one(row.get(C.output_digest, ''))}")
    if row.get(C.detail):
        lines.append(f"detail          {row[C.detail]}")
    if row.get(C.known_finding):
        lines.append(f"known finding   {one(row[C.known_finding])}")
    if r.output is not None and np.shape(r.output) == r.exact.shape:
        lines += ["", worst.as_text(worst.side_by_side({(case.id, impl.name): r.output}, case.id, impl.name))]
    lines += ["", f"max_ulp {precise(row.get(C.max_ulp))}"]
    return printable("\n".join(lines))  # the detail may span lines; nothing in it acts on the terminal


# ---------------------------------------------------------------------------------------------
# The self-contained script


def _encode(array: np.ndarray) -> str:
    """zlib + base64 of the array's little-endian bytes, wrapped at 96 columns."""
    a = np.ascontiguousarray(array)
    raw = a.view(f"<u{a.dtype.itemsize}").astype(f"<u{a.dtype.itemsize}").tobytes()
    text = base64.b64encode(zlib.compress(raw, 9)).decode()
    return "\n".join(textwrap.wrap(text, 96))


def _array_literal(array: np.ndarray) -> str:
    return (f'_array("{array.dtype.name}", {tuple(array.shape)!r}, """\n{_encode(array)}\n""")')


def _module_source(module_name: str) -> str:
    """An implementation module's source, made standalone: without its docstring, its
    `from __future__` line and its `if TYPE_CHECKING:` imports (types only: the script defines
    stand-ins), and with each run-time `from normdiff.X import f [as g]` replaced by f's own source
    (the module must say why it stays otherwise free of normdiff, as numpy_own and torch_own do)."""
    import importlib

    module = importlib.import_module(f"normdiff.implementations.{module_name}")
    source = inspect.getsource(module)
    tree = ast.parse(source)
    lines = source.splitlines()
    pieces = []
    for node in tree.body:
        text = "\n".join(lines[node.lineno - 1:node.end_lineno])
        if node is tree.body[0] and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # the docstring
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            continue
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            continue
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("normdiff"):
            pieces.append(_inlined(node))
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)) and any(a.name.startswith("normdiff") for a in node.names):
            raise RuntimeError(f"{module_name} imports normdiff as a package; it cannot be inlined")
        pieces.append(text)
    code = "\n\n".join(p for p in pieces if p.strip())
    leftover = [n for n in ast.walk(ast.parse(code)) if isinstance(n, ast.Name) and n.id == "normdiff"]
    if leftover:  # a future edit made the module depend on normdiff at run time
        raise RuntimeError(f"{module_name} uses normdiff at run time; it cannot be inlined")
    return code


def _inlined(node: ast.ImportFrom) -> str:
    """The source of each name `from normdiff.X import a as b` brings in (functions and module
    constants: numbers, strings, and tuples or dicts written as literals of them), then `b = a` for
    an alias."""
    import importlib

    module = importlib.import_module(node.module)
    parts = [f"# ---- inlined: {', '.join(a.name for a in node.names)} of {node.module} ----"]
    for alias in node.names:
        value = getattr(module, alias.name)
        if inspect.isfunction(value):
            parts.append(inspect.getsource(value).rstrip())
        elif isinstance(value, (int, float, str)) or (isinstance(value, (tuple, dict)) and _literal(value)):
            parts.append(f"{alias.name} = {value!r}")
        else:
            raise RuntimeError(f"cannot inline {node.module}.{alias.name} (a {type(value).__name__})")
        if alias.asname and alias.asname != alias.name:
            parts.append(f"{alias.asname} = {alias.name}")
    return "\n\n\n".join(parts)


def _literal(value) -> bool:
    """Whether `value`'s repr is a Python literal that reads back as it (a table of numbers and names)."""
    try:
        return ast.literal_eval(repr(value)) == value
    except (ValueError, SyntaxError):
        return False


def _contract_class(contract: Contract) -> str:
    fields = "\n".join(f"    {f.name}: {f.type} = {getattr(contract, f.name)!r}" for f in dataclasses.fields(contract))
    return f'''@dataclasses.dataclass(frozen=True)
class Contract:
    """The case's contract (normdiff.harness.data.contracts.Contract, its knobs)."""
{fields}

    def replace(self, **changes):
        return dataclasses.replace(self, **changes)


@dataclasses.dataclass(frozen=True)
class CaseInputs:
    """What an implementation receives: the arrays (case dtype; positions int64) and num_heads."""
    arrays: dict
    num_heads: int
'''


def _implementation_code(case: Case, impl: Implementation, whole: bool = False) -> tuple[str, str]:
    """(code defining `implementation()` -> ndarray, what it needs). A backward case runs the
    implementation's backward adapter through normdiff (the script gives it UPSTREAM, the call's
    upstream gradient, and keeps the gradient the case judges); a forward one inlines our own
    modules where it can. `whole`: it returns every result of the call, a tuple of arrays (a
    quantizer's q and scale), not the case's alone."""
    if case.pass_ == "backward":
        return _adapter_code(case, impl)
    entry = impl.entry
    module = INLINED.get(entry) if not impl.params else None
    changes = None
    if entry.startswith(MUTANT_ENTRY) and not impl.params:
        bug = BUGS.get(entry[len(MUTANT_ENTRY):])
        if bug is not None:  # (a quantizing mutant is NumPy's own code: implementations/mutants.py)
            module, changes = "numpy_own" if case.record.quantizes else "torch_own", dict(bug.changes)
    if module is not None:
        source = _module_source(module)
        call = "CONTRACT" if changes is None else "CONTRACT.replace(**MUTANT_CHANGES)"
        mutant = ("" if changes is None else
                  f"# the mutant {impl.name!r}: the right contract with this knob turned the wrong way\n"
                  f"MUTANT_CHANGES = {changes!r}\n\n")
        # torch outputs cross to NumPy as the worker converts them (the framework record's function)
        convert = ("" if module == "numpy_own" else
                   _inlined(ast.parse(f"from {TORCH_FRAMEWORK} import to_numpy").body[0]) + "\n\n\n")
        pick = "" if whole else _result_pick(case)
        one = "np.asarray" if module == "numpy_own" else "to_numpy"
        code = (f"{_contract_class(case.contract)}\n\nCONTRACT = Contract()\n\n{mutant}"
                f"# ---- normdiff/implementations/{module}.py, inlined ----\n\n{source}\n\n"
                f"# ---- end of {module}.py ----\n\n\n{convert}"
                f"def implementation() -> np.ndarray:\n"
                f"    out = run(OP, {call}, CaseInputs(INPUTS, NUM_HEADS)){pick}\n"
                f"    return {f'tuple(o if isinstance(o, np.ndarray) else {one}(o) for o in out)' if whole else f'{one}(out)'}\n")
        needs = "numpy, ml_dtypes" + (", torch" if module == "torch_own" else "")
        return code, needs
    return _adapter_code(case, impl, whole)


def _result_pick(case: Case) -> str:
    """The indexing that takes a forward case's result from an op's tuple of results ("" for one)."""
    results = case.record.results
    return "" if len(results) == 1 else f"[{results.index(case.output)}]  # {case.output}"


def _adapter_code(case: Case, impl: Implementation, whole: bool = False) -> tuple[str, str]:
    backward = case.pass_ == "backward"
    entry, params = impl.entry_for(case.pass_), dict(impl.params)
    if backward:
        call, take = "CaseInputs(INPUTS, NUM_HEADS), UPSTREAM", f"[{case.operand!r}]  # the gradient of {case.operand}"
    else:
        call, take = "CaseInputs(INPUTS, NUM_HEADS)", "" if whole else _result_pick(case)
    code = f'''# {impl.name} runs through its normdiff adapter, as normdiff's worker calls it (not its runner)
from normdiff.cases.model import CaseInputs
from normdiff.harness.data.conventions import get_contract
from normdiff.implementations.frameworks import FRAMEWORKS, to_numpy
from normdiff.implementations.loading import load_entry

ENTRY = {entry!r}
PARAMS = {params!r}


def implementation() -> np.ndarray:
    FRAMEWORKS[{impl.framework!r}].setup()  # what must hold before its first import (KERAS_BACKEND)
    adapter = load_entry(ENTRY)
    if PARAMS:
        adapter = adapter(**PARAMS)
    out = adapter(OP, get_contract(OP, CONVENTION).replace(eps=EPS), {call}){take}
    return {"tuple(to_numpy(o) for o in out)" if whole else "to_numpy(out)"}
'''
    return code, f"normdiff and {impl.framework}" + (f" ({', '.join(impl.requires)})" if impl.requires else "")


def script(case: Case, impl: Implementation, replayed: Replay | None = None) -> str:
    """The text of a self-contained Python script that replays `case` on `impl`."""
    if case.record.quantizes:  # judged in the format's units: brackets, not a ULP budget
        code, needs = _implementation_code(case, impl, whole=True)
        return repro_quant.script(case, impl, replayed, code, needs, _array_literal, _preamble(needs))
    inputs = replayed.inputs if replayed else case.inputs()
    prepared = prepared_reference(case)
    exact = replayed.exact if replayed else prepared.exact
    code, needs = _implementation_code(case, impl)
    seen = ""
    if replayed is not None:
        row = replayed.row
        measured = max_ulp_with_budget(row.get(C.max_ulp), row.get(C.tolerance_ulp))
        seen = f"\nnormdiff measured: {row[C.outcome]}, {measured}"
    arrays = "\n".join(f"    {name!r}: {_array_literal(a)}," for name, a in inputs.arrays.items())
    rule = ulp_rule(case.op)
    spacing, floored = prepared.ulp, prepared.floor is not None
    upstream = ""
    if case.pass_ == "backward":  # the call's upstream gradient(s), as the run drew them
        dy = case.upstreams(oracle.results(case.contract, inputs.arrays, inputs.num_heads))
        upstream = ("UPSTREAM = {" + ", ".join(f"{k!r}: {_array_literal(v)}" for k, v in dy.items()) + "}"
                    if isinstance(dy, dict) else f"UPSTREAM = {_array_literal(dy)}")
    laid_out = _layout_code(case)
    return f'''#!/usr/bin/env python3
"""Standalone repro, generated by `normdiff repro {case.id} --implementation {impl.name} --script`.

case            {case.id}
contract        {case.contract.describe()}
implementation  {impl.name} ({impl.kind}, {impl.framework}): {impl.description}{seen}

Needs {needs}. Run: python THIS_FILE.py
Inputs are the exact bits normdiff gave the implementation; REFERENCE is the contract evaluated
exactly in float64 on them; ULP is the spacing of {case.dtype} each element's error is counted in, as
normdiff's judge counts it ({"at the magnitude of each rotated pair (ref_i, ref_(i+D/2)) of a head" if rule == "rotation_pair" else "at |ref|"}{", never finer than at its floor: the magnitude of the terms it sums (a gradient; a LayerNorm's span scale) or the weight x the smallest normal (a Llama cast on subnormals)" if floored else ""}).
"""
{_preamble(needs)}

CASE_ID = {case.id!r}
OP, CONVENTION, DTYPE = {case.op!r}, {case.convention!r}, {case.dtype!r}
NUM_HEADS = {case.num_heads}
BUDGET_ULP = {_py_float(replayed.row.get(C.tolerance_ulp) if replayed else None)}
INPUTS = {{
{arrays}
}}
EPS = {case.contract.eps!r}
{upstream}
{laid_out}
REFERENCE = {_array_literal(np.asarray(exact, dtype=np.float64))}
ULP = {_array_literal(np.asarray(spacing, dtype=np.float64))}


# ---- the implementation ----------------------------------------------------------------------

{code}

# ---- judging, as normdiff's judge measures max_ulp ---------------------------------------------


def main() -> int:
    out = np.asarray(implementation())
    if LAYOUT == "batched":  # a batch of sequences' output read back as rows, as normdiff's worker reads it
        out = as_rows(out, REFERENCE.shape, LAYOUT)
    if out.shape != REFERENCE.shape:
        print(f"wrong-shaped output {{out.shape}}; expected {{REFERENCE.shape}}")
        return 1
    o = out.astype(np.float64)
    rounded = REFERENCE.astype(DTYPES[DTYPE]).astype(np.float64)
    ok = np.isfinite(o) & np.isfinite(REFERENCE)
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.where(ok, np.abs(np.where(ok, o, 0.0) - np.where(ok, REFERENCE, 0.0)) / ULP, 0.0)
    mismatched = int((np.isfinite(o) != np.isfinite(rounded)).sum())
    max_ulp = float(err[ok].max()) if ok.any() else float("nan")
    print(f"case {{CASE_ID}}")
    print(f"output dtype {{out.dtype}}; {{int(np.isnan(o).sum())}} NaN, {{int(np.isinf(o).sum())}} Inf; "
          f"{{mismatched}} element(s) non-finite in one of output / reference only")
    flat = np.where(ok, err, np.where(np.isfinite(o) == np.isfinite(rounded), 0.0, np.inf)).reshape(-1, o.shape[-1])
    row, col = divmod(int(np.argmax(flat)), flat.shape[-1])
    cols = list(range(min({worst.SIDE_BY_SIDE}, flat.shape[-1])))
    if col not in cols:
        cols.append(col)
    shown = [("reference", REFERENCE.reshape(flat.shape)[row]), ("output", o.reshape(flat.shape)[row]),
             ("ulp error", flat[row])]
    if o.shape == INPUTS["x"].shape:  # x beside an output shaped like it (not beside dw)
        shown.insert(0, ("x", INPUTS["x"].astype(np.float64).reshape(flat.shape)[row]))
    print(f"worst element: row {{row}}, column {{col}}; row {{row}}, columns {{cols}}:")
    for name, values in shown:
        print(f"  {{name:<12}}" + " ".join(f"{{values[i]:>12.6g}}" for i in cols))
    verdict = ("nan_mismatch" if mismatched else "within budget" if max_ulp <= BUDGET_ULP
               else "beyond budget" if max_ulp == max_ulp else "no finite element")
    print(f"budget {{BUDGET_ULP:g}} ulp: {{verdict}}")
    print(f"max_ulp {{max_ulp:.6g}}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
'''


def _preamble(needs: str) -> str:
    """A script's imports and its decoder of the arrays embedded in it (`_array_literal`)."""
    torch_import = "import torch\n" if "torch" in needs.split(", ") else ""
    return f'''from __future__ import annotations

import base64
import dataclasses
import sys
import zlib

import ml_dtypes
import numpy as np
{torch_import}
DTYPES = {{"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16,
          "float64": np.float64, "int64": np.int64}}


def _array(dtype: str, shape: tuple, data: str) -> np.ndarray:
    """zlib + base64 of little-endian raw bytes -> an array of `dtype` and `shape`."""
    raw = zlib.decompress(base64.b64decode("".join(data.split())))
    size = np.dtype(DTYPES[dtype]).itemsize
    return np.frombuffer(raw, dtype=f"<u{{size}}").astype(f"=u{{size}}").view(DTYPES[dtype]).reshape(shape)
'''


def _layout_code(case: Case) -> str:
    """The script's lines that lay INPUTS (and UPSTREAM) out in memory as the run did: the source
    of cases/layouts.py's functions, so the script needs no normdiff (for a contiguous case only its
    LAYOUT, which main() reads)."""
    if case.layout == layouts.DEFAULT:
        return f"LAYOUT = {layouts.DEFAULT!r}\n"
    functions = "\n\n".join(inspect.getsource(f) for f in (layouts._poisoned, layouts._row_strides,
                                                          layouts.batched_shape, layouts.as_rows, layouts.lay_out,
                                                          layouts.lay_out_arrays))
    per_case = {o.name for o in case.record.operands if o.per == CASE}
    upstream = ""
    if case.pass_ == "backward":
        upstream = ("UPSTREAM = lay_out_arrays(UPSTREAM, LAYOUT, set())\n" if len(case.record.results) > 1 else
                    "UPSTREAM = lay_out_arrays({'y': UPSTREAM}, LAYOUT, set())['y']\n")
    return (f"\n# ---- the memory layout the run gave the implementation (normdiff/cases/layouts.py) ----\n"
            f"LAYOUT, PER_CASE = {case.layout!r}, {sorted(per_case)!r}\n"
            f"PAD, PER_CASE_LAYOUTS = {layouts.PAD}, {layouts.PER_CASE_LAYOUTS!r}\n\n\n{functions}\n\n"
            f"INPUTS = lay_out_arrays(INPUTS, LAYOUT, PER_CASE)\n{upstream}")


def write_script(case: Case, impl: Implementation, path: str | Path, replayed: Replay | None = None) -> Path:
    path = Path(path)
    text = script(case, impl, replayed)
    with writing(path, "--script"):  # refused (a full disk): an OutputError, an earlier script kept
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, text)
    return path
