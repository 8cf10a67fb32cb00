"""The results table's columns, defined once: name, dtype and meaning, in the order results.csv has
them. The engine builds rows in this order (engine/tables.py); the engine, the views and the
renderers read a column by its attribute of `C` (`C.outcome` is "outcome"), never a string of their
own; `Row` is one row as a typed record for code that handles one row at a time (a message, a JUnit
test case, a check's JSON row).

Importing this module loads no pandas: a run's workers start before pandas is imported.
"""
from __future__ import annotations

from collections import namedtuple
from dataclasses import dataclass, fields

from normdiff.harness.data.ops import OPS

CASE, IMPLEMENTATION, MEASUREMENT, RUN = "case", "implementation", "measurement", "run"


@dataclass(frozen=True)
class Column:
    name: str
    dtype: str  # "str", "int", "float", "bool", "category" (the outcome, ordered best first)
    group: str  # what it describes: the case, the implementation, the judge's measurement, the run
    meaning: str


# results.csv columns naming the regimes of the ops' chosen operands (weights, gate, ...), in the op
# records' order: after "regime", before "eps"
CHOICE_COLUMNS = tuple(dict.fromkeys(o.column for op in OPS.values() for o in op.chosen))

_CHOICES = tuple(Column(name, "str", CASE, f"the regime its {name} operand is drawn from ('' when the op has none)")
                 for name in CHOICE_COLUMNS)

RESULTS: tuple[Column, ...] = (
    Column("case_id", "str", CASE, "the case's stable id: `normdiff repro CASE_ID` replays it"),
    Column("pass", "str", CASE, "forward or backward"),
    Column("output", "str", CASE, "the output judged: y, residual_out, or a gradient (dx, dw, ...)"),
    Column("op", "str", CASE, "the op (harness/data/ops/)"),
    Column("convention", "str", CASE, "the convention whose contract the case is judged against"),
    Column("dtype", "str", CASE, "the input dtype: float32, bfloat16 or float16"),
    Column("shape", "str", CASE, "rows x width (or rows x heads x head_dim)"),
    Column("regime", "str", CASE, "the input regime x is drawn from (cases/regimes.py)"),
    *_CHOICES,
    Column("eps", "float", CASE, "the eps the case runs at"),
    Column("dy", "str", CASE, "a backward case's upstream-gradient regime ('' forward)"),
    Column("layout", "str", CASE, "the memory layout its operands are given in (cases/layouts.py)"),
    Column("seed", "int", CASE, "the case's seed (derived from its id)"),
    Column("implementation", "str", IMPLEMENTATION, "the implementation's name"),
    Column("kind", "str", IMPLEMENTATION, "reference, own, framework, model, mutant or user"),
    Column("framework", "str", IMPLEMENTATION, "the framework that runs it"),
    Column("outcome", "category", MEASUREMENT, "identical, agree, disagree, nan_mismatch, error, crashed, timeout, "
                                               "unsupported or unavailable (harness/data/outcomes.py)"),
    Column("max_ulp", "float", MEASUREMENT, "the largest error, in ULPs of the output dtype at the reference"),
    Column("p99_ulp", "float", MEASUREMENT, "the 99th percentile of the errors, in ULPs"),
    Column("max_abs", "float", MEASUREMENT, "the largest absolute error"),
    Column("rel_l2", "float", MEASUREMENT, "||out - ref|| / ||ref||"),
    Column("tolerance_ulp", "float", MEASUREMENT, "the budget the row was judged against, in ULPs (budgets.py)"),
    Column("nan_count", "int", MEASUREMENT, "NaN elements in the output"),
    Column("inf_count", "int", MEASUREMENT, "infinite elements in the output"),
    Column("zero_excess", "float", MEASUREMENT, "share of exact zeros where the reference is not zero"),
    Column("scale_ratio", "float", MEASUREMENT, "median of out / ref"),
    Column("ratio_spread", "float", MEASUREMENT, "(p99 - p1) / median of out / ref: ~0 for a pure rescale"),
    Column("span_rms_err", "float", MEASUREMENT, "max |rms(out) / rms(ref) - 1| over heads (or rows)"),
    Column("row_bias_ulp", "float", MEASUREMENT, "the largest mean error of a row, in ULPs"),
    Column("channel_bias_ulp", "float", MEASUREMENT, "the largest mean error of a channel across rows, in ULPs"),
    Column("channel_bias_budget", "float", MEASUREMENT, "the channel-bias detector's budget (with enough rows)"),
    Column("chain_identical", "float", MEASUREMENT, "share of elements bit-identical to the contract's rounding chain "
                                                    "(bf16 / fp16 y; engine/chain.py)"),
    Column("off_chain", "float", MEASUREMENT, "share of elements no legal float32 order of the contract's chain gives"),
    Column("cosine", "float", MEASUREMENT, "cosine similarity to the reference"),
    Column("rms_ratio", "float", MEASUREMENT, "rms(out) / rms(ref)"),
    Column("assert_close", "bool", MEASUREMENT, "whether torch.testing.assert_close's default tolerances pass it"),
    Column("output_dtype", "str", MEASUREMENT, "the dtype the implementation returned"),
    Column("output_digest", "str", MEASUREMENT, "a hash of the output's bits: equal digests, identical outputs"),
    Column("detail", "str", MEASUREMENT, "what went wrong, when something did: an error's message, a note"),
    Column("batch_invariant", "str", MEASUREMENT, "yes / no where a case checks rows alone against rows together"),
    Column("seconds", "float", RUN, "the time its call took (shared by the outputs of one call)"),
    Column("repro", "str", RUN, "the command that replays a row that did not pass"),
    Column("diagnosis", "str", RUN, "a user implementation's disagreeing row: which bug it looks like and its fix, as "
                                    "check says it ('' elsewhere; harness/analysis/answer.py)"),
    Column("known_finding", "str", RUN, "the known finding that shows exactly this, or '' (engine/verdict.py)"),
)
NAMES: tuple[str, ...] = tuple(c.name for c in RESULTS)
BY_NAME: dict[str, Column] = {c.name: c for c in RESULTS}


def of(group: str) -> tuple[str, ...]:
    """The names of one group's columns, in table order."""
    return tuple(c.name for c in RESULTS if c.group == group)


def case_columns(case) -> dict:
    """A case's columns of the results table, by name."""
    chosen = {operand.column: case.choice(operand.name) for operand in case.record.chosen}
    return {"case_id": case.id, "pass": case.pass_, "output": case.output, "op": case.op,
            "convention": case.convention, "dtype": case.dtype, "shape": case.shape_text, "regime": case.regime,
            **{name: chosen.get(name, "") for name in CHOICE_COLUMNS}, "eps": case.contract.eps, "dy": case.dy,
            "layout": case.layout, "seed": case.seed}


# One row as a record: `row.outcome`, `row.max_ulp`; `pass` is a keyword, so its field is `pass_`.
Row = namedtuple("Row", [n if n != "pass" else "pass_" for n in NAMES])

# The column names by attribute, for code that reads a results table or one of its rows:
# `rows[C.outcome]`, `row.get(C.max_ulp)`, `C.pass_ == "pass"`. Each cell of this Row is its column's
# name, so a misspelt or removed column is an AttributeError where it is read, never a KeyError
# some run later, nor a `.get` that quietly gives None.
C = Row(*NAMES)


def row(values) -> Row:
    """A Row from a mapping of column names to values (a dict, a pandas Series), or the Row itself; a
    column the mapping lacks (a table read from an older results.csv, a narrowed one) is None."""
    if isinstance(values, Row):
        return values
    get = values.get
    return Row(*(get(n) for n in NAMES))


def rows(table, names: tuple[str, ...] = NAMES) -> list[Row]:
    """A results table's rows as Rows, only the `names` columns read (the others None): far cheaper
    than DataFrame.iterrows, which builds a Series of every column per row."""
    present = [n for n in names if n in table]
    at = [NAMES.index(n) for n in present]
    out = []
    for cells in zip(*(table[n].tolist() for n in present)):
        values = [None] * len(NAMES)
        for i, v in zip(at, cells):
            values[i] = v
        out.append(Row(*values))
    return out


def measurement_fields(measurement_type) -> tuple[str, ...]:
    """The fields of judge.Measurement, which must be the measurement columns in table order."""
    return tuple(f.name for f in fields(measurement_type))
