"""layer_norm and group_gated_rms_norm through the whole pipeline: own torch, own JAX and the
framework built-ins (torch's F.layer_norm / nn.LayerNorm, flax's nnx.LayerNorm) against the float64
oracle within the harness's budgets, forward and backward (api.run_suite); and own torch honouring
the LayerNorm mutants' knobs (each turned knob changes the numbers, and the judge says disagree)."""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("jax")

from normdiff.cases.model import Case  # noqa: E402
from normdiff.cases.suites import Suite  # noqa: E402
from normdiff.harness import api  # noqa: E402
from normdiff.harness.engine import judge, runner  # noqa: E402
from normdiff.implementations import numpy_own, torch_own  # noqa: E402
from normdiff.implementations.frameworks.torch import to_numpy  # noqa: E402

DTYPES = ("float32", "bfloat16", "float16")
LN_REGIMES = ("normal", "narrow:1", "mean_shift:3", "tiny_rms", "zero_rows", "outliers")
GROUP_REGIMES = ("normal", "group_scales", "tiny_rms")
PASSING = ("identical", "agree")
OWN = ("torch", "jax")
TORCH_BUILTINS = ("torch-F.layer_norm", "torch-nn.LayerNorm")
HAS_FLAX = importlib.util.find_spec("flax") is not None


def _ln(dtype: str, regime: str, **extra) -> Case:
    return Case.of("layer_norm", "torch", dtype, "16x128", regime, weight="trained", bias="trained", **extra)


def _grouped(dtype: str, regime: str, gate: str, **extra) -> Case:
    return Case.of("group_gated_rms_norm", "mamba2", dtype, "8x8x64", regime, weight="trained", gate=gate, **extra)


def _cases() -> list[Case]:
    """Each forward case, and one case per gradient (dx, dw, db / dgate) of its backward."""
    out = []
    for dtype in DTYPES:
        for regime in LN_REGIMES:
            out += [_ln(dtype, regime), *_ln(dtype, regime, dy="normal").outputs()]
        for regime in GROUP_REGIMES:
            for gate in ("open", "closed"):
                out += [_grouped(dtype, regime, gate), *_grouped(dtype, regime, gate, dy="normal").outputs()]
    return out


@pytest.fixture(scope="module")
def results():
    names = ["torch", "jax", *TORCH_BUILTINS] + (["flax-layernorm"] if HAS_FLAX else [])
    report = api.run_suite(Suite("own-layer-norm", "", _cases()), api.select(names), passes="both")
    df = report.results
    return df[df["outcome"] != "unsupported"]  # the built-ins declare layer_norm@torch only


def _failing(rows):
    bad = rows[~rows["outcome"].isin(PASSING)]
    return bad[["implementation", "case_id", "outcome", "max_ulp", "tolerance_ulp", "detail"]].to_string()


def _narrow_backward(rows):
    return rows["case_id"].str.contains("/narrow:") & rows["case_id"].str.contains("/dy=")


@pytest.mark.parametrize("impl", OWN)
def test_own_implementations_agree_forward_and_backward(results, impl):
    rows = results[results["implementation"] == impl]
    # 2 ops: 6 + 6 LayerNorm / 3 x 2 grouped cases per dtype, each forward + its gradients
    assert len(rows) == 3 * (6 * 4 + 6 * 4), rows["case_id"].tolist()
    assert rows["outcome"].isin(PASSING).all(), _failing(rows)


def test_torch_builtins_agree(results):
    rows = results[results["implementation"].isin(TORCH_BUILTINS)]
    assert len(rows) == 2 * 3 * 6 * 4  # layer_norm@torch only
    # Known, not a budget: with a weight in the input's bf16 / fp16, torch's CPU native_layer_norm
    # saves the mean and rstd for its backward in that dtype (float32 only for a float32 weight), so
    # dx and dw are computed from a mean rounded to bf16 / fp16; at mean 1000 (spacing 4 in bf16)
    # that misses by up to 2, against a std of ~1 (measured: dw 180 bf16 ULPs against a budget of
    # 8.5 at narrow:1; own torch's autograd of the same maths: 0.5). Everywhere else they agree.
    known = _narrow_backward(rows) & rows["output"].isin(["dx", "dw"]) & (rows["dtype"] != "float32")
    assert rows[~known]["outcome"].isin(PASSING).all(), _failing(rows[~known])


@pytest.mark.skipif(not HAS_FLAX, reason="flax is not installed")
def test_flax_layernorm_agrees_but_for_its_one_pass_variance(results):
    rows = results[results["implementation"] == "flax-layernorm"]
    assert len(rows) == 3 * 6 * 4
    # nnx.LayerNorm's default use_fast_variance=True is E[x^2] - E[x]^2 in float32: rows at mean
    # 1000, std 1 cancel catastrophically in float32 and float16 (bf16 quantises them to a coarser
    # spread); everywhere else its float32 result (bf16 / fp16 promoted) is within budget
    narrow = rows["case_id"].str.contains("/narrow:")
    assert rows[~narrow]["outcome"].isin(PASSING).all(), _failing(rows[~narrow])
    # the forward shows it; the backward, judged at the magnitude of its terms (|x| + |mean|: the
    # centring's own conditioning, vjp.py), stays within budget
    shown = rows[narrow & (rows["dtype"] != "bfloat16") & (rows["output"] == "y")]
    assert len(shown) and (shown["outcome"] == "disagree").all(), _failing(shown)


# ---- own torch honours the LayerNorm mutants' knobs ---------------------------------------------

MUTANTS = [  # (knob changes, the case that shows them)
    ({"variance_form": "one_pass"}, _ln("float32", "narrow:0.1")),
    ({"correction": 1}, _ln("float32", "normal")),
    ({"bias_order": "before_scale"}, _ln("float32", "normal")),
    ({"centre": False}, _ln("float32", "mean_shift:3")),
]


@pytest.mark.parametrize("changes,case", MUTANTS, ids=[next(iter(m)) for m, _ in MUTANTS])
def test_torch_own_honours_the_mutant_knobs(changes, case):
    prepared = runner.prepare(case)
    inputs, expected = prepared.inputs, prepared.expected["y"]
    right = to_numpy(torch_own.run(case.op, case.contract, inputs)).astype(np.float64)
    wrong_contract = case.contract.replace(**changes)
    wrong = to_numpy(torch_own.run(case.op, wrong_contract, inputs)).astype(np.float64)
    with np.errstate(invalid="ignore"):
        changed = ~np.isclose(wrong, right, rtol=1e-4, atol=1e-4)
    assert changed.mean() > 0.5, f"{changes}: only {changed.mean():.1%} of the outputs moved"
    # the correct contract agrees with the oracle, the mutant does not
    assert judge.judge(right, expected.ref, expected.ref.fmt, expected.budget).outcome in PASSING
    assert judge.judge(wrong, expected.ref, expected.ref.fmt, expected.budget).outcome != "agree"
    # and it is numpy_own's formula for the same knobs (the mutant, not some other error)
    with np.errstate(invalid="ignore"):  # one pass at std 0.1: negative variances, sqrt NaN
        mirror = numpy_own.run(case.op, wrong_contract, inputs).astype(np.float64)
    if changes != {"variance_form": "one_pass"}:  # that one is rounding noise: order-dependent
        assert np.allclose(wrong, mirror, rtol=1e-3, atol=1e-3, equal_nan=True)
