"""Backward cases: one case per gradient of a call, ids that replay, dy drawn once per call, suite
groups with dy and passes, and the pass filter."""
import numpy as np
import pytest

from normdiff.cases import suites
from normdiff.harness.data.ops import OPS
from normdiff.cases.model import Case
from normdiff.harness.data.errors import UsageError
from normdiff.harness.engine import oracle


def gated(**kw):
    return Case.of("gated_rms_norm", "qwen3.5", "bf16", "8x128", "normal", weight="trained", **kw)


def test_a_backward_case_has_one_case_per_gradient_and_replays_from_its_id():
    c = gated(dy="aligned")
    outs = c.outputs()
    assert [o.output for o in outs] == ["dx", "dgate", "dw"]
    assert all(o.pass_ == "backward" and o.call_id == c.call_id for o in outs)
    assert outs[1].id == "gated_rms_norm@qwen3.5/bf16/8x128/normal/w=trained/z=open/dy=aligned/out=dgate"
    assert all(Case.from_id(o.id) == o for o in outs)
    assert gated().pass_ == "forward" and gated().outputs() == [gated()] and gated().output == "y"


def test_forward_ids_are_unchanged_by_the_pass_axis():
    assert gated().id == "gated_rms_norm@qwen3.5/bf16/8x128/normal/w=trained/z=open"


def test_dy_is_drawn_once_per_call_in_the_case_dtype_and_aligned_with_y():
    c = gated(dy="aligned")
    inputs = c.inputs()
    y = oracle.evaluate(c.contract, inputs.arrays, inputs.num_heads)
    dys = [o.upstream(y) for o in c.outputs()]
    assert all(d.dtype == inputs.arrays["x"].dtype for d in dys)
    assert all(np.array_equal(d, dys[0]) for d in dys)
    aligned = dys[0].astype(np.float64)
    normal = gated(dy="normal").upstream(y).astype(np.float64)
    cos = lambda a, b: np.sum(a * b) / np.sqrt(np.sum(a * a) * np.sum(b * b))  # noqa: E731
    assert cos(aligned, y) > 0.9 > abs(cos(normal, y))
    with pytest.raises(ValueError, match="forward case"):
        gated().upstream(y)


@pytest.mark.parametrize("bad, message", [
    ("rms_norm@qwen3/bf16/8x128/normal/w=ones/out=dx", "needs dy="),
    ("rms_norm@qwen3/bf16/8x128/normal/w=ones/dy=sideways/out=dx", "gradient regime"),
    ("rms_norm@qwen3/bf16/8x128/normal/w=ones/dy=normal/out=dgate", "outputs dx, dw"),
    ("l2_norm@qwen3.5/bf16/8x128/normal/dy=normal/out=dw", "outputs dx"),
])
def test_malformed_backward_ids_say_what_is_wrong(bad, message):
    with pytest.raises(UsageError, match=message):
        Case.from_id(bad)


def group(**kw):
    return dict(ops=["rms_norm"], conventions=["qwen3"], dtypes=["float32"], shapes=["8x128"], regimes=["normal"], **kw)


def test_a_group_with_dy_runs_both_passes_and_passes_narrows_it():
    both = suites.expand(group(dy=["normal", "aligned"]))
    assert [c.output for c in both] == ["y", "dx", "dw", "dx", "dw"]
    backward = suites.expand(group(dy=["normal"], passes=["backward"]))
    assert [c.output for c in backward] == ["dx", "dw"]
    assert [c.output for c in suites.expand(group(passes=["backward"]))] == ["dx", "dw"]  # dy normal by default
    assert [c.output for c in suites.expand(group())] == ["y"]


def test_dy_with_only_the_forward_pass_is_refused():
    with pytest.raises(suites.SuiteError, match="only the backward pass uses"):
        suites.expand(group(dy=["normal"], passes=["forward"]))
    with pytest.raises(suites.SuiteError, match="gradient regime"):
        suites.expand(group(dy=["sideways"]))


def test_the_pass_filter():
    suite = suites.Suite("s", "", tuple(suites.expand(group(dy=["normal"]))))
    assert {c.pass_ for c in suites.for_pass(suite, "backward").cases} == {"backward"}
    assert {c.pass_ for c in suites.for_pass(suite, "forward").cases} == {"forward"}
    assert suites.for_pass(suite, "both") is suite
    with pytest.raises(UsageError, match="no backward cases"):
        suites.for_pass(suites.Suite("f", "", tuple(suites.expand(group()))), "backward")
    with pytest.raises(UsageError, match="one of"):
        suites.for_pass(suite, "sideways")


def test_the_default_suite_runs_every_op_backward():
    cases = suites.load("default").cases
    backward = {c.op for c in cases if c.pass_ == "backward"}
    assert backward == {c.op for c in cases if OPS[c.op].backward} == {n for n, op in OPS.items() if op.backward}
    assert {c.output for c in cases} == {out for op in OPS.values() for out in op.outputs}  # every output of every op
