"""qk_norm_rope in the own implementations (NumPy, PyTorch, JAX): within budget of the oracle at
every dtype, in agreement with each other, positions honoured, and the qk-norm-after-rope mutant
caught exactly where the catalogue says (non-uniform gamma) and hidden where it says (uniform)."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from normdiff.cases.model import Case, CaseInputs
from normdiff.harness.engine import judge
from normdiff.harness.data import rope
from normdiff.harness.data.outcomes import PASSING
from normdiff.harness.engine import oracle
from normdiff.harness.data.budgets import budget_for
from normdiff.harness.data.bugs import BUGS
from normdiff.harness.data.dtypes import get_format
from normdiff.implementations import numpy_own

torch = pytest.importorskip("torch")
jax = pytest.importorskip("jax")

from normdiff.implementations.frameworks import to_numpy  # noqa: E402
from normdiff.implementations import jax_own, torch_own  # noqa: E402

DTYPES = ("float32", "bfloat16", "float16")
IMPLS = {"numpy": numpy_own.run, "torch": lambda *a: to_numpy(torch_own.run(*a)), "jax": jax_own.run}


def cases(dtype: str) -> list[Case]:
    # 6 rows: JAX pads them to 8 (padded positions are 0)
    return [Case.of("qk_norm_rope", "qwen3", dtype, "6x4x64", regime, weight=w)
            for regime, w in itertools.product(("normal", "head_scales:lognormal", "tiny_rms:1e-3", "zero_heads"),
                                               ("trained", "ones", "large"))]


def judged(out, case: Case, inputs: CaseInputs, contract=None) -> judge.Measurement:
    ref = oracle.evaluate(contract or case.contract, inputs.arrays, case.num_heads)
    return judge.judge(out, ref, get_format(case.dtype), budget_for(case.dtype, case.op, case.span), case.num_heads, case.op)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("impl", IMPLS)
def test_agrees_with_the_oracle(impl, dtype):
    worst = 0.0
    for case in cases(dtype):
        inputs = case.inputs()
        out = IMPLS[impl](case.op, case.contract, inputs)
        assert out.dtype == inputs.arrays["x"].dtype and out.shape == inputs.arrays["x"].shape
        m = judged(out, case, inputs)
        assert m.outcome in PASSING, (case.id, m.outcome, m.max_ulp)
        worst = max(worst, m.max_ulp)
    print(f"{impl} {dtype}: max {worst:.3f} ulp")


@pytest.mark.parametrize("dtype", ("bfloat16", "float16"))
def test_own_implementations_agree_bit_for_bit_nearly_everywhere(dtype):
    same = total = 0
    for case in cases(dtype):
        inputs = case.inputs()
        outs = [np.asarray(f(case.op, case.contract, inputs)).astype(np.float64) for f in IMPLS.values()]
        for a, b in itertools.combinations(outs, 2):
            same, total = same + int((a == b).sum()), total + a.size
    assert same / total >= 0.999, f"{same}/{total}"


@pytest.mark.parametrize("impl", IMPLS)
def test_positions_are_honoured(impl):
    # the same token at different positions turns differently; at position 0 it is the same
    # implementation's qk_norm output, bit for bit
    case = Case.of("qk_norm_rope", "qwen3", "float32", "4x2x32", "normal", weight="trained")
    inputs = case.inputs()
    x = np.repeat(inputs.arrays["x"][:1], 4, axis=0)
    positions = np.array([0, 1, 4096, 8191], np.int64)
    out = IMPLS[impl](case.op, case.contract, CaseInputs(dict(inputs.arrays, x=x, positions=positions), 2))
    plain = IMPLS[impl]("qk_norm", case.contract.replace(op="qk_norm"), CaseInputs(
        {"x": x[:1], "weight": inputs.arrays["weight"]}, 2))
    np.testing.assert_array_equal(out[0], plain[0])
    assert len({out[i].tobytes() for i in range(4)}) == 4
    ref = oracle.evaluate(case.contract, {"x": x, "weight": inputs.arrays["weight"], "positions": positions}, 2)
    assert judge.judge(out, ref, get_format("float32"), 16.0, 2, case.op).outcome in PASSING


@pytest.mark.parametrize("impl", IMPLS)
def test_positions_must_match_the_rows(impl):
    case = Case.of("qk_norm_rope", "qwen3", "bfloat16", "4x2x32")
    inputs = case.inputs()
    short = CaseInputs(dict(inputs.arrays, positions=inputs.arrays["positions"][:2]), 2)
    with pytest.raises(ValueError, match="2 positions for 4 rows"):
        IMPLS[impl](case.op, case.contract, short)


def test_leading_dims_are_tokens():
    case = Case.of("qk_norm_rope", "qwen3", "bfloat16", "6x4x32", "head_scales:lognormal", weight="trained")
    flat = case.inputs()
    x, positions = flat.arrays["x"].reshape(2, 3, 128), flat.arrays["positions"].reshape(2, 3)
    inputs = CaseInputs({"x": x, "weight": flat.arrays["weight"], "positions": positions}, 4)
    want = numpy_own.run(case.op, case.contract, flat).reshape(2, 3, 128)
    for f in IMPLS.values():
        out = np.asarray(f(case.op, case.contract, inputs))
        assert out.shape == (2, 3, 128)
        assert np.array_equal(out.astype(np.float32), want.astype(np.float32))


@pytest.mark.parametrize("dtype", DTYPES)
def test_mutant_is_caught_on_trained_weights_and_hidden_by_uniform_ones(dtype):
    bug = BUGS["qk-norm-after-rope"]
    assert bug.contract.rope_order == "rope_then_norm"
    for regime in ("normal", "head_scales:lognormal"):
        for weights, caught in (("trained", True), ("ones", False)):
            case = Case.of("qk_norm_rope", "qwen3", dtype, "8x8x128", regime, weight=weights)
            inputs = case.inputs()
            # what the registry's mutant runs: torch_own with the knob turned
            m = judged(to_numpy(torch_own.run(case.op, bug.contract, inputs)), case, inputs)
            if caught:
                assert m.outcome == "disagree" and m.rel_l2 > 0.05, (case.id, m.rel_l2)
            else:  # the same maths: only rounding separates the two orders
                assert m.rel_l2 < 2e-2 and m.cosine > 0.9999, (case.id, m.rel_l2)
                if dtype == "float32":
                    assert m.outcome in PASSING, (case.id, m.max_ulp)


@pytest.mark.parametrize("dtype", DTYPES)
def test_rope_then_norm_knob_matches_across_implementations(dtype):
    # the mutant's formula computed three ways: the same numbers (bit-identical nearly everywhere
    # in bf16 / fp16, within 16 ulp of the pair in float32)
    case = Case.of("qk_norm_rope", "qwen3", dtype, "6x4x64", "head_scales:lognormal", weight="trained")
    inputs = case.inputs()
    c = case.contract.replace(rope_order="rope_then_norm")
    outs = {name: np.asarray(f(case.op, c, inputs)).astype(np.float64) for name, f in IMPLS.items()}
    ref = oracle.evaluate(c, inputs.arrays, 4)
    for name, out in outs.items():
        m = judge.judge(out.astype(get_format(dtype).np_dtype), ref, get_format(dtype),
                          budget_for(dtype, case.op, case.span), 4, case.op)
        assert m.outcome in PASSING, (name, m.max_ulp)
    if dtype != "float32":
        assert (outs["numpy"] == outs["torch"]).mean() >= 0.999
        assert (outs["numpy"] == outs["jax"]).mean() >= 0.999


def test_torch_frequencies_are_hf_style_and_within_an_ulp_of_the_contract():
    # torch_own computes inv_freq as HF does (torch's float32 pow); numpy_own and jax_own use the
    # contract's correctly rounded power (the one function in harness/data/rope.py); they may
    # differ by an ulp at a few frequencies only
    ours = torch_own.RotaryEmbedding(128, 1e6).inv_freq.numpy()
    contract = rope.inverse_frequencies(128, 1e6)
    off = np.abs(ours.astype(np.float64) - contract) / np.spacing(contract).astype(np.float64)
    assert off.max() <= 1 and (off > 0).sum() <= 4, off


def test_jax_reuses_its_compiled_function_across_positions_and_rows():
    c = Case.of("qk_norm_rope", "qwen3", "float32", "5x2x16").contract
    jax_own.run("qk_norm_rope", c, Case.of("qk_norm_rope", "qwen3", "float32", "5x2x16").inputs())
    n = len(jax_own.PROGRAMS.loaded)
    for rows, sample in ((6, 1), (7, 2), (8, 3)):  # all pad to the same rows; new positions every time
        jax_own.run("qk_norm_rope", c, Case.of("qk_norm_rope", "qwen3", "float32", f"{rows}x2x16", sample=sample).inputs())
    assert len(jax_own.PROGRAMS.loaded) == n
    assert jax_own.static_key(c, 2) != jax_own.static_key(c.replace(rope_theta=1e4), 2)
    assert jax_own.static_key(c, 2) != jax_own.static_key(c.replace(rope_order="rope_then_norm"), 2)
