"""Framework built-ins (torch F.rms_norm / nn.RMSNorm / F.normalize, flax nnx.RMSNorm) through the
runner: each agrees with the conventions it is declared for, the one real finding (F.normalize in
float16 on a zero row) is pinned, and the undeclared neighbours are measured to show why."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from normdiff.cases import suites  # noqa: E402
from normdiff.cases.model import Case  # noqa: E402
from normdiff.cases.suites import Suite  # noqa: E402
from normdiff.harness import api  # noqa: E402
from normdiff.harness.engine import judge as judging  # noqa: E402
from normdiff.harness.engine import oracle  # noqa: E402
from normdiff.harness.data.budgets import budget_for  # noqa: E402
from normdiff.harness.data.dtypes import get_format  # noqa: E402
from normdiff.implementations.entry import Implementation  # noqa: E402
from normdiff.implementations.frameworks import to_numpy  # noqa: E402
from normdiff.implementations import builtins, catalog, torch_own  # noqa: E402

HAVE_FLAX = all(i.unavailable_reason() is None for i in catalog.builtin_implementations())
# F.normalize computes max(norm, eps) in the input dtype: eps = 1e-12 underflows to 0 in float16,
# so a zero row is 0 / 0 = NaN where the contract gives 0 (bfloat16 has float32's exponent range)
FP16_ZERO_ROWS = {"l2_norm@torch/fp16/8x128/zero_rows", "l2_norm@torch/fp16/8x1024/zero_rows"}


def builtin_suite() -> Suite:
    """The smoke suite's cases of the built-ins' pairs plus the default suite's l2_norm@torch group."""
    pairs = set().union(*(i.op_conventions for i in catalog.builtin_implementations()))
    smoke = [c for c in suites.load("smoke").cases if (c.op, c.convention) in pairs]
    l2 = [c for c in suites.load("default").cases if (c.op, c.convention) == ("l2_norm", "torch")]
    return Suite("builtins", "", tuple(smoke + l2))


@pytest.fixture(scope="module")
def report():
    return api.run_suite(builtin_suite(), catalog.builtin_implementations())


def outcomes(report, impl: str) -> dict[str, str]:
    rows = report.results[(report.results["implementation"] == impl)
                          & (report.results["outcome"] != "unsupported")]
    return dict(zip(rows["case_id"], rows["outcome"].astype(str)))


@pytest.mark.parametrize("impl", [i.name for i in catalog.builtin_implementations()])
def test_builtin_agrees_with_its_conventions(report, impl):
    got = outcomes(report, impl)
    if impl.startswith("flax") and not HAVE_FLAX:
        assert set(got.values()) == {"unavailable"}
        pytest.skip("flax is not installed")
    assert {c.split("/")[1] for c in got} == {"fp32", "bf16", "fp16"}, "every dtype ran"
    known = FP16_ZERO_ROWS if impl == "torch-F.normalize" else set()
    if impl == "torch-F.normalize":  # its two roundings, a known finding (test_finding_F_normalize_rounds_twice)
        known = known | {c for c in got if "/fp32/" not in c and "/dy=" not in c}
    bad = {c: o for c, o in got.items() if o not in ("identical", "agree") and c not in known}
    assert not bad, bad


def test_finding_F_normalize_rounds_twice(report):
    # ||x|| rounded to the input dtype, then the quotient: within the max budget, off the one-rounding
    # chain on a large share of the elements (engine/chain.py), a known finding
    rows = report.results
    rows = rows[(rows["implementation"] == "torch-F.normalize") & (rows["pass"] == "forward")
                & rows["dtype"].isin(["bfloat16", "float16"]) & ~rows["case_id"].isin(FP16_ZERO_ROWS)]
    assert len(rows) and (rows["off_chain"] > 0.1).mean() > 0.5, rows[["case_id", "off_chain"]]
    assert (rows["max_ulp"] < 2).all() and set(rows["known_finding"].astype(bool)) == {True}


def test_finding_F_normalize_fp16_zero_rows_are_nan(report):
    rows = report.results.set_index(["implementation", "case_id"])
    for case_id in FP16_ZERO_ROWS:
        row = rows.loc[("torch-F.normalize", case_id)]
        assert row["outcome"] == "nan_mismatch" and row["nan_count"] > 0, case_id
        case = Case.from_id(case_id)  # the contract itself is finite there: x / max(0, 1e-12) = 0
        assert np.isfinite(oracle.evaluate(case.contract, case.inputs().as_float64())).all()


def test_torch_rms_norms_round_once_like_olmo2(report):
    # F.rms_norm and nn.RMSNorm give the bits of the one-rounding order (w * xh).to(d) that HF
    # Olmo2RMSNorm uses, which torch_own implements: identical in bf16 / fp16
    for case in builtin_suite().cases:
        if (case.op, case.convention) != ("rms_norm", "olmo2") or case.dtype == "float32":
            continue
        inputs = case.inputs()
        own = torch_own.run(case.op, case.contract, inputs)
        for fn in (builtins.functional_rms_norm, builtins.module_rms_norm):
            assert torch.equal(fn(case.op, case.contract, inputs), own), (fn.__name__, case.id)


def judge(out, case: Case, inputs=None) -> judging.Measurement:
    inputs = inputs or case.inputs()
    ref = oracle.evaluate(case.contract, inputs.as_float64(), inputs.num_heads)
    return judging.judge(to_numpy(out), ref, get_format(case.dtype), budget_for(case.dtype, case.op, case.span))


def test_not_declared_for_llama_cast_yet_within_budget():
    # why rms_norm@qwen3 / @llama is not declared: within budget, but a different rounding order,
    # so never identical to the Llama cast on a large share of bf16 elements
    case = Case.from_id("rms_norm@qwen3/bf16/8x1024/normal/w=trained")
    inputs = case.inputs()
    out = builtins.functional_rms_norm(case.op, case.contract, inputs)
    assert judge(out, case, inputs).outcome in ("identical", "agree")
    llama = torch_own.run(case.op, case.contract, inputs)
    assert (out != llama).float().mean() > 0.05


# (regime, least rel_l2 from Qwen3.5's l2norm): width 128 at rms r has ||x||^2 = 128 r^2, so eps 1e-6
# inside the root moves the result by ~1e-6 / (2 * 128 r^2): 4e-3 at r = 1e-3, 0.25 at r = 1e-4
@pytest.mark.parametrize("regime,least", [("normal", None), ("tiny_rms:1e-3", 3e-3),
                                          ("tiny_rms:1e-4", 0.2), ("zero_rows", None)])
def test_F_normalize_against_qwen35_l2norm(regime, least):
    # the same input bits under both conventions (case seeds ignore the convention): F.normalize's
    # clamp(eps=1e-12) is Qwen3.5's eps-inside l2norm (eps 1e-6) only while ||x||^2 >> 1e-6
    ours = Case.from_id(f"l2_norm@torch/fp32/8x128/{regime}")
    theirs = Case.from_id(f"l2_norm@qwen3.5/fp32/8x128/{regime}")
    assert np.array_equal(ours.inputs().arrays["x"], theirs.inputs().arrays["x"])
    m = judge(builtins.normalize(ours.op, ours.contract, ours.inputs()), theirs)
    assert (m.outcome == "disagree") == (least is not None), (m.outcome, m.rel_l2)
    if least is not None:
        assert m.rel_l2 > least, m.rel_l2


@pytest.mark.skipif(not HAVE_FLAX, reason="flax is not installed")
def test_flax_default_returns_float32_for_half_inputs(report):
    rows = report.results[report.results["implementation"] == "flax-rmsnorm"].set_index("case_id")
    bf16 = rows.loc["rms_norm@olmo2/bf16/4x128/normal/w=trained"]
    assert bf16["output_dtype"] == "float32"
    assert "returns float32 for bfloat16 input" in bf16["detail"]
    in_dtype = report.results[report.results["implementation"] == "flax-rmsnorm-dtype"].set_index("case_id")
    assert in_dtype.loc["rms_norm@olmo2/bf16/4x128/normal/w=trained", "output_dtype"] == "bfloat16"


def test_missing_framework_is_unavailable():
    impl = Implementation("fw-missing", "framework", "torch", "normdiff.implementations.builtins:normalize",
                          {("l2_norm", "torch")}, requires=("no_such_framework_xyz",))
    suite = Suite("one", "", (Case.from_id("l2_norm@torch/fp32/4x128/normal"),))
    result = api.run_suite(suite, [impl]).results.iloc[0]
    assert result["outcome"] == "unavailable"
    assert "no_such_framework_xyz is not installed" in result["detail"]


def test_an_op_without_a_weight_is_refused():
    case = Case.from_id("l2_norm@torch/fp32/4x128/normal")
    with pytest.raises(ValueError, match="takes a weight"):
        builtins.functional_rms_norm(case.op, case.contract, case.inputs())


def test_f_normalize_fp16_backward_overflows_inside_a_real_finding():
    # a real finding (issue 15's fuzz), not a budget: F.normalize's autograd forms dy / ||x|| in fp16,
    # 365 / 8.7e-5 overflows, and inf - inf is NaN where the exact gradient of one element is 0
    from normdiff.harness.engine.runner import prepare
    case = Case.from_id("l2_norm@torch/fp16/1x1/tiny_rms:1e-3/dy=large/out=dx")
    p = prepare(case)
    dx = to_numpy(builtins.normalize_backward(case.op, case.contract, p.inputs, p.dy)["x"])
    e = p.expected["x"]
    m = judging.judge(dx, e.ref, get_format("float16"), e.budget, operand="x")
    assert m.outcome == "nan_mismatch" and np.isnan(dx).all() and (e.ref.exact == 0).all()
    assert shows_a_finding(case, "torch-F.normalize", m)


def test_f_normalize_bf16_norm_is_a_coherent_scale_error_on_alike_rows():
    # a real finding (issue 15's fuzz): the norm rounded to bf16 is off the same way in every row
    # at mean 1000, std 1, which the channel-bias detector sees; one rounding of x / ||x|| does not
    from normdiff.harness.engine.runner import prepare
    case = Case.from_id("l2_norm@torch/bf16/33x71/narrow:1")
    p = prepare(case)
    e, fmt = p.expected["y"], get_format("bfloat16")
    y = to_numpy(builtins.normalize(case.op, case.contract, p.inputs))
    m = judging.judge(y, e.ref, fmt, e.budget, systematic=e.systematic)
    # within the Llama cast's 2 ulp, beyond the one rounding l2_norm takes (1), and coherent per channel
    assert m.outcome == "disagree" and e.budget < m.max_ulp < 2 and m.channel_bias_ulp > m.channel_bias_budget
    x = p.inputs.arrays["x"].astype(np.float64)
    once = (x / np.sqrt((x * x).sum(-1, keepdims=True))).astype(fmt.np_dtype)
    assert judging.judge(once, e.ref, fmt, e.budget, systematic=e.systematic).outcome in ("identical", "agree")
    assert shows_a_finding(case, "torch-F.normalize", m)


@pytest.mark.parametrize("case_id, impl, fn, name", [
    ("l2_norm@torch/fp16/2x1/zero_rows/eps=1e-06/dy=normal/out=dx", "torch-F.normalize", "normalize_backward", "x"),
    ("layer_norm@torch/fp16/36x65/spike/w=small/b=zeros/dy=aligned/out=db", "torch-F.layer_norm",
     "functional_layer_norm_backward", "bias")])
def test_fp16_backward_findings_are_real_and_explained(case_id, impl, fn, name):
    # real findings (issue 15's fuzz): F.normalize's eps rounded to a subnormal fp16; torch's fp16 db
    # summed with fp16 partials. Each is out of its derived budget, and a known finding explains it
    from normdiff.harness.engine.runner import prepare
    case = Case.from_id(case_id)
    p = prepare(case)
    got = to_numpy(getattr(builtins, fn)(case.op, case.contract, p.inputs, p.dy)[name])
    e = p.expected[name]
    m = judging.judge(got, e.ref, get_format("float16"), e.budget, operand=name)
    assert m.outcome == "disagree" and m.max_ulp < 3 * e.budget  # ~1% or 2 ulp off, not a bug's O(1)
    assert shows_a_finding(case, impl, m)


def shows_a_finding(case, impl: str, m) -> bool:
    """Whether the library's own row for `case` (its measurement `m`) shows a known finding, as a
    run's table judges it (engine/verdict.py: the case's columns, the outcome, its own bits)."""
    import pandas as pd
    from normdiff.harness.engine import verdict
    from normdiff.harness.engine.columns import case_columns
    row = pd.DataFrame([{**case_columns(case), "implementation": impl, "kind": "framework", **m.as_row()}])
    return verdict.annotate(row)[0]["known_finding"].iloc[0] != ""
