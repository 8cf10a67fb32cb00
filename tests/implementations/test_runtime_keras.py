"""keras 3's norms on JAX (ops.rms_normalization, layers.RMSNormalization and LayerNormalization,
runtime_keras.py) through the runner: each agrees with the conventions it is declared for; the
op rounds once (olmo2's order) and keeps the input dtype, the layers return float32 for bf16 /
fp16 input under the default dtype policy and that is recorded, not hidden."""
from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("KERAS_BACKEND", "jax")
pytest.importorskip("jax")
pytest.importorskip("keras")

from normdiff.cases.model import Case  # noqa: E402
from normdiff.cases.suites import Suite  # noqa: E402
from normdiff.harness import api  # noqa: E402
from normdiff.implementations import catalog  # noqa: E402

IMPLS = [i for i in catalog._mlx_keras_tinygrad() if i.framework == "keras"]
DTYPES = ("float32", "bfloat16", "float16")
PROMOTING = ("keras-layers.RMSNormalization", "keras-layers.LayerNormalization")


def _cases() -> list[Case]:
    out = []
    for dtype in DTYPES:
        out.append(Case.of("rms_norm", "olmo2", dtype, "8x1024", weight="trained"))
        out.append(Case.of("rms_norm", "torch", dtype, "4x128", "tiny_rms:1e-3", weight="trained"))
        out.append(Case.of("qk_norm", "olmo2", dtype, "4x8x64", "head_scales:lognormal", weight="trained"))
        out.append(Case.of("layer_norm", "torch", dtype, "4x128", "mean_shift:3", weight="trained", bias="trained"))
        out.append(Case.of("layer_norm", "torch", dtype, "8x64", "narrow:1", weight="trained", bias="trained"))
    return out


@pytest.fixture(scope="module")
def report():
    return api.run_suite(Suite("keras", "", tuple(_cases())), IMPLS)


@pytest.mark.parametrize("impl", [i.name for i in IMPLS])
def test_agrees_with_its_conventions(report, impl, ran):
    rows = ran(report, impl)
    assert set(rows["dtype"]) == set(DTYPES)
    bad = rows[~rows["outcome"].isin(["identical", "agree"])]
    assert bad.empty, bad[["case_id", "outcome", "max_ulp", "tolerance_ulp"]].to_string()


@pytest.mark.parametrize("impl", [i.name for i in IMPLS])
def test_output_dtype_is_recorded_as_keras_returns_it(report, impl, ran):
    rows = ran(report, impl)
    if impl in PROMOTING:  # the default float32 policy: float32 out for every input dtype
        assert set(rows["output_dtype"]) == {"float32"}
        assert rows.loc[rows["dtype"] != "float32", "detail"].str.contains("float32").all()
    else:
        assert (rows["output_dtype"] == rows["dtype"]).all()


def test_op_rounds_once_and_takes_the_contracts_eps():
    """ops.rms_normalization is bit-identical to the float32 one-rounding order, at the case's eps
    (its default, epsilon=None, is 1e-7)."""
    from normdiff.implementations import runtime_keras

    for dtype in ("bfloat16", "float16"):
        case = Case.of("rms_norm", "olmo2", dtype, "4x128", "tiny_rms:1e-3", weight="trained")
        inputs = case.inputs()
        x, w = inputs.arrays["x"], inputs.arrays["weight"]
        xf = x.astype(np.float32)
        mean_square = (xf * xf).mean(-1, keepdims=True, dtype=np.float32)
        inv = np.float32(1) / np.sqrt(mean_square + np.float32(case.contract.eps))
        y = runtime_keras.ops_rms_normalization(case.op, case.contract, inputs)
        assert y.dtype == x.dtype
        assert (y == (xf * inv * w.astype(np.float32)).astype(x.dtype)).mean() > 0.99
