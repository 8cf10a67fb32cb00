"""normdiff.strategies: every case drawn is valid and replays from its id, each draw obeys the op
record and the layouts' rules, and shrinking goes toward the simplest case (1 row, the narrowest
width, x normal, the operands' defaults, the config eps, contiguous memory, sample 0)."""
from pathlib import Path

import pytest
from hypothesis import HealthCheck, configuration, find, given, settings

from normdiff import strategies as nds
from normdiff.cases import layouts
from normdiff.cases.model import Case
from normdiff.harness.data.errors import UsageError
from normdiff.harness.data.ops import CASE, OPS

# Hypothesis' own files (its constants cache) go with the tests' other caches, never into the cwd
configuration.set_hypothesis_home_dir(Path(__file__).resolve().parent.parent / ".pytest_cache" / "hypothesis")
QUICK = settings(max_examples=400, database=None, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FIND = settings(max_examples=2000, database=None, deadline=None)


@QUICK
@given(nds.cases(passes=("forward", "backward"), max_rows=6, max_width=96))
def test_every_case_drawn_is_valid_and_replays_from_its_id(case):
    again = Case.from_id(case.id)
    assert again == case and again.seed == case.seed, case.id
    record = OPS[case.op]
    assert 1 <= case.rows <= 6 and 1 <= case.width <= 96
    assert case.width % case.num_heads == 0
    if record.even_head_dim:
        assert case.head_dim % 2 == 0, case.id
    if "num_heads" not in record.dims:
        assert case.num_heads == 1
    if layouts.LAYOUTS[case.layout].moves == layouts.PER_CASE:
        assert {case.choice(o.name) for o in record.operands if o.per_case_array} <= set(layouts.CONSTANT_WEIGHTS)
    if case.dy:
        assert case.output in record.gradients
    if record.quantizes:  # forward only, a whole number of its blocks wide
        assert not case.dy and case.width % max(1, nds.block_of(case.op, case.convention)) == 0, case.id
    assert case.dtype in nds.DTYPES


@QUICK
@given(nds.cases(op="qk_norm_rope", max_width=64, max_heads=4))
def test_a_rotating_op_gets_even_heads_within_the_width(case):
    assert case.head_dim % 2 == 0 and case.num_heads <= 4 and case.width <= 64


@QUICK
@given(nds.cases(pairs=["rms_norm@qwen3", ("l2_norm", "torch")], dtypes="bf16", layouts=["contiguous"],
                 regimes=["tiny_rms"], eps=["config"]))
def test_the_arguments_narrow_every_draw(case):
    assert (case.op, case.convention) in {("rms_norm", "qwen3"), ("l2_norm", "torch")}
    assert case.dtype == "bfloat16" and case.layout == "contiguous" and case.eps is None
    assert case.regime.startswith("tiny_rms:") and case.regime.split(":")[1] in nds.REGIME_PARAMETERS["tiny_rms"]


@QUICK
@given(nds.cases(layouts=["broadcast"]))
def test_only_broadcast_draws_constant_weights_and_ops_that_have_one(case):
    assert case.layout == "broadcast"
    assert any(o.per == CASE for o in OPS[case.op].operands)
    assert {case.choice(o.name) for o in OPS[case.op].operands if o.per_case_array} <= set(layouts.CONSTANT_WEIGHTS)


def test_head_regimes_only_for_ops_with_heads():
    heads = {name for name, r in nds._regimes.INPUT_REGIMES.items() if r.needs_heads}
    assert not {nds._regimes.split(n)[0] for n in nds._regime_names("rms_norm", None)} & heads
    assert heads <= {nds._regimes.split(n)[0] for n in nds._regime_names("qk_norm", None)}
    with pytest.raises(UsageError, match="no case fits"):
        nds.cases(op="rms_norm", regimes=["head_scales"])


def test_the_simplest_case_is_what_anything_shrinks_to():
    c = find(nds.cases(), lambda c: True, settings=FIND)
    assert c == Case(op="rms_norm", convention=nds.PAIRS[0][1], dtype="float32", rows=1, width=1)
    assert c.id == f"rms_norm@{nds.PAIRS[0][1]}/fp32/1x1/normal/w=ones"


@pytest.mark.parametrize("condition, expected", [
    (lambda c: c.rows >= 3 and c.width >= 10, {"rows": 3, "width": 10, "regime": "normal", "layout": "contiguous"}),
    (lambda c: c.layout != "contiguous", {"rows": 1, "width": 1, "layout": "transposed"}),
    (lambda c: c.regime.startswith("tiny_rms"), {"regime": "tiny_rms:1e-3", "rows": 1, "width": 1}),
    (lambda c: c.regime.startswith("tiny_rms") and c.regime != "tiny_rms:1e-3", {"regime": "tiny_rms:1e-2"}),
    (lambda c: c.layout == "broadcast", {"layout": "broadcast", "choices": (("weight", "ones"),)}),
    (lambda c: c.eps is not None, {"eps": 1e-5, "sample": 0}),  # qwen3's config eps is 1e-6: 1e-5 is next
    (lambda c: c.sample > 0, {"sample": 1, "rows": 1}),
    (lambda c: c.dtype == "float16", {"dtype": "float16", "rows": 1}),
])
def test_shrinking_goes_toward_the_simplest_value_of_each_draw(condition, expected):
    c = find(nds.cases(op="rms_norm", convention="qwen3"), condition, settings=FIND)
    assert {k: getattr(c, k) for k in expected} == expected, c.id


def test_a_headed_op_shrinks_to_one_head_of_the_narrowest_width():
    c = find(nds.cases(op="qk_norm_rope"), lambda c: True, settings=FIND)
    assert (c.rows, c.num_heads, c.head_dim) == (1, 1, 2) and c.id.startswith("qk_norm_rope@qwen3/fp32/1x1x2/")
    c = find(nds.cases(op="qk_norm"), lambda c: c.num_heads >= 2, settings=FIND)
    assert (c.num_heads, c.head_dim) == (2, 1)


def test_a_backward_case_shrinks_to_dy_normal_judging_dx():
    c = find(nds.cases(op="rms_norm", convention="qwen3", passes=("forward", "backward")), lambda c: bool(c.dy),
             settings=FIND)
    assert (c.dy, c.output, c.rows, c.width) == ("normal", "dx", 1, 1)
    assert c.id == "rms_norm@qwen3/fp32/1x1/normal/w=ones/dy=normal/out=dx"


def test_building_blocks():
    assert find(nds.shapes_for("group_gated_rms_norm", max_width=16), lambda s: s[2] >= 3, settings=FIND) == (1, 3, 3)
    assert find(nds.operand_regimes("layer_norm"), lambda c: True, settings=FIND) == (("weight", "ones"),
                                                                                       ("bias", "zeros"))
    assert find(nds.layouts(per_case={"weight": "trained"}), lambda n: n != "contiguous", settings=FIND) == "transposed"
    assert find(nds.op_conventions(op="layer_norm"), lambda p: True, settings=FIND)[0] == "layer_norm"
    assert find(nds.case_ids(op="l2_norm", convention="torch"), lambda i: True, settings=FIND) == \
        "l2_norm@torch/fp32/1x1/normal"


@pytest.mark.parametrize("kwargs, says", [
    ({"op": "rms_nrom"}, "unknown op"),
    ({"op": "layer_norm", "convention": "qwen3"}, "convention qwen3 does not define layer_norm"),
    ({"convention": "qwen9"}, "unknown convention"),
    ({"dtypes": ["float64"]}, "no ULP budget"),
    ({"max_rows": 0}, "max_rows must be a whole number >= 1"),
    ({"max_width": 2 ** 21}, "at most"),
    ({"passes": ["sideways"]}, "passes are forward, backward"),
    ({"layouts": ["diagonal"]}, "unknown layout"),
    ({"pairs": ["rms_norm"]}, "written 'rms_norm@qwen3'"),
    ({"eps": []}, "at least one value"),
])
def test_bad_arguments_are_usage_errors_when_the_strategy_is_made(kwargs, says):
    with pytest.raises(UsageError, match=says):
        nds.cases(**kwargs)
