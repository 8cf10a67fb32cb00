"""A fused residual add (add_rms_norm) returns two results, y and residual_out: each is a case of
its own (residual_out's id names it with out=, y's id is the plain one), one call computes both,
and the backward call gets one upstream gradient per result."""
import numpy as np
import pytest

from normdiff.cases import suites
from normdiff.cases.model import Case
from normdiff.harness.data.errors import UsageError
from normdiff.harness.engine import oracle, runner


def _case(**kw):
    return Case.of("add_rms_norm", "qwen3", "bfloat16", "4x64", weight="trained", residual="large", **kw)


def test_each_result_is_a_case_and_one_call_computes_both():
    y, h = _case().outputs()
    assert (y.output, h.output) == ("y", "residual_out")
    assert y.id == "add_rms_norm@qwen3/bf16/4x64/normal/w=trained/r=large"
    assert h.id == y.id + "/out=residual_out" and h.call_id == y.call_id == y.id
    assert Case.from_id(h.id) == h and Case.from_id(y.id) == y
    prepared = runner.prepare_all([y, h])
    assert len(prepared) == 1 and set(prepared[0].expected) == {"y", "residual_out"}
    # residual_out's reference is the exact sum; its budget a correctly rounded one's
    inputs = y.inputs()
    exact = inputs.arrays["x"].astype(np.float64) + inputs.arrays["residual"].astype(np.float64)
    assert np.array_equal(prepared[0].expected["residual_out"].ref.exact, exact)
    assert prepared[0].expected["residual_out"].budget == 0.5


def test_an_out_that_is_no_result_names_the_results():
    with pytest.raises(UsageError, match="returns y, residual_out"):
        _case(output="h")
    with pytest.raises(UsageError, match="needs dy=REGIME"):
        Case.from_id("add_rms_norm@qwen3/bf16/4x64/normal/w=trained/r=large/out=dx")
    with pytest.raises(UsageError, match="returns y"):
        Case.of("rms_norm", "qwen3", "bfloat16", "4x64", output="residual_out")


def test_the_backward_call_gets_an_upstream_gradient_per_result():
    case = _case(dy="normal")
    assert [c.output for c in case.outputs()] == ["dx", "dresidual", "dw"]
    results = oracle.results(case.contract, case.inputs().arrays)
    dys = case.upstreams(results)
    assert set(dys) == {"y", "residual_out"}
    assert all(str(g.dtype) == "bfloat16" and g.shape == (4, 64) for g in dys.values())  # the case dtype
    assert not np.array_equal(dys["y"], dys["residual_out"])  # drawn on streams of their own
    # dy of y is what a one-result op's case would draw: the first version's stream
    assert np.array_equal(dys["y"], case.upstream(results["y"]))
    prepared = runner.prepare(case)
    assert set(prepared.expected) == {"x", "residual", "weight"} and isinstance(prepared.dy, dict)
    # x and residual get the same gradient, dresidual_out plus the norm's
    assert np.allclose(prepared.expected["x"].ref.exact, prepared.expected["residual"].ref.exact)


def test_a_suite_group_yields_both_results():
    group = dict(ops=["add_rms_norm"], conventions=["vllm"], dtypes=["float16"], shapes=["4x64"],
                 regimes=["normal"], weights=["trained"], residuals=["normal", "large"])
    cases = suites.expand(group)
    assert [c.output for c in cases] == ["y", "residual_out"] * 2
    assert {c.choice("residual") for c in cases} == {"normal", "large"}
