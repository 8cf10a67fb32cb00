"""The own PyTorch implementation against the float64 oracle and against the own NumPy one."""
from __future__ import annotations

import itertools
from functools import lru_cache

import ml_dtypes
import numpy as np
import pytest

from normdiff.harness.data.budgets import budget_for

torch = pytest.importorskip("torch")

from normdiff.cases import suites  # noqa: E402
from normdiff.cases.model import Case, CaseInputs  # noqa: E402
from normdiff.harness.engine import judge  # noqa: E402
from normdiff.harness.engine import oracle  # noqa: E402
from normdiff.harness.data.ops import OPS  # noqa: E402
from normdiff.harness.data.conventions import get_contract, op_conventions  # noqa: E402
from normdiff.harness.data.dtypes import get_format  # noqa: E402
from normdiff.implementations import numpy_own, torch_own  # noqa: E402

DTYPES = ("float32", "bfloat16", "float16")
REGIMES = ("normal", "tiny_rms:1e-4", "zero_rows", "mean_shift:3")
GROUPS = [(op, conv, dtype) for (op, conv), dtype in itertools.product(op_conventions(), DTYPES)]


def cases(op: str, conv: str, dtype: str) -> list[Case]:
    heads = "num_heads" in OPS[op].dims
    return suites.expand(dict(ops=[op], conventions=[conv], dtypes=[dtype], shapes=["4x8x64" if heads else "8x128"],
                              regimes=list(REGIMES + (("head_scales:lognormal",) if heads else ())),
                              weights=["trained", "ones", "large"], gates=["open", "closed"]))


def ulp_error(out: np.ndarray, ref: np.ndarray, dtype: str, op: str = "", num_heads: int = 1) -> np.ndarray:
    """|out - ref| in ULPs of `dtype` at ref (for qk_norm_rope at its rotation pair's magnitude, as
    the judge counts them); 0 where both are NaN, inf where only one is."""
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    with np.errstate(invalid="ignore"):
        err = np.abs(out - ref) / get_format(dtype).ulp(judge.ulp_magnitude(ref, op, num_heads))
    return np.where(np.isnan(out) & np.isnan(ref), 0.0, np.nan_to_num(err, nan=np.inf))


@lru_cache(maxsize=None)
def results(op: str, conv: str, dtype: str) -> list[tuple[Case, CaseInputs, "torch.Tensor"]]:
    out = []
    for case in cases(op, conv, dtype):
        inputs = case.inputs()
        out.append((case, inputs, torch_own.run(op, case.contract, inputs)))
    return out


def budget(case: Case) -> float:
    """The harness's own budget (harness/data/budgets.py derives each rounding chain)."""
    return budget_for(case.dtype, case.op, case.span)


@pytest.mark.parametrize("op,conv,dtype", GROUPS, ids=[f"{o}@{c}-{d}" for o, c, d in GROUPS])
def test_error_against_reference(op, conv, dtype):
    worst, worst_id = 0.0, ""
    for case, inputs, out in results(op, conv, dtype):
        ref = oracle.evaluate(case.contract, inputs.as_float64(), inputs.num_heads)
        err = ulp_error(out.float().numpy(), ref, dtype, op, inputs.num_heads).max()
        if err > worst:
            worst, worst_id = err, case.id
    assert worst <= min(budget(case) for case, _, _ in results(op, conv, dtype)), f"{worst:.3f} ULP at {worst_id}"


@pytest.mark.parametrize("op,conv,dtype", GROUPS, ids=[f"{o}@{c}-{d}" for o, c, d in GROUPS])
def test_output_dtype_and_shape(op, conv, dtype):
    want = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
    for case, inputs, out in results(op, conv, dtype):
        assert out.dtype == want, case.id
        assert tuple(out.shape) == inputs.arrays["x"].shape, case.id


def test_bf16_bit_identical_to_numpy_own():
    same = total = 0
    for op, conv in op_conventions():
        for case, inputs, out in results(op, conv, "bfloat16"):
            ours = out.float().numpy()
            theirs = numpy_own.run(op, case.contract, inputs).astype(np.float32)
            equal = (ours == theirs) | (np.isnan(ours) & np.isnan(theirs))
            same, total = same + int(equal.sum()), total + equal.size
    assert same / total >= 0.999, f"{same}/{total} elements identical"


# Single-knob mutants: torch_own must compute the same formula as numpy_own for each of them.
# stats_dtype="input" is left out in bf16: NumPy (ml_dtypes) sums bf16 one element at a time in
# bf16, while torch (and JAX) accumulate in float32 and round once, so the two differ by design.
MUTANTS = [
    ("rms_norm@qwen3", dict(eps_placement="outside")),
    ("rms_norm@qwen3", dict(eps_placement="clamp")),
    ("rms_norm@qwen3", dict(eps_placement="none")),
    ("rms_norm@qwen3", dict(statistic="variance")),
    ("rms_norm@qwen3", dict(cast="one_rounding")),
    ("rms_norm@qwen3", dict(eps_scale="max_square")),
    ("l2_norm@qwen3.5", dict(eps_scale="span")),
    ("rms_norm@qwen3.5", dict(weight_offset=0.0)),
    ("rms_norm@qwen3.5", dict(offset_dtype="input")),
    ("rms_norm@qwen3.5", dict(cast="llama")),
    ("l2_norm@qwen3.5", dict(statistic="mean_square")),
    ("l2_norm@qwen3.5", dict(eps_placement="outside")),
    ("gated_rms_norm@qwen3.5", dict(gate_activation="sigmoid")),
    ("gated_rms_norm@qwen3.5", dict(gate_order="gate_then_norm")),
    ("gated_rms_norm@qwen3.5", dict(cast="one_rounding")),
    ("qk_norm@qwen3", dict(scope="full")),
    ("qk_norm@olmo2", dict(scope="head")),
    ("qk_norm@olmo2", dict(weight_span="head")),
    ("qk_norm_rope@qwen3", dict(rope_order="rope_then_norm")),
    ("qk_norm_rope@qwen3", dict(scope="full")),
]


@pytest.mark.parametrize("pair,knob", MUTANTS, ids=[f"{p}-{k}" for p, k in MUTANTS])
@pytest.mark.parametrize("regime", ["zero_rows", "tiny_rms:1e-3"])
def test_mutants_match_numpy_own(pair, knob, regime):
    op, conv = pair.split("@")
    heads = "num_heads" in OPS[op].dims
    (case,) = suites.expand(dict(ops=[op], conventions=[conv], dtypes=["bfloat16"], shapes=["4x8x64" if heads else "8x128"],
                                 regimes=[regime], weights=["trained"]))
    contract, inputs = case.contract.replace(**knob), case.inputs()
    ours = torch_own.run(op, contract, inputs).float().numpy()
    theirs = numpy_own.run(op, contract, inputs).astype(np.float32)
    equal = (ours == theirs) | (np.isnan(ours) & np.isnan(theirs))
    assert equal.mean() >= 0.999, f"{int((~equal).sum())} of {equal.size} differ"


def test_seed_worked_example():
    # seed 000: x = (3, 4), gamma = 1: rms = sqrt(12.5), y = (0.8485, 1.1314)
    x = np.array([[3.0, 4.0]], np.float32)
    inputs = CaseInputs({"x": x, "weight": np.ones(2, np.float32)}, 1)
    out = torch_own.run("rms_norm", get_contract("rms_norm", "qwen3").replace(eps=0.0), inputs)
    np.testing.assert_allclose(out.numpy()[0], [3 / 12.5**0.5, 4 / 12.5**0.5], rtol=1e-6)
    np.testing.assert_allclose(out.numpy()[0], [0.8485, 1.1314], atol=1e-4)


def test_eps_outside_mutant_is_caught():
    # eps added to the root instead of the mean square: at rms ~1e-3, eps=1e-6 moves the
    # denominator from sqrt(1e-6 + 1e-6) to 1e-3 + 1e-6, a ~30% error, far beyond any budget
    case = Case.from_id("rms_norm@qwen3/bf16/8x128/tiny_rms:1e-3/w=trained")
    inputs = case.inputs()
    mutant = torch_own.run("rms_norm", case.contract.replace(eps_placement="outside"), inputs)
    ref = oracle.evaluate(case.contract, inputs.as_float64())
    assert ulp_error(mutant.float().numpy(), ref, "bfloat16").max() > 100


def test_weights_are_copied_on_every_call():
    # modules are cached per (op, contract, ...): a second call must see its own weight
    case = Case.from_id("rms_norm@olmo2/bf16/4x64/normal/w=ones")
    inputs = case.inputs()
    doubled = CaseInputs(dict(inputs.arrays, weight=(inputs.arrays["weight"] * 2)), 1)
    once = torch_own.run("rms_norm", case.contract, inputs).float()
    twice = torch_own.run("rms_norm", case.contract, doubled).float()
    assert torch.equal(twice, once * 2)


def test_to_torch_keeps_bits():
    # +0, -0, the smallest subnormal, the largest finite, -inf, NaN, 1
    bits = np.array([0x0000, 0x8000, 0x0001, 0x7F7F, 0xFF80, 0x7FC0, 0x3F80], np.uint16)
    tensor = torch_own.to_torch(bits.view(ml_dtypes.bfloat16))
    assert tensor.dtype == torch.bfloat16
    assert np.array_equal(tensor.view(torch.int16).numpy().view(np.uint16), bits)


def test_l2norm_function_matches_the_contract_run():
    case = Case.from_id("l2_norm@qwen3.5/bf16/8x128/normal")
    inputs = case.inputs()
    x = torch_own.to_torch(inputs.arrays["x"])
    assert torch.equal(torch_own.l2norm(x, case.contract.eps),
                       torch_own.run("l2_norm", case.contract, inputs))


def test_qk_norm_per_head_is_rms_norm_on_each_head():
    case = Case.from_id("qk_norm@qwen3/bf16/4x8x64/head_scales:lognormal/w=trained")
    inputs = case.inputs()
    norm = torch_own.RMSNorm(64, eps=case.contract.eps, dtype=torch.bfloat16)
    with torch.no_grad():
        norm.weight.copy_(torch_own.to_torch(inputs.arrays["weight"]))
        per_head = norm(torch_own.to_torch(inputs.arrays["x"]).view(4, 8, 64)).reshape(4, 512)
    assert torch.equal(per_head, torch_own.run("qk_norm", case.contract, inputs))
