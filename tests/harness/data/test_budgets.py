"""The ULP budgets (harness/data/budgets.py), in both directions: correct pipelines land within
them, catalogued bugs do not. Budgets are looked up through each op record's rounding rule."""
from __future__ import annotations

import numpy as np
import pytest

from normdiff.cases import suites
from normdiff.harness.data.budgets import ULP_BUDGETS, budget_for, budget_table, channel_bias_budget
from normdiff.harness.data.bugs import BUGS
from normdiff.harness.data.dtypes import get_format
from normdiff.harness.data.knobs import ROUNDING_KNOBS
from normdiff.harness.data.ops import OPS
from normdiff.harness.engine import judge, oracle
from normdiff.implementations import numpy_own

CONVENTION = {"rms_norm": "qwen3", "gated_rms_norm": "qwen3.5", "l2_norm": "qwen3.5", "qk_norm": "qwen3",
              "qk_norm_rope": "qwen3"}


def worst_ulp(op: str, dtype: str, regimes, weights=("trained", "ones"), samples=2, contract_changes=None) -> float:
    """The worst max_ulp of own NumPy (the convention's exact cast points) over a grid of cases."""
    heads = "num_heads" in OPS[op].dims
    cases = suites.expand(dict(ops=[op], conventions=[CONVENTION[op]], dtypes=[dtype],
                               shapes=["16x8x64" if heads else "16x1024"], regimes=list(regimes),
                               weights=list(weights), gates=["open", "closed"], samples=samples))
    worst = 0.0
    for case in cases:
        inputs = case.inputs()
        contract = case.contract.replace(**(contract_changes or {}))
        exact = oracle.evaluate(case.contract, inputs.arrays, inputs.num_heads)
        with np.errstate(all="ignore"):
            out = numpy_own.run(op, contract, inputs)
        m = judge.judge(out, exact, get_format(dtype), np.inf, case.num_heads, op)
        worst = max(worst, m.max_ulp if m.max_ulp == m.max_ulp else np.inf)
    return worst


def test_the_rule_comes_from_the_op_record():
    assert budget_for("bfloat16", "rms_norm") == 2.0 and budget_for("float16", "gated_rms_norm") == 2.5
    assert budget_for("bfloat16", "qk_norm_rope") == 5.0 and budget_for("float32", "qk_norm_rope") == 16.0
    assert {op.rounding for op in OPS.values()} <= set(ULP_BUDGETS["bfloat16"])
    # what reports record: every op's budget, and the ops whose rule differs
    assert budget_table()["bfloat16"] == {"*": 2.0, "gated_rms_norm": 2.5, "qk_norm_rope": 5.0}
    assert budget_table()["float32"] == {"*": 16.0}
    with pytest.raises(ValueError, match="no ULP budget for dtype 'int8'"):
        budget_for("int8", "rms_norm")


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_a_correct_pipeline_lands_within_its_budget(op, dtype):
    regimes = ("normal", "tiny_rms:1e-3", "mean_shift:3", "zero_rows")
    assert worst_ulp(op, dtype, regimes) <= budget_for(dtype, op)


def test_the_gated_norm_needs_its_larger_budget():
    # HF's three roundings put a correct gated norm beyond the 2 ulp of one or two roundings
    assert worst_ulp("gated_rms_norm", "bfloat16", ("normal",), weights=("trained", "large"), samples=4) > 2.0


# formula bugs exposed on tiny or typical inputs (the rounding bugs, offset_dtype and stats_dtype,
# stay within the budget elementwise by nature: the per-channel and per-row detectors catch them)
FORMULA_BUGS = [b for b in BUGS.values() if b.exposing_regimes[0] in ("tiny_rms", "normal")
                and not b.changes.keys() & set(ROUNDING_KNOBS)]


@pytest.mark.parametrize("bug", FORMULA_BUGS, ids=lambda b: b.id)
def test_each_catalogued_formula_bug_leaves_the_budget_where_it_is_exposed(bug):
    regime = "tiny_rms:1e-4" if bug.exposing_regimes[0] == "tiny_rms" else "normal"
    heads = "num_heads" in OPS[bug.op].dims
    (case,) = suites.expand(dict(ops=[bug.op], conventions=[bug.convention], dtypes=["bfloat16"],
                                 shapes=["16x8x64" if heads else "16x1024"], regimes=[regime], weights=["trained"],
                                 gates=["closed"]))
    inputs = case.inputs()
    exact = oracle.evaluate(case.contract, inputs.arrays, inputs.num_heads)
    with np.errstate(all="ignore"):
        out = numpy_own.run(bug.op, bug.contract, inputs)
    m = judge.judge(out, exact, get_format("bfloat16"), budget_for("bfloat16", bug.op), case.num_heads, bug.op)
    assert m.outcome in ("disagree", "nan_mismatch"), (bug.id, m.max_ulp)


def test_channel_bias_is_judged_only_with_enough_rows():
    assert channel_bias_budget(8) is None and channel_bias_budget(32) == pytest.approx(6 / 32 ** 0.5)
    assert channel_bias_budget(10_000) == 0.5


# Known gaps, left for the judging issue (budgets derived for every legal rounding and reduction
# order): these correct pipelines leave their budget today, so the tests above stay off outlier
# channels. fp16: x / rms is subnormal next to the outliers, the Llama cast rounds it there (absolute
# error up to 2^-25) and a gain of ~7.7 scales that error to ~4 ulp of the output, also subnormal.
# bf16 gated: three roundings plus float32 noise reach 2.56 ulp, past the 2.5 ceiling derived
# without it. Each xfail is strict: the day the budgets cover them, these must be turned into tests.
@pytest.mark.xfail(strict=True, reason="known budget gaps on outlier channels (see the comment above)")
@pytest.mark.parametrize("op, dtype, weights", [("rms_norm", "float16", ("large",)),
                                                ("gated_rms_norm", "bfloat16", ("trained",))])
def test_outlier_channels_stay_within_budget(op, dtype, weights):
    assert worst_ulp(op, dtype, ("outliers",), weights=weights) <= budget_for(dtype, op)
