"""The HF families added with layer_norm and group_gated_rms_norm: Cohere's and OLMo-1's LayerNorm,
Mamba2's grouped gated norm (and Bamba's, Zamba2's and NemotronH's copies of it), Gemma3n's RMSNorm
and q_norm, DeepSeek-V3's RMSNorm and Llama4's weightless L2 norm agree with their conventions
through the runner, forward and backward (every gradient: dx, dw, db, dgate); a class without a
bias (or weight, or eps argument) refuses a case it cannot apply, naming the class and the operand;
and the identities applied for a missing parameter leave the class's output bits untouched."""
from __future__ import annotations

import pytest

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

from normdiff.cases.model import Case  # noqa: E402
from normdiff.cases.suites import Suite  # noqa: E402
from normdiff.harness import api  # noqa: E402
from normdiff.harness.data.ops import OPS  # noqa: E402
from normdiff.implementations import catalog, hf  # noqa: E402
from normdiff.implementations.entry import Implementation  # noqa: E402
from normdiff.implementations.frameworks import to_numpy  # noqa: E402
from normdiff.implementations.frameworks.torch import from_numpy as to_torch  # noqa: E402
from normdiff.implementations import hf_families  # noqa: E402

ALL = hf_families.FAMILIES  # every family, by registry attribute

DTYPES = ("float32", "bfloat16", "float16")
GROUPED = ("group_gated_rms_norm", "mamba2", "8x4x32", ("normal", "group_scales"), {"weight": "trained"})
# implementation name -> its cases: (op, convention, shape, regimes, operand regimes)
PLAN = {
    "hf-cohere": [("layer_norm", "cohere", "8x128", ("normal", "mean_shift:3"), {"weight": "trained", "bias": "zeros"})],
    "hf-olmo": [("layer_norm", "olmo", "8x128", ("outliers", "narrow:1"), {"weight": "ones", "bias": "zeros"})],
    "hf-mamba2": [GROUPED],
    "hf-bamba": [GROUPED],
    "hf-zamba2": [GROUPED],
    "hf-nemotron-h": [GROUPED],
    "hf-gemma3n": [("rms_norm", "gemma3n", "8x128", ("normal", "tiny_rms"), {"weight": "trained"}),
                   ("qk_norm", "gemma3n", "8x4x32", ("head_scales:lognormal",), {"weight": "trained"})],
    "hf-deepseek-v3": [("rms_norm", "deepseek-v3", "8x512", ("normal", "outliers"), {"weight": "trained"})],
    "hf-llama4": [("l2_norm", "llama4", "8x128", ("normal", "tiny_rms"), {})],
}
# cases a class cannot apply: a nonzero bias (Cohere), a weight not all ones and another eps (OLMo-1)
REFUSED = {
    "bias": Case.of("layer_norm", "cohere", "bfloat16", "8x128", weight="trained", bias="trained"),
    "weight": Case.of("layer_norm", "olmo", "float32", "8x128", weight="trained", bias="zeros"),
    "eps": Case.of("layer_norm", "olmo", "float16", "8x128", eps=1e-6, weight="ones", bias="zeros"),
}


def new_impls() -> list[Implementation]:
    """The registry's entries for the new families."""
    listed = {i.name: i for i in catalog.hf_implementations()}
    assert set(PLAN) <= set(listed), sorted(set(PLAN) - set(listed))
    return [listed[name] for name in PLAN]


def planned_cases() -> list[Case]:
    cases = []
    for op, conv, shape, regimes, choices in dict.fromkeys(freeze(p) for plan in PLAN.values() for p in plan):
        for dtype in DTYPES:
            for regime in regimes:
                cases.append(Case.of(op, conv, dtype, shape, regime, **dict(choices)))
                cases += Case.of(op, conv, dtype, shape, regime, dy="normal", **dict(choices)).outputs()
    return cases


def freeze(plan: tuple) -> tuple:
    op, conv, shape, regimes, choices = plan
    return op, conv, shape, regimes, tuple(sorted(choices.items()))


def refused_cases(case: Case) -> list[Case]:
    """The refused case and its backward call's outputs."""
    backward = Case.of(case.op, case.convention, case.dtype, f"{case.rows}x{case.width}", case.regime,
                       eps=case.eps, dy="normal", **dict(case.choices))
    return [case, *backward.outputs()]


@pytest.fixture(scope="module")
def results():
    """(the planned cases' results, the refused cases' results by operand), from one run."""
    planned = planned_cases()
    refused = {operand: refused_cases(case) for operand, case in REFUSED.items()}
    cases = tuple(dict.fromkeys(planned + [c for cs in refused.values() for c in cs]))
    r = api.run_suite(Suite("hf-new", "", cases), new_impls(), passes="both").results
    ran = r[r["outcome"] != "unsupported"]
    return (ran[ran["case_id"].isin({c.id for c in planned})],
            {operand: r[r["case_id"].isin({c.id for c in cs})] for operand, cs in refused.items()})


def test_every_new_family_has_an_implementation():
    names = {i.name for i in new_impls()}
    assert names == set(PLAN), names ^ set(PLAN)
    # the four Mamba2-style families load their own classes, on mamba2's contract
    grouped = {attr: f for attr, f in ALL.items() if f.convention == "mamba2"}
    assert {f"hf-{f.label}" for f in grouped.values()} == {"hf-mamba2", "hf-bamba", "hf-zamba2", "hf-nemotron-h"}
    for attr, family in grouped.items():
        (part,) = family.ops().values()
        assert getattr(hf, attr).part("group_gated_rms_norm").__name__ == part.name


@pytest.mark.parametrize("impl", sorted(PLAN))
def test_family_agrees_forward_and_backward(results, impl):
    rows = results[0][results[0]["implementation"] == impl]
    assert set(rows["dtype"]) == set(DTYPES), "every dtype ran"
    assert set(rows["output"]) == {out for plan in PLAN[impl] for out in OPS[plan[0]].outputs}, \
        "the forward and every gradient were judged"
    assert len(rows) == sum(len(regimes) * len(DTYPES) * len(OPS[op].outputs) for op, _, _, regimes, _ in PLAN[impl])
    bad = rows[~rows["outcome"].isin(["identical", "agree"])]
    assert bad.empty, bad[["case_id", "outcome", "max_ulp", "tolerance_ulp", "detail"]].to_string()


@pytest.mark.parametrize("operand", sorted(REFUSED))
def test_a_class_refuses_an_operand_it_cannot_apply(results, operand):
    # CohereLayerNorm has no bias, OlmoLayerNorm no weight and a written-in eps: a case that needs
    # them is declared unsupported before any call (Implementation.case_problem), in both passes,
    # and the reason says which class and which operand (issue 15: they came back as errors)
    case = REFUSED[operand]
    impl = {i.name: i for i in new_impls()}[f"hf-{case.convention}"]
    rows = results[1][operand]
    rows = rows[rows["implementation"] == impl.name]
    assert len(rows) == 1 + len(case.record.gradients) and set(rows["pass"]) == {"forward", "backward"}
    assert (rows["outcome"] == "unsupported").all(), rows[["case_id", "outcome"]].to_string()
    cls, words = {"bias": ("CohereLayerNorm", "nonzero"), "weight": ("OlmoLayerNorm", "not all ones"),
                  "eps": ("OlmoLayerNorm", "hard-codes eps=1e-05")}[operand]
    for c in refused_cases(case):
        reason = impl.case_problem(c)
        assert not impl.runs(c) and cls in reason and operand in reason and words in reason, reason


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("attr,cls", [("cohere", "CohereLayerNorm"), ("olmo", "OlmoLayerNorm")])
def test_identities_keep_the_class_bits(attr, cls, dtype):
    # the class called alone on x (its weight set, where it has one) gives the adapter's very bits:
    # the weight of ones and the bias of zeros applied after it change nothing
    case = Case.of("layer_norm", attr, dtype, "8x128", "mean_shift:3",
                   weight="trained" if attr == "cohere" else "ones", bias="zeros")
    inputs = case.inputs()
    adapter = getattr(hf, attr)
    got = to_numpy(adapter(case.op, case.contract, inputs))
    x = to_torch(inputs.arrays["x"])
    norm = (adapter.parts[cls](128, eps=case.contract.eps) if attr == "cohere" else adapter.parts[cls](128)).to(x.dtype)
    with torch.no_grad():
        if attr == "cohere":
            norm.weight.copy_(to_torch(inputs.arrays["weight"]))
        want = to_numpy(norm(x))
    assert got.dtype == want.dtype and got.tobytes() == want.tobytes()
