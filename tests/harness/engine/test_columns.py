"""The results table's columns are defined once (engine/columns.py): the engine builds its rows in
that order, the judge's measurement is that group's fields, a Row carries one row by name, and `C`
names the columns.

A structural test: the engine, the analysis, the commands and the reports read a results column
through `C`, never by a string of their own (`string_reads`; the strings that stay are in `KEPT`,
each with why), and every `C.name` in the package is a column."""
import ast
from pathlib import Path

import pandas as pd
import pytest

from normdiff.harness.engine import columns, judge


def test_the_measurement_is_the_measurement_columns_in_order():
    assert columns.measurement_fields(judge.Measurement) == columns.of(columns.MEASUREMENT)


def test_every_column_has_a_type_a_group_and_a_meaning():
    assert len(set(columns.NAMES)) == len(columns.NAMES)
    for c in columns.RESULTS:
        assert c.dtype in ("str", "int", "float", "bool", "category") and c.meaning
        assert c.group in (columns.CASE, columns.IMPLEMENTATION, columns.MEASUREMENT, columns.RUN)
    assert columns.NAMES[:3] == ("case_id", "pass", "output") and columns.NAMES[-1] == "known_finding"


def test_a_run_writes_exactly_these_columns(small_report, tmp_path):
    from normdiff.reports import render

    assert tuple(small_report.results.columns) == columns.NAMES
    out = render.write(small_report, tmp_path / "r")
    assert tuple(pd.read_csv(out / "results.csv", nrows=1).columns) == columns.NAMES


def test_a_row_by_name():
    row = columns.row({"case_id": "c", "pass": "forward", "outcome": "agree", "max_ulp": 0.5})
    assert (row.case_id, row.pass_, row.outcome, row.max_ulp, row.detail) == ("c", "forward", "agree", 0.5, None)


def test_the_column_names_by_attribute():
    """C names every column from the one definition: a misspelt or removed one is an AttributeError."""
    c = columns.C
    assert (c.outcome, c.max_ulp, c.pass_, c.known_finding) == ("outcome", "max_ulp", "pass", "known_finding")
    assert tuple(c) == columns.NAMES and c._fields == columns.Row._fields
    with pytest.raises(AttributeError):
        c.max_ulps  # noqa: B018
    with pytest.raises(AttributeError):
        getattr(c, "pass")


# ---- no module reads a results column by a string of its own --------------------------------------

ROOT = Path(__file__).resolve().parents[3]
FOLDERS = ("harness/engine", "harness/analysis", "harness/commands", "reports")
# the pandas methods whose arguments name columns: positionally, or by these keywords
COLUMN_METHODS = {"groupby": ("by",), "sort_values": ("by",), "set_index": ("keys",), "drop_duplicates": ("subset",),
                  "duplicated": ("subset",), "dropna": ("subset",), "drop": ("columns",), "unstack": ("level",),
                  "pivot": ("index", "columns", "values"), "pivot_table": ("index", "columns", "values")}
# The string keys that stay: by module and the expression indexed (its name up to the first call or
# subscript: `kills`, `frame.assign()`, `group[]`), the keys and why. None is a read of the results
# table: each is an operand's name, a JSON object's or a dict's key, or a column of another table
# that shares a results column's name. Every key listed must still be found (a stale one fails too).
KEPT = {
    # operand arrays (the op records' operand names), not the results table's regime columns
    ("harness/engine/judge.py", "arrays"): ("gate", "the gate operand's array"),
    ("harness/engine/oracle.py", "arrays"): ("bias", "the bias operand's array"),
    ("harness/analysis/fitting.py", "a"): ("gate bias", "the gate and bias operands' arrays"),
    # a candidate's contract changes (knob -> value), not a column
    ("harness/analysis/diagnosis.py", "changes"): ("eps", "a candidate change's eps knob"),
    # the pairs table's own columns (engine/pairs.py COLUMNS), measured from outcomes, not from results
    ("harness/engine/pairs.py", "row"): ("max_ulp", "one pair's distance"),
    ("harness/engine/tables.py", "table"): ("case_id", "pairs_frame sorts the pairs table"),
    ("reports/views/agreement.py", "pairs"): ("dtype", "the pairs table's dtype"),
    # a model run's worker reply: per run, per norm site, per call
    ("harness/engine/model_run.py", "data"): ("dtype seed", "the model run's reply"),
    ("harness/engine/model_run.py", "site"): ("kind op convention", "a norm site of the model"),
    ("harness/engine/model_run.py", "call"): ("eps", "a norm site's call"),
    # check's JSON objects (CheckResult.as_dict): its counts, a group of cases that could not run, its margin
    ("harness/commands/check.py", "c"): ("known_finding", "check's counts: rows a known finding explains"),
    ("harness/commands/check.py", "group"): ("dtype", "check's not_run: cases that could not run, by dtype"),
    ("harness/commands/check.py", "m"): ("case_id", "check's margin: its worst case against the budget"),
    ("harness/commands/check.py", "report.pairs"): ("case_id", "the pairs table, cut to the cases judged"),
    ("harness/commands/check.py", "w"): ("detail", "check's worst_case JSON object"),
    ("harness/commands/check.py", "takes"): ("eps", "the names a user's call binds (an op parameter, not a column)"),
    # fuzz's minimal case, a JSON object (FuzzResult.as_dict; its budget is `budget_ulp`)
    ("harness/commands/fuzz.py", "m"): ("case_id dtype implementation layout outcome max_ulp detail repro",
                                        "the minimal case's JSON"),
    ("harness/commands/fuzz_campaign.py", "m"): ("case_id outcome repro", "a shard's minimal case's JSON"),
    # a --with spec, a user target's options, the framework probe's JSON reply
    ("harness/commands/cli.py", "spec"): ("op convention", "a --with spec"),
    ("harness/commands/usercode.py", "spec"): ("framework", "a user target's options"),
    ("harness/commands/usercode.py", "json.loads()"): ("framework", "the framework probe's reply"),
    ("harness/commands/model.py", "user_options"): ("framework", "a user target's options"),
    # `normdiff list`'s tables: implementations, bugs, model families and their sites
    ("harness/commands/cli.py", "row"): ("kind framework op convention", "a row `normdiff list` prints"),
    ("harness/commands/cli.py", "site"): ("kind op convention", "a model family's norm site"),
    # meta.json: the run's time
    ("harness/commands/cli.py", "report.meta"): ("seconds", "meta.json"),
    ("reports/junit.py", "meta"): ("seconds", "meta.json"),
    ("reports/markdown.py", "meta"): ("seconds", "meta.json"),
    ("reports/views/run.py", "meta"): ("seconds", "meta.json"),
    ("reports/notebook.py", "meta"): ("seconds", "meta.json"),
    # a worker reply's array header on the wire (engine/wire.py): its dtype and shape
    ("harness/engine/wire.py", "meta"): ("dtype shape", "an array's header in a reply's JSON part"),
    # a side-by-side's attributes (reports/worst.py side_by_side: row, column, dtype)
    ("reports/worst.py", "a"): ("dtype", "the side-by-side's case dtype"),
    ("reports/views/worst.py", "attrs"): ("dtype", "the side-by-side's case dtype"),
    # junit.xml's test cases (testcases(): a dict per implementation x op@convention)
    ("reports/junit.py", "c"): ("implementation", "a JUnit test case"),
    ("reports/junit.py", "case"): ("implementation", "a JUnit test case"),
    ("reports/junit.py", "group[]"): ("kind framework", "a JUnit test case"),
    # the tables the views build, with columns of their own that share a results column's name
    ("reports/baseline.py", "frame.assign()"): ("case_id implementation", "changes.csv's columns"),
    ("reports/views/changes.py", "shown"): ("case_id implementation", "changes.csv's columns"),
    ("reports/views/conventions.py", "frame"): ("op", "conventions.csv: how the conventions' maths differ"),
    ("reports/views/conventions.py", "group[]"): ("regime", "conventions.csv: how the conventions' maths differ"),
    ("reports/views/mutants.py", "kills"): ("op convention", "kill_summary.csv's columns"),
    ("reports/views/summary.py", "frame"): ("implementation", "summary.csv's columns"),
    ("reports/views/worst.py", "report.summary"): ("implementation", "summary.csv's columns"),
    ("reports/notebook.py", "summary.assign()"): ("implementation", "summary.csv's columns"),
    ("reports/views/worst.py", "frame"): ("detail", "the shown rows' detail, with its known finding"),
}
KEPT_KEYS = {(module, expression, key) for (module, expression), (keys, _) in KEPT.items() for key in keys.split()}


def _name(node) -> str:
    """An expression's name up to its first call or subscript: `rows`, `report.summary`,
    `frame.assign()`, `group[]`."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_name(node.value)}.{node.attr}"
    if isinstance(node, ast.Call):
        return f"{_name(node.func)}()"
    if isinstance(node, ast.Subscript):
        return f"{_name(node.value)}[]"
    return type(node).__name__


def _strings(node) -> list[str]:
    """A string key, or the strings of a list or tuple of them (a column list, a .loc[rows, column])."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.List, ast.Tuple)):
        return [s for e in node.elts for s in _strings(e)]
    return []


def string_reads(folders=FOLDERS, root=None) -> dict[tuple[str, str, str], int]:
    """(module, expression, column) -> how often a module names a results column with a string:
    a subscript (read or write: `rows["outcome"]`, `rows[["case_id", "outcome"]]`,
    `rows.loc[mask, "case_id"]`), a `.get("outcome")`, an `"outcome" in rows`, and a column argument
    of a pandas method (`groupby("implementation")`, `sort_values(["case_id"])`, `drop(columns=...)`)."""
    root = root or ROOT
    found: dict[tuple[str, str, str], int] = {}
    names = set(columns.NAMES)
    for folder in folders:
        for path in sorted((root / folder).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                hits: list[tuple[object, list[str]]] = []
                if isinstance(node, ast.Subscript):
                    hits.append((node.value, _strings(node.slice)))
                elif isinstance(node, ast.Compare) and isinstance(node.ops[0], (ast.In, ast.NotIn)):
                    hits.append((node.comparators[0], _strings(node.left)[:1] if isinstance(node.left, ast.Constant)
                                 else []))
                elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                    method, receiver = node.func.attr, node.func.value
                    if method == "get" and node.args:
                        hits.append((receiver, _strings(node.args[0])[:1] if isinstance(node.args[0], ast.Constant)
                                     else []))
                    elif method in COLUMN_METHODS:
                        given = node.args[:1] + [k.value for k in node.keywords if k.arg in COLUMN_METHODS[method]]
                        hits += [(receiver, _strings(g)) for g in given]
                for expression, keys in hits:
                    for key in keys:
                        if key in names:
                            where = (rel, _name(expression), key)
                            found[where] = found.get(where, 0) + 1
    return found


def test_no_module_reads_a_results_column_by_a_string_of_its_own():
    """The engine, the analysis, the commands and the reports read a results column as `C.name`
    (engine/columns.py): a string of their own would survive the column's renaming or removal and
    fail, or quietly read nothing, only when that line runs. `KEPT` lists the strings that stay and
    why, by module, the expression indexed and its keys; none of them is a read of the results table."""
    found = string_reads()
    assert sorted(set(found) - KEPT_KEYS) == [], "read a results column as columns.C.NAME"
    assert sorted(KEPT_KEYS - set(found)) == [], "a kept string is gone: drop it from KEPT"


def test_the_scan_sees_each_kind_of_read(tmp_path):
    """A planted module with each kind is found: subscripts (a column list, .loc, a write), .get,
    `in`, a pandas method's column argument; a key that names no column, or a `C.` read, is not."""
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "planted.py").write_text(
        'a = rows["outcome"]\nb = rows[["case_id", "other"]]\nc = rows.loc[mask, "max_ulp"]\nrows["detail"] = ""\n'
        'd = row.get("known_finding", "")\ne = "kind" in rows\nf = rows.groupby(["implementation", "x"])\n'
        'g = rows.drop(columns="repro").sort_values(by="seed")\nh = rows[C.outcome]\ni = rows["not_a_column"]\n')
    assert string_reads(("reports",), tmp_path) == {
        ("reports/planted.py", "rows", "outcome"): 1, ("reports/planted.py", "rows", "case_id"): 1,
        ("reports/planted.py", "rows.loc", "max_ulp"): 1, ("reports/planted.py", "rows", "detail"): 1,
        ("reports/planted.py", "row", "known_finding"): 1, ("reports/planted.py", "rows", "kind"): 1,
        ("reports/planted.py", "rows", "implementation"): 1, ("reports/planted.py", "rows", "repro"): 1,
        ("reports/planted.py", "rows.drop()", "seed"): 1}


def test_every_name_read_through_c_is_a_column():
    """Every `C.name` in the package is a column (a misspelt one fails here, not only when its line runs)."""
    fields = set(columns.Row._fields)
    for folder in ("normdiff", "harness", "cases", "implementations", "reports"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            imports_c = any(isinstance(n, ast.ImportFrom) and n.module == "normdiff.harness.engine.columns"
                            and any(a.name == "C" and a.asname is None for a in n.names) for n in ast.walk(tree))
            if not imports_c:
                continue
            read = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)
                    and isinstance(n.value, ast.Name) and n.value.id == "C"}
            assert read <= fields, (path.relative_to(ROOT).as_posix(), sorted(read - fields))
