"""The rounding chain (engine/chain.py): a correct implementation is inside the legal set of its
contract's chain on every element, a chain with one rounding more is outside it on a large share,
and the judge says so where the maximum-based budget cannot."""
import numpy as np
import pytest

from normdiff.cases.model import Case
from normdiff.harness.data.dtypes import get_format
from normdiff.harness.engine import chain, judge, runner
from normdiff.implementations import numpy_own

CASES = [f"rms_norm@olmo2/{d}/{s}/{r}/w=trained" for d in ("bf16", "fp16") for s in ("8x128", "8x1024")
         for r in ("normal", "large", "tiny_rms:1e-3", "outliers")]


def judged(case_id: str, contract_changes: dict | None = None):
    """The case's prepared y and the judgement of numpy_own's output under its contract changed by
    `contract_changes` (the code under test)."""
    case = Case.from_id(case_id)
    prepared = runner.prepare(case)
    expected = prepared.expected["y"]
    out = numpy_own.run(case.op, case.contract.replace(**(contract_changes or {})), prepared.inputs)
    out = out[0] if isinstance(out, tuple) else out
    return expected, judge.judge(out, expected.ref, get_format(case.dtype), expected.budget, case.num_heads, case.op,
                                 systematic=expected.systematic)


@pytest.mark.parametrize("case_id", CASES)
def test_the_contracts_own_float32_pipeline_is_on_its_chain(case_id):
    expected, m = judged(case_id)
    assert expected.ref.chain is not None
    assert m.off_chain == 0.0 and m.outcome in ("agree", "identical")
    assert m.chain_identical > 0.99  # only a float32 statistic's own error flips a rounding near a tie


@pytest.mark.parametrize("case_id", CASES)
def test_one_rounding_more_is_off_the_chain(case_id):
    _, m = judged(case_id, {"cast": "llama"})
    assert m.off_chain > 5 * chain.OFF_CHAIN_SHARE, m
    assert m.outcome == "disagree"


def test_a_second_rounding_hidden_under_the_old_budget_is_named_by_the_chain():
    # 1.76 ulp where the Llama cast's 2-ulp chain was the budget for every contract: the
    # one-rounding contract's budget is 1 now, and inside it the chain still sees the rounding
    _, m = judged("rms_norm@olmo2/bf16/8x1024/normal/w=trained", {"cast": "llama"})
    assert m.outcome == "disagree"
    inside = Case.from_id("rms_norm@olmo2/bf16/8x1024/normal/w=trained")
    assert runner.prepare(inside).expected["y"].budget < 1.1


def test_weight_of_ones_leaves_the_chains_alike():
    # w * round(x_hat) = round(x_hat) when w = 1: no second rounding, nothing to see
    _, m = judged("rms_norm@olmo2/bf16/8x1024/normal/w=ones", {"cast": "llama"})
    assert m.off_chain == 0.0 and m.outcome in ("agree", "identical")


def test_fused_add_rounding_its_sum_first_is_off_vllms_chain_and_on_qwen3s():
    vllm = "add_rms_norm@vllm/bf16/8x1024/normal/w=trained/r=normal"
    _, m = judged(vllm, {"residual_dtype": "input"})
    assert m.outcome == "disagree" and m.off_chain > 5 * chain.OFF_CHAIN_SHARE
    _, m = judged("add_rms_norm@qwen3/bf16/8x1024/normal/w=trained/r=normal")
    assert m.outcome in ("agree", "identical") and m.off_chain == 0.0


@pytest.mark.parametrize("case_id", ["layer_norm@torch/bf16/8x1024/normal/w=trained/b=trained",
                                     "layer_norm@torch/fp16/16x128/narrow:1/w=trained/b=trained",
                                     "gated_rms_norm@qwen3.5/bf16/8x1024/normal/w=trained/z=open",
                                     "qk_norm@qwen3/bf16/4x8x128/normal/w=trained",
                                     "l2_norm@qwen3.5/fp16/8x128/normal"])
def test_every_op_with_a_chain_keeps_its_own_pipeline_on_it(case_id):
    expected, m = judged(case_id)
    assert expected.ref.chain is not None and m.off_chain == 0.0, m


@pytest.mark.parametrize("case_id", ["rms_norm@olmo2/fp32/8x128/normal/w=trained",
                                     "qk_norm_rope@qwen3/bf16/4x8x128/normal/w=trained"])
def test_no_chain_where_it_means_nothing(case_id):
    # float32: a correct pipeline's own error is the output's ULP; RoPE's rotation cancels
    expected, m = judged(case_id)
    assert expected.ref.chain is None and np.isnan(m.off_chain)


def test_float64_to_bfloat16_is_rounded_once():
    # ml_dtypes rounds a float64 through float32 (twice): just past a midpoint lands on it, then to even
    fmt = get_format("bfloat16")
    past = 1 + 2.0 ** -8 + 2.0 ** -30
    assert fmt.round(np.array([past]))[0] == 1 + 2.0 ** -7
    assert fmt.round(np.array([1 + 2.0 ** -8]))[0] == 1.0  # a true tie goes to even
    values = np.random.default_rng(0).standard_normal(10000) * 1e3
    assert np.all(np.abs(fmt.round(values) - values) <= fmt.ulp(values) / 2)
