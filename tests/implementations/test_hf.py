"""The real transformers layers through the runner: each family agrees with its declared convention,
the attention path is exact and really per head (or full vector), and a missing class is reported
as `unavailable` with its name, never skipped."""
from __future__ import annotations


import numpy as np
import pytest

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

from normdiff.cases import suites  # noqa: E402
from normdiff.cases.model import Case, CaseInputs  # noqa: E402
from normdiff.cases.suites import Suite  # noqa: E402
from normdiff.harness import api  # noqa: E402
from normdiff.harness.engine import judge  # noqa: E402
from normdiff.harness.engine import oracle  # noqa: E402
from normdiff.harness.data.budgets import budget_for  # noqa: E402
from normdiff.harness.data.ops import OPS  # noqa: E402
from normdiff.harness.data.dtypes import get_format  # noqa: E402
from normdiff.implementations.entry import Implementation  # noqa: E402
from normdiff.implementations.frameworks import to_numpy  # noqa: E402
from normdiff.implementations.frameworks.torch import from_numpy as to_torch  # noqa: E402
from normdiff.implementations import catalog, hf, hf_families  # noqa: E402

DTYPES = ("float32", "bfloat16", "float16")
# per op: the regimes that stress it (scope needs heads at different scales, eps a tiny rms)
STRESS = {"rms_norm": ("normal", "tiny_rms:1e-3", "zero_rows"), "l2_norm": ("normal", "tiny_rms:1e-4", "zero_rows"),
          "gated_rms_norm": ("normal", "zero_rows"), "qk_norm": ("head_scales:lognormal", "zero_heads"),
          "qk_norm_rope": ("head_scales:lognormal", "zero_heads"), "layer_norm": ("normal", "mean_shift:3", "zero_rows"),
          "group_gated_rms_norm": ("normal", "group_scales", "zero_rows")}


def hf_impls() -> list[Implementation]:
    return catalog.hf_implementations()


def identity_operands(op: str, conv: str) -> dict:
    """The operands a convention's HF class has no parameter for, drawn as the identity (weight
    ones, bias zeros): the only values such a class can be measured on (hf_families.Part.lacks)."""
    lacks = {o for family in hf_families.FAMILIES.values() if family.convention == conv and op in family.ops()
             for o in family.ops()[op].lacks(OPS[op].inputs)} if op in OPS else set()
    return {**({"weights": ["ones"]} if "weight" in lacks else {}), **({"biases": ["zeros"]} if "bias" in lacks else {})}


def extra_cases(op: str, conv: str) -> list[Case]:
    heads = "num_heads" in OPS[op].dims
    group = dict(ops=[op], conventions=[conv], dtypes=list(DTYPES), shapes=["4x4x32" if heads else "4x128"],
                 regimes=list(STRESS[op]), weights=["trained"], gates=["open", "closed"], biases=["trained"])
    return suites.expand({**group, **identity_operands(op, conv)})


def hf_suite() -> Suite:
    """The smoke suite's cases of the HF pairs, plus fp32/bf16/fp16 cases of every HF pair."""
    hf_pairs = set().union(*(impl.op_conventions for impl in hf_impls()))
    smoke = [c for c in suites.load("smoke").cases if (c.op, c.convention) in hf_pairs]
    extra = [c for op, conv in sorted(hf_pairs) for c in extra_cases(op, conv)]
    return Suite("hf", "", tuple(dict.fromkeys(smoke + extra)))


@pytest.fixture(scope="module")
def report():
    return api.run_suite(hf_suite(), hf_impls())


@pytest.fixture(scope="module")
def families():
    return {name: getattr(hf, name) for name in hf.FAMILIES}


# ---- every family agrees with its declared convention --------------------------------------------


def test_catalog_entries_are_the_family_table():
    # one table (implementations/hf_families.py) feeds both the registry and the adapters
    entries = {impl.entry.rpartition(":")[2]: impl for impl in catalog.hf_implementations()}
    assert set(entries) == set(hf.FAMILIES)
    for attr, family in hf.FAMILIES.items():
        assert entries[attr].op_conventions == {(op, family.convention) for op in family.ops()}, attr


@pytest.mark.parametrize("impl", [i.name for i in catalog.hf_implementations()])
def test_family_agrees_with_its_convention(report, impl):
    rows = report.results[(report.results["implementation"] == impl)
                          & (report.results["outcome"] != "unsupported")]
    assert set(rows["dtype"]) == set(DTYPES), "every dtype ran"
    bad = rows[~rows["outcome"].isin(["identical", "agree"])]
    assert bad.empty, bad[["case_id", "outcome", "max_ulp", "detail"]].to_string()


def test_one_rounding_families_are_bit_identical_in_half_precision(report):
    # Qwen3.5 / Gemma3 / OLMo2 round once: in bf16 and fp16 they must hit the correctly rounded
    # value on nearly every element (float32 noise can flip a tie); Llama-cast ones need not
    r = report.results
    one = r[r["implementation"].isin(["hf-olmo2", "hf-gemma3"]) & r["dtype"].isin(["bfloat16", "float16"])
            & (r["outcome"] != "unsupported")]
    assert (one["max_ulp"] <= 0.5 + 1e-3).all(), one[["case_id", "max_ulp"]].to_string()


def test_the_report_records_the_transformers_version(report):
    assert report.meta["versions"]["transformers"] == transformers.__version__


# ---- the attention path ---------------------------------------------------------------------------


def run_adapter(adapter, case: Case, inputs: CaseInputs | None = None) -> np.ndarray:
    return to_numpy(adapter(case.op, case.contract, inputs or case.inputs()))


def judged(out: np.ndarray, case: Case, inputs: CaseInputs) -> judge.Measurement:
    ref = oracle.evaluate(case.contract, inputs.as_float64(), inputs.num_heads)
    return judge.judge(out, ref, get_format(case.dtype), budget_for(case.dtype, case.op, case.span), case.num_heads, case.op)


def test_olmo2_full_vector_qk_norm_differs_visibly_from_per_head(families):
    # the same qwen3 per-head inputs, heads at lognormal(0.5) scales: OLMo2's real attention path
    # (its (H*D,) q_norm gets the (D,) weight tiled) is far from the per-head contract, while
    # Qwen3's agrees; the catalogue's figure for this regime is rel_l2 ~0.30
    case = Case.from_id("qk_norm@qwen3/bf16/8x16x64/head_scales:lognormal/w=trained")
    inputs = case.inputs()
    full = judged(run_adapter(families["olmo2"], case, inputs), case, inputs)
    per_head = judged(run_adapter(families["qwen3"], case, inputs), case, inputs)
    assert per_head.outcome == "agree" and per_head.rel_l2 < 5e-3
    assert full.outcome == "disagree"
    assert full.rel_l2 > 0.15 and full.span_rms_err > 0.3, (full.rel_l2, full.span_rms_err)
    assert full.max_ulp > 100 * per_head.max_ulp


def test_full_vector_is_sqrt_heads_times_per_head_with_one_live_head(families):
    # checks the hooks read the right layout: with one live head of four, the rms over the full
    # vector is rms_head / sqrt(4), so the full-vector output is twice the per-head one there
    case = Case.from_id("qk_norm@qwen3/fp32/2x4x32/normal/w=ones")
    x = np.zeros((2, 128), np.float32)
    x[:, 32:64] = np.random.default_rng(0).standard_normal((2, 32))
    inputs = CaseInputs({"x": x, "weight": np.ones(32, np.float32)}, 4)
    full, per_head = (run_adapter(families[f], case, inputs) for f in ("olmo2", "qwen3"))
    # (up to eps = 1e-6, which the full vector's 4x smaller mean square feels 4x more)
    np.testing.assert_allclose(full[:, 32:64], 2.0 * per_head[:, 32:64], rtol=1e-5)
    assert not full[:, :32].any() and not full[:, 64:].any()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("family", ["qwen3", "qwen3_5"])
def test_identity_projections_are_exact(families, family, dtype):
    # the largest finite values, the smallest normal, subnormals, signed zeros and random values
    # reach q_norm and k_norm bit for bit (the projections are no matmul), in a fresh row-major
    # tensor as a Linear hands them on. The gated (Qwen3.5) q_proj puts x in each head's query half
    # and zeros in its gate half.
    attention = families[family].attention(4, 16, 1e-6, dtype)
    info = torch.finfo(dtype)
    special = [info.max, -info.max, info.smallest_normal, -info.smallest_normal, -0.0, 0.0, 1.0, -3.0,
               info.smallest_normal / 4]
    x = torch.randn(8, 64, dtype=torch.float64)
    x[:, :len(special)] = torch.tensor(special, dtype=torch.float64)
    x = x.to(dtype)
    with torch.inference_mode():
        q = attention.q_proj(x).view(8, 4, -1)
        k = attention.k_proj(x.t().contiguous().t())  # a column-major x: handed on row-major
    bits = torch.int32 if dtype == torch.float32 else torch.int16  # signed zeros compared too
    assert torch.equal(q[..., :16].reshape(8, 64).view(bits), x.view(bits))
    assert torch.equal(k.view(bits), x.view(bits)) and k.is_contiguous()
    assert q.shape[-1] == (32 if family == "qwen3_5" else 16) and not q[..., 16:].any()


@pytest.mark.parametrize("family", [name for name, f in hf_families.FAMILIES.items() if f.attention])
def test_attention_holds_what_a_default_build_holds_but_its_projections(families, family):
    # identity_attention builds the real class without torch's random init and replaces its four
    # projections: every other parameter and buffer must be what a normally built module holds (the
    # norms' ones or zeros), so no uninitialised memory is left
    f, adapter = hf_families.FAMILIES[family], families[family]
    built = hf.identity_attention(adapter.parts[f.attention], adapter.parts[f.config], 4, 16, 1e-6,
                                  torch.float32, f.gated_query)
    config = adapter.parts[f.config](hidden_size=64, num_attention_heads=4, num_key_value_heads=4, head_dim=16,
                                     attention_bias=False, attention_dropout=0.0, rms_norm_eps=1e-6)
    config._attn_implementation = "eager"
    reference = adapter.parts[f.attention](config, layer_idx=0).eval()
    theirs = {name: value for name, value in reference.state_dict().items()
              if name.split(".")[0] not in hf.PROJECTIONS}
    ours = built.state_dict()
    assert ours.keys() == theirs.keys() and ours
    for name, value in ours.items():
        assert hf.same(value, theirs[name]), name
    assert not any(isinstance(m, torch.nn.Linear) for m in built.modules())


def test_an_attention_with_other_linear_layers_is_refused(families):
    # a class with a projection identity_attention does not know would keep uninitialised weights
    f, adapter = hf_families.FAMILIES["qwen3"], families["qwen3"]

    class WithGate(adapter.parts[f.attention]):
        def __init__(self, config, layer_idx):
            super().__init__(config, layer_idx)
            self.g_proj = torch.nn.Linear(4, 4)

    with pytest.raises(RuntimeError, match="g_proj"):
        hf.identity_attention(WithGate, adapter.parts[f.config], 4, 16, 1e-6, torch.float32, False)


def test_bf16_subnormals_reach_q_norm(families):
    # a bf16 GEMM flushes bf16 subnormals (|x| < 2^-126) to zero on some CPUs; with no matmul in the
    # projections q_norm is measured on them as given
    case = Case.from_id("qk_norm@qwen3/bf16/8x4x32/normal/w=trained")
    inputs = case.inputs()
    x = inputs.arrays["x"].copy()
    x[:, 0] = x.dtype.type(2.0 ** -130)
    out = to_numpy(families["qwen3"](case.op, case.contract, CaseInputs(dict(inputs.arrays, x=x), 4)))
    assert out.shape == x.shape and np.isfinite(out.astype(np.float32)).all()


def test_an_inexact_projection_is_refused(families):
    # the per-call check: a q_proj that does not pass x through is refused, not measured
    case = Case.from_id("qk_norm@qwen3/fp32/4x4x32/normal/w=trained")
    inputs = case.inputs()
    adapter = families["qwen3"]
    attention = adapter.attention(4, 32, case.contract.eps, torch.float32)
    identity = attention.q_proj
    attention.q_proj = _Doubled()
    try:
        with pytest.raises(RuntimeError, match="did not receive x exactly"):
            adapter(case.op, case.contract, inputs)
    finally:
        attention.q_proj = identity


class _Doubled(torch.nn.Module):
    def forward(self, x):
        return x * 2


def test_rows_are_independent_tokens(families):
    # batch_rows=True: eight rows at once give the same bits as one row at a time
    case = Case.from_id("qk_norm@qwen3.5/bf16/8x4x32/head_scales:lognormal/w=trained")
    inputs = case.inputs()
    together = run_adapter(families["qwen3_5"], case, inputs)
    alone = [run_adapter(families["qwen3_5"], case, CaseInputs(
        dict(inputs.arrays, x=inputs.arrays["x"][i:i + 1]), inputs.num_heads)) for i in range(8)]
    assert np.array_equal(together.view(np.uint16), np.concatenate(alone).view(np.uint16))


# ---- qk_norm_rope: q_norm, then the modeling module's own RoPE --------------------------------------


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
def test_qk_norm_rope_is_torch_own_bit_for_bit(families, dtype):
    # HF's Qwen3RotaryEmbedding + apply_rotary_pos_emb after the real q_norm, and torch_own's
    # QKNormRoPE written the same way: the same bits (both use torch's float32 pow for inv_freq)
    from normdiff.implementations import torch_own

    case = Case.from_id(f"qk_norm_rope@qwen3/{dtype}/8x8x128/head_scales:lognormal/w=trained")
    inputs = case.inputs()
    ours = to_numpy(torch_own.run(case.op, case.contract, inputs))
    theirs = run_adapter(families["qwen3"], case, inputs)
    assert np.array_equal(ours.astype(np.float32), theirs.astype(np.float32))
    assert judged(theirs, case, inputs).outcome in ("identical", "agree")


def test_qk_norm_rope_at_position_zero_is_qk_norm(families):
    case = Case.from_id("qk_norm_rope@qwen3/bf16/4x4x32/normal/w=trained")
    inputs = case.inputs()
    at_zero = CaseInputs(dict(inputs.arrays, positions=np.zeros(4, np.int64)), 4)
    plain = Case.from_id("qk_norm@qwen3/bf16/4x4x32/normal/w=trained")
    assert np.array_equal(run_adapter(families["qwen3"], case, at_zero).view(np.uint16),
                          run_adapter(families["qwen3"], plain, plain.inputs()).view(np.uint16))
    assert not np.array_equal(run_adapter(families["qwen3"], case, inputs).view(np.uint16),
                              run_adapter(families["qwen3"], plain, plain.inputs()).view(np.uint16))


def test_rotary_takes_the_contract_theta(families):
    # Qwen3Config's own default is 10000; the contract's 1e6 (and any other value) must reach inv_freq
    from normdiff.harness.data import rope

    for theta in (1e6, 5e5):
        rotary = families["qwen3"].rotary(64, theta)
        want = rope.inverse_frequencies(64, theta)
        got = rotary.inv_freq.numpy()
        assert np.abs(got.astype(np.float64) - want).max() <= np.spacing(want).max()
    case = Case.from_id("qk_norm_rope@qwen3/fp32/4x4x32/normal/w=trained")
    inputs = case.inputs()
    assert judged(run_adapter(families["qwen3"], case, inputs), case, inputs).outcome in ("identical", "agree")
    wrong_theta = to_numpy(families["qwen3"](case.op, case.contract.replace(rope_theta=1e4), inputs))
    assert judged(wrong_theta, case, inputs).outcome == "disagree"


def test_qk_norm_rope_rows_are_independent_tokens(families):
    # batch_rows=True: each row with its own position, alone or together, gives the same bits
    case = Case.from_id("qk_norm_rope@qwen3/bf16/8x4x32/head_scales:lognormal/w=trained")
    inputs = case.inputs()
    together = run_adapter(families["qwen3"], case, inputs)
    alone = [run_adapter(families["qwen3"], case, CaseInputs(
        dict(inputs.arrays, x=inputs.arrays["x"][i:i + 1], positions=inputs.arrays["positions"][i:i + 1]),
        inputs.num_heads)) for i in range(8)]
    assert np.array_equal(together.view(np.uint16), np.concatenate(alone).view(np.uint16))
    with pytest.raises(ValueError, match="3 positions for 8 rows"):
        families["qwen3"](case.op, case.contract, CaseInputs(
            dict(inputs.arrays, positions=inputs.arrays["positions"][:3]), inputs.num_heads))


def test_l2norm_is_called_on_float32_as_the_delta_rule_does(families):
    # the model upcasts q / k before l2norm; called on bf16 directly the function computes in
    # bf16 and lands further from the contract (an aside, not what the model runs)
    case = Case.from_id("l2_norm@qwen3.5/bf16/8x1024/normal")
    inputs = case.inputs()
    as_model = judged(run_adapter(families["qwen3_5"], case, inputs), case, inputs)
    raw = families["qwen3_5"].parts["l2norm"](torch.from_numpy(
        inputs.arrays["x"].astype(np.float32)).to(torch.bfloat16), eps=case.contract.eps)
    assert as_model.max_ulp <= 0.5 + 1e-3
    assert judged(to_numpy(raw), case, inputs).max_ulp > as_model.max_ulp


# ---- a missing class or module is unavailable, with the reason ----------------------------------

BROKEN = '''
from normdiff.implementations import hf

no_class = hf.load(hf.Family("qwen3", "transformers.models.qwen3.modeling_qwen3", norm="Qwen3NoSuchRMSNorm"))
'''
BROKEN_MODULE = '''
from normdiff.implementations import hf

no_module = hf.load(hf.Family("qwen9", "transformers.models.qwen9.modeling_qwen9", norm="Qwen9RMSNorm"))
'''


@pytest.mark.parametrize("source,attr,named", [(BROKEN, "no_class", "Qwen3NoSuchRMSNorm"),
                                               (BROKEN_MODULE, "no_module", "modeling_qwen9")])
def test_missing_class_is_unavailable_with_its_name(tmp_path, source, attr, named):
    path = tmp_path / "broken_hf.py"
    path.write_text(source)
    impl = Implementation("hf-broken", "model", "torch", f"{path}:{attr}", {("rms_norm", "qwen3")},
                          requires=("transformers",), worker="hf")
    suite = Suite("one", "", (Case.from_id("rms_norm@qwen3/bf16/4x128/normal/w=trained"),))
    result = api.run_suite(suite, [impl]).results.iloc[0]
    assert result["outcome"] == "unavailable"
    assert named in result["detail"] and f"transformers {transformers.__version__}" in result["detail"]


def test_unknown_family_attribute_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no_such_family"):
        hf.no_such_family  # noqa: B018


def test_weight_that_fits_no_q_norm_is_refused():
    with pytest.raises(ValueError, match="does not fit"):
        hf.fit_weight(torch.ones(48), torch.ones(32), heads=4)


# ---- what an adapter cannot take is declared before the call (issue 15) ---------------------------

ATTENTION_FAMILIES = [attr for attr, f in hf.FAMILIES.items() if f.attention]


@pytest.mark.parametrize("attr", ATTENTION_FAMILIES)
@pytest.mark.parametrize("head_dim", [3, 5, 7, 42])
def test_the_declared_odd_head_dims_are_those_transformers_cannot_build(families, attr, head_dim):
    # transformers' RoPE validation refuses an odd head_dim > 4 that its RoPE rotates whole; Qwen3.5
    # and Qwen3-Next rotate a quarter of each head and build at any head_dim
    refusal = hf.FAMILIES[attr].head_dim_refusal(head_dim)
    try:
        families[attr].attention(2, head_dim, 1e-6, torch.float32)
        built = True
    except Exception as exc:  # huggingface_hub's StrictDataclassClassValidationError
        assert "even rotary dimension" in str(exc)
        built = False
    assert built == (refusal is None), (attr, head_dim, refusal)


def test_an_odd_head_dim_is_unsupported_with_its_reason_in_both_passes():
    listed = {i.name: i for i in hf_impls()}
    gemma, qwen35 = listed["hf-gemma3"], listed["hf-qwen3.5"]
    for case in (Case.from_id("qk_norm@gemma3/fp32/1x1x5/normal/w=ones"),
                 Case.from_id("qk_norm@gemma3/fp32/1x1x5/normal/w=ones/dy=normal/out=dx")):
        assert gemma.supports(case.op, case.convention, case.pass_) and not gemma.runs(case)
        assert "odd head_dim (5)" in gemma.case_problem(case) and "Gemma3Attention" in gemma.case_problem(case)
    assert qwen35.runs(Case.from_id("qk_norm@qwen3.5/fp32/1x1x5/normal/w=ones"))
    # a case of another op@convention is the registry's business, not a case problem
    assert gemma.case_problem(Case.from_id("rms_norm@qwen3/fp32/1x8/normal/w=ones")) is None


def test_the_refused_cases_are_unsupported_in_a_fuzz_session():
    from normdiff.harness.engine.session import Session
    listed = {i.name: i for i in hf_impls()}
    case = Case.from_id("qk_norm@olmo2/fp32/1x1x5/normal/w=ones")
    with Session([listed["hf-olmo2"]]) as session:
        (outcome,) = session.evaluate([case])
    assert outcome.measurement.outcome == "unsupported"
    assert "odd head_dim" in outcome.measurement.detail
