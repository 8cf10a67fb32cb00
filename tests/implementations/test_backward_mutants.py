"""The backward mutants: implementations/numpy_backward.py's `bug` knob, one deliberately wrong
backward per record of harness/data/backward_bugs.py.

For every bug, on its op@convention, in each dtype where it is a bug, on the input that exposes it
(EXPOSING: the shape, x's regime and the upstream gradient's regime, with why):
  - each output it corrupts is far from the exact VJP: its error, max |out - exact| / max |exact|,
    is more than SEPARATION times the correct numpy backward's own error on the same input;
  - each output it does not corrupt is bit-identical to the correct backward's;
  - its exact=True output (the same wrong formula in float64, unrounded) is close to its own float32
    output: within one ulp of the dtype at the output's largest value for bf16 / fp16 inputs (an
    output rounded to the dtype at most twice: a cast point and the final rounding), 1e-5 for
    float32; a rounding bug (record.rounding) has no formula of its own, so its exact output is the
    correct one, bit for bit.
And: outside its dtypes a bug is no deviation at all; the weight bugs vanish on all-ones weights
and the one-block bug up to 128 rows, as their records say; backward(exact=True) of the correct
backward is the oracle's VJP to 1e-12 on every op@convention.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

from normdiff.cases import regimes
from normdiff.cases.model import Case
from normdiff.harness.data.backward_bugs import ALL_DTYPES, BACKWARD_BUGS, OUTPUT_OPERANDS, OUTPUTS
from normdiff.harness.data.conventions import float_op_conventions
from normdiff.harness.data.dtypes import get_format
from normdiff.harness.data.ops import get_op
from normdiff.harness.engine import oracle
from normdiff.harness.engine.vjp import vjp
from normdiff.implementations import numpy_backward as nb

SEPARATION = 50.0  # a bug's error over the correct backward's, at least
F32_EXACT_TOL = 1e-5  # exact=True against the float32 path, float32 inputs

# bug -> (shape, x regime, gradient regime, why this input exposes it)
EXPOSING: dict[str, tuple[str, str, str, str]] = {
    "bwd-weight-twice": ("16x256", "normal", "aligned", "the projection term dominates for dy along y"),
    "bwd-weight-missing": ("16x256", "normal", "normal", "any dy, trained weights"),
    "bwd-offset-missing": ("16x256", "normal", "normal", "any dy: 1 + w against w"),
    "bwd-offset-added": ("16x256", "normal", "normal", "any dy: w against 1 + w"),
    "bwd-dw-input-dtype": ("4096x128", "normal", "aligned",
                           "dy along y: dw's terms of one sign, partial sums that grow, rounded at their size"),
    "bwd-dw-one-block": ("256x128", "normal", "normal", "more rows than one 128-row block"),
    "bwd-saved-var": ("16x256", "tiny_rms:0.1", "normal", "rms(x) far from 1 (at 1 var = rsqrt(var))"),
    "bwd-projection-dropped": ("16x256", "normal", "aligned", "the projection term dominates for dy along y"),
    "bwd-eps-outside": ("16x256", "tiny_rms:1e-3", "normal", "rms(x) ~ sqrt(eps): eps part of the denominator"),
    "bwd-gate-sigmoid-grad": ("16x256", "normal", "normal", "open gates z ~ N(0, 1)"),
    "bwd-l2-projection-dropped": ("16x128", "normal", "aligned", "the projection term dominates for dy along y"),
    "bwd-rope-not-transposed": ("8x4x128", "normal", "normal", "positions other than 0"),
}


def setup(bug_id: str, dtype: str, shape: str, regime: str, gradient: str, weight: str = "trained"):
    """(case, inputs, dy) for the bug's op@convention: dy drawn from `gradient` around the exact
    forward output, in the case dtype."""
    bug = BACKWARD_BUGS[bug_id]
    record = get_op(bug.op)
    choices = {}
    if record.operand("weight"):
        choices["weight"] = weight
    if record.operand("gate"):
        choices["gate"] = "open"
    case = Case.of(bug.op, bug.convention, dtype, shape, regime, **choices)
    inputs = case.inputs()
    y = oracle.evaluate(case.contract, inputs.as_float64(), inputs.num_heads)
    dy = regimes.draw_gradient(gradient, np.random.default_rng([case.seed, 11]), y)
    return case, inputs, dy.astype(get_format(dtype).np_dtype)


def rel_err(out: np.ndarray, exact: np.ndarray) -> float:
    """max |out - exact| / max |exact|."""
    return float(np.max(np.abs(out.astype(np.float64) - exact)) / np.max(np.abs(exact)))


def exact_tolerance(dtype: str) -> float:
    if dtype == "float32":
        return F32_EXACT_TOL
    return 2.0 ** -get_format(dtype).mantissa_bits  # one ulp at the largest value, relative


def separation(bug_id: str, dtype: str) -> dict:
    """Per corrupted output: (bug error / correct error, bug error, correct error), and the rest of
    what the tests check, on the bug's exposing input."""
    bug = BACKWARD_BUGS[bug_id]
    shape, regime, gradient, _ = EXPOSING[bug_id]
    case, inputs, dy = setup(bug_id, dtype, shape, regime, gradient)
    ref = vjp(case.contract, inputs.as_float64(), dy.astype(np.float64), inputs.num_heads)
    right = nb.backward(bug.op, case.contract, inputs, dy)
    wrong = nb.backward(bug.op, case.contract, inputs, dy, bug=bug_id)
    exact = nb.backward(bug.op, case.contract, inputs, dy, bug=bug_id, exact=True)
    exact_right = nb.backward(bug.op, case.contract, inputs, dy, exact=True)
    return {"case": case.id, "ref": ref, "right": right, "wrong": wrong, "exact": exact,
            "exact_right": exact_right,
            "sep": {o: (rel_err(wrong[OUTPUT_OPERANDS[o]], ref[OUTPUT_OPERANDS[o]])
                        / rel_err(right[OUTPUT_OPERANDS[o]], ref[OUTPUT_OPERANDS[o]]),
                        rel_err(wrong[OUTPUT_OPERANDS[o]], ref[OUTPUT_OPERANDS[o]]),
                        rel_err(right[OUTPUT_OPERANDS[o]], ref[OUTPUT_OPERANDS[o]]))
                    for o in bug.outputs}}


def _bug_dtypes():
    for bug_id, bug in BACKWARD_BUGS.items():
        for dtype in bug.dtypes:
            yield pytest.param(bug_id, dtype, id=f"{bug_id}-{dtype}")


# ---- the records -------------------------------------------------------------------------------

def test_records_are_well_formed_and_each_has_its_deviation():
    pairs = set(float_op_conventions())
    assert len(BACKWARD_BUGS) >= 11
    assert set(nb.DEVIATIONS) == set(BACKWARD_BUGS)
    for bug_id, bug in BACKWARD_BUGS.items():
        assert bug.id == bug_id and re.fullmatch(r"bwd(-[a-z0-9]+)+", bug_id), bug_id
        assert (bug.op, bug.convention) in pairs, bug_id
        assert bug.outputs and set(bug.outputs) <= set(OUTPUTS), bug_id
        operands = {o.name for o in get_op(bug.op).operands}
        assert {OUTPUT_OPERANDS[o] for o in bug.outputs} <= operands, bug_id
        assert bug.dtypes and set(bug.dtypes) <= set(ALL_DTYPES), bug_id
        assert bug.symptom and bug.formula and bug.source, bug_id
        assert "\n" not in bug.symptom and not bug.symptom.endswith("."), bug_id
        assert nb.DEVIATIONS[bug_id] != nb.CORRECT, bug_id
        assert bug.as_dict()["id"] == bug_id
    assert len(set(nb.DEVIATIONS.values())) >= len(BACKWARD_BUGS) - 1  # only the two dropped projections share one
    assert set(EXPOSING) == set(BACKWARD_BUGS)


# ---- each bug against the exact VJP ------------------------------------------------------------

@pytest.mark.parametrize("bug_id, dtype", list(_bug_dtypes()))
def test_a_bug_is_far_from_the_exact_vjp_and_touches_only_its_outputs(bug_id, dtype):
    bug = BACKWARD_BUGS[bug_id]
    m = separation(bug_id, dtype)
    for output, (ratio, wrong_err, right_err) in m["sep"].items():
        assert ratio > SEPARATION, (m["case"], output, ratio, wrong_err, right_err)
    right, wrong, exact = m["right"], m["wrong"], m["exact"]
    assert list(wrong) == list(right) and list(exact) == list(right)
    for name in right:
        assert wrong[name].dtype == right[name].dtype and exact[name].dtype == np.float64
        if name not in {OUTPUT_OPERANDS[o] for o in bug.outputs}:
            assert np.array_equal(wrong[name], right[name]), (m["case"], name)
    for output in bug.outputs:
        name = OUTPUT_OPERANDS[output]
        if bug.rounding:  # no formula of its own: exact is the correct exact output
            assert np.array_equal(exact[name], m["exact_right"][name]), (m["case"], name)
        else:
            err = rel_err(wrong[name], exact[name])
            assert err <= exact_tolerance(dtype), (m["case"], output, err)


@pytest.mark.parametrize("bug_id", [b for b, bug in BACKWARD_BUGS.items() if set(bug.dtypes) != set(ALL_DTYPES)])
def test_outside_its_dtypes_a_bug_is_no_deviation(bug_id):
    bug = BACKWARD_BUGS[bug_id]
    shape, regime, gradient, _ = EXPOSING[bug_id]
    for dtype in set(ALL_DTYPES) - set(bug.dtypes):
        case, inputs, dy = setup(bug_id, dtype, shape, regime, gradient)
        right = nb.backward(bug.op, case.contract, inputs, dy)
        wrong = nb.backward(bug.op, case.contract, inputs, dy, bug=bug_id)
        assert all(np.array_equal(wrong[k], right[k]) for k in right), case.id


@pytest.mark.parametrize("bug_id, shape, weight", [
    ("bwd-dw-one-block", "128x128", "trained"),  # one block: the first block's sum is the sum
    ("bwd-weight-twice", "16x256", "ones"),  # w_k = 1: the second factor is 1
    ("bwd-weight-missing", "16x256", "ones"),  # dy * 1 = dy
])
def test_a_bug_vanishes_where_its_record_says(bug_id, shape, weight):
    bug = BACKWARD_BUGS[bug_id]
    _, regime, gradient, _ = EXPOSING[bug_id]
    for dtype in bug.dtypes:
        case, inputs, dy = setup(bug_id, dtype, shape, regime, gradient, weight=weight)
        right = nb.backward(bug.op, case.contract, inputs, dy)
        wrong = nb.backward(bug.op, case.contract, inputs, dy, bug=bug_id)
        assert all(np.array_equal(wrong[k], right[k]) for k in right), case.id


# ---- the exact mode ----------------------------------------------------------------------------

# every drawn operand's regime for the exact-mode check (a bias and a residual of their own, not
# the zeros / normal defaults)
EXACT_CHOICES = {"weight": "trained", "gate": "open", "bias": "trained", "residual": "large"}


@pytest.mark.parametrize("op, conv", float_op_conventions())
def test_the_exact_correct_backward_is_the_vjp(op, conv):
    record = get_op(op)
    choices = {o.name: EXACT_CHOICES[o.name] for o in record.chosen}
    shape = "8x4x64" if "num_heads" in record.dims else "8x256"
    for dtype in ("float32", "bfloat16"):
        for regime in ("normal", "tiny_rms:1e-3"):
            case = Case.of(op, conv, dtype, shape, regime, **choices)
            inputs = case.inputs()
            # one upstream gradient per result: dy, and a fused add's {"y": dy, "residual_out": dh}
            drawn = [np.random.default_rng([case.seed, 11, *([i] if i else [])]).standard_normal(
                (case.rows, case.width)).astype(get_format(dtype).np_dtype) for i in range(len(record.results))]
            dy = drawn[0] if len(drawn) == 1 else dict(zip(record.results, drawn))
            dy64 = {k: v.astype(np.float64) for k, v in dy.items()} if isinstance(dy, dict) else dy.astype(np.float64)
            ref = vjp(case.contract, inputs.as_float64(), dy64, inputs.num_heads)
            for order in nb.DW_ORDERS:
                out = nb.backward(op, case.contract, inputs, dy, order, exact=True)
                assert set(out) == set(ref)
                for name in ref:
                    assert out[name].dtype == np.float64 and out[name].shape == ref[name].shape
                    assert rel_err(out[name], ref[name]) < 1e-12, (case.id, order, name)


# ---- the adapters ------------------------------------------------------------------------------

def test_mutant_and_run_backward_are_backward_with_their_bug():
    case, inputs, dy = setup("bwd-gate-sigmoid-grad", "bfloat16", "4x32", "normal", "normal")
    right = nb.backward(case.op, case.contract, inputs, dy, "blocked")
    assert all(np.array_equal(v, right[k]) for k, v in nb.run_backward(case.op, case.contract, inputs, dy).items())
    for bug_id in BACKWARD_BUGS:
        adapter = nb.mutant(bug_id)
        assert adapter.bug == bug_id
        got = adapter(case.op, case.contract, inputs, dy)
        want = nb.backward(case.op, case.contract, inputs, dy, "blocked", bug=bug_id)
        assert list(got) == list(want) and all(np.array_equal(got[k], want[k]) for k in want)


def test_an_unknown_bug_is_a_value_error_naming_the_known_ones():
    case, inputs, dy = setup("bwd-weight-twice", "float32", "2x8", "normal", "normal")
    for bad in ("bwd-nope", "weight-twice", ""):
        with pytest.raises(ValueError, match="known: bwd-dw-input-dtype, bwd-dw-one-block"):
            nb.mutant(bad)
    with pytest.raises(ValueError, match=r"unknown backward bug 'bwd-nope'.*bwd-weight-twice"):
        nb.backward(case.op, case.contract, inputs, dy, bug="bwd-nope")


def test_the_input_dtype_accumulator_has_only_the_running_sum_orders():
    case, inputs, dy = setup("bwd-dw-input-dtype", "bfloat16", "300x16", "normal", "normal")
    for order in ("sequential", "blocked"):
        nb.backward(case.op, case.contract, inputs, dy, order, bug="bwd-dw-input-dtype")
    for order in ("pairwise", "float64"):
        with pytest.raises(ValueError, match="running-sum orders"):
            nb.backward(case.op, case.contract, inputs, dy, order, bug="bwd-dw-input-dtype")


def test_a_low_precision_running_sum_rounds_after_each_add():
    rng = np.random.default_rng(3)
    terms = rng.standard_normal((300, 5)).astype(np.float32)
    fmt = get_format("bfloat16")
    acc = np.zeros(5, fmt.np_dtype)
    for t in terms:
        acc = (acc.astype(np.float32) + t).astype(fmt.np_dtype)
    assert np.array_equal(nb.reduce_rows(terms, "sequential", fmt.np_dtype), acc)
    partials = []
    for start in range(0, 300, nb.BLOCK_ROWS):
        p = np.zeros(5, fmt.np_dtype)
        for t in terms[start:start + nb.BLOCK_ROWS]:
            p = (p.astype(np.float32) + t).astype(fmt.np_dtype)
        partials.append(p)
    total = np.zeros(5, fmt.np_dtype)
    for p in partials:
        total = (total.astype(np.float32) + p.astype(np.float32)).astype(fmt.np_dtype)
    assert np.array_equal(nb.reduce_rows(terms, "blocked", fmt.np_dtype), total)
