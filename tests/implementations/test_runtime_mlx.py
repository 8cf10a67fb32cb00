"""MLX's own norms (mx.fast.rms_norm / layer_norm, mlx.nn.RMSNorm / LayerNorm, runtime_mlx.py)
through the runner: each agrees with the conventions it is declared for, forward and backward, the
rounding orders that decided the declarations are pinned, and the one finding (fast.layer_norm
rounds three times, so bf16 LayerNorm rows can miss the one-rounding budget) reproduces."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("mlx.core")

from normdiff.cases.model import Case  # noqa: E402
from normdiff.cases.suites import Suite  # noqa: E402
from normdiff.harness import api  # noqa: E402
from normdiff.implementations import catalog  # noqa: E402

IMPLS = [i for i in catalog._mlx_keras_tinygrad() if i.framework == "mlx" and i.name != "mlx-quantize"]
QUANTIZE = next(i for i in catalog._mlx_keras_tinygrad() if i.name == "mlx-quantize")
RMS = ("mlx-fast.rms_norm", "mlx-nn.RMSNorm")
LN = ("mlx-fast.layer_norm", "mlx-nn.LayerNorm")
DTYPES = ("float32", "bfloat16", "float16")
# the default suite's case where MLX's three roundings miss layer_norm's bf16 budget most (2.24 > 2.02 ulp)
FINDING = "layer_norm@torch/bf16/8x1024/tiny_rms:1e-3/w=trained/b=trained/eps=1e-06"


def _cases() -> list[Case]:
    out = []
    for dtype in DTYPES:
        for conv in ("qwen3", "llama", "deepseek-v3"):
            out.append(Case.of("rms_norm", conv, dtype, "8x512", weight="trained"))
        out.append(Case.of("rms_norm", "qwen3", dtype, "4x128", "tiny_rms:1e-3", weight="trained"))
        out.append(Case.of("rms_norm", "llama", dtype, "4x4096", "outliers", weight="large"))
        out.append(Case.of("qk_norm", "qwen3", dtype, "4x8x64", "head_scales:lognormal", weight="trained"))
        out.append(Case.of("layer_norm", "torch", dtype, "4x128", "mean_shift:3", weight="trained", bias="trained"))
        out.append(Case.of("layer_norm", "torch", dtype, "4x1024", weight="trained", bias="trained"))
        # backward: dx and dw (and db) through mx.vjp
        out.append(Case.of("rms_norm", "qwen3", dtype, "8x1024", weight="trained", dy="aligned"))
        out.append(Case.of("qk_norm", "qwen3", dtype, "4x4x64", "head_scales:lognormal", weight="trained",
                           dy="aligned"))
        out.append(Case.of("layer_norm", "torch", dtype, "8x128", weight="trained", bias="trained", dy="aligned"))
    return out + [Case.from_id(FINDING)]


@pytest.fixture(scope="module")
def report():
    cases = _cases()
    return api.run_suite(Suite("mlx", "", tuple(cases)), IMPLS)


@pytest.mark.parametrize("impl", [i.name for i in IMPLS])
def test_agrees_with_its_conventions(report, impl, ran):
    rows = ran(report, impl)
    assert set(rows["dtype"]) == set(DTYPES) and set(rows["pass"]) == {"forward", "backward"}
    assert (rows["output_dtype"] == rows["dtype"]).all(), "MLX returns the case dtype"
    # the finding's rows (forward layer_norm in bf16 / fp16: three roundings) may disagree, by little
    finding = (rows["op"] == "layer_norm") & (rows["pass"] == "forward") & (rows["dtype"] != "float32")
    assert (rows.loc[finding & (rows["outcome"] == "disagree"), "max_ulp"] < 3).all()
    bad = rows[~rows["outcome"].isin(["identical", "agree"]) & ~finding]
    assert bad.empty, bad[["case_id", "outcome", "max_ulp", "tolerance_ulp"]].to_string()


@pytest.mark.parametrize("impl", LN)
def test_finding_layer_norm_rounds_three_times(report, impl, ran):
    row = ran(report, impl).set_index("case_id").loc[FINDING]
    assert row["outcome"] == "disagree" and row["tolerance_ulp"] < row["max_ulp"] < 3, row["max_ulp"]


def _f32_stats(x, eps, centre):
    x = x.astype(np.float32)
    if centre:
        x = x - x.mean(-1, keepdims=True, dtype=np.float32)
    stat = (x * x).mean(-1, keepdims=True, dtype=np.float32)
    return x * (np.float32(1) / np.sqrt(stat + np.float32(eps)))


def test_rounding_orders_that_decide_the_declarations():
    """fast.rms_norm rounds x * rsqrt to the dtype before the weight (the Llama cast, qwen3/llama),
    fast.layer_norm also rounds after the weight and after the bias: bit for bit against NumPy
    models of those orders, far from the one-rounding order (the last bits of a few elements may
    differ by the order of the float32 sum, hence the shares)."""
    from normdiff.implementations import runtime_mlx

    for dtype in ("bfloat16", "float16"):
        case = Case.of("layer_norm", "torch", dtype, "16x1024", weight="trained", bias="trained")
        inputs = case.inputs()
        a = inputs.arrays
        w, b = a["weight"], a["bias"]
        rms = runtime_mlx.fast_rms_norm("rms_norm", case.contract, inputs)
        nrm = _f32_stats(a["x"], case.contract.eps, centre=False)
        assert (rms == nrm.astype(w.dtype) * w).mean() > 0.999
        assert (rms == (nrm * w.astype(np.float32)).astype(w.dtype)).mean() < 0.9
        ln = runtime_mlx.fast_layer_norm("layer_norm", case.contract, inputs)
        nrm = _f32_stats(a["x"], case.contract.eps, centre=True)
        assert (ln == nrm.astype(w.dtype) * w + b).mean() > 0.999
        assert (ln == (nrm * w.astype(np.float32) + b.astype(np.float32)).astype(w.dtype)).mean() < 0.9
        assert np.array_equal(runtime_mlx.nn_layer_norm("layer_norm", case.contract, inputs), ln)


def test_the_contracts_eps_is_used():
    """nn.RMSNorm defaults to eps 1e-5; the adapter passes the case's (qwen3: 1e-6), which matters at
    rms(x) ~ 1e-3."""
    from normdiff.implementations import runtime_mlx

    case = Case.of("rms_norm", "qwen3", "float32", "4x128", "tiny_rms:1e-3", weight="ones")
    inputs = case.inputs()
    y = runtime_mlx.nn_rms_norm(case.op, case.contract, inputs)
    x = inputs.arrays["x"]
    want = x / np.sqrt((x.astype(np.float64) ** 2).mean(-1, keepdims=True) + 1e-6)
    assert np.allclose(y, want, rtol=1e-5)


def test_mx_quantize_agrees_with_the_mx_conventions():
    # mx.quantize's E8M0 exponent is ceil(log2(amax / max)), as the mxfp8 and mxfp4 contracts say; its
    # nvfp4 mode, given MLX's global_scale = 2688 / g, the E4M3 block scales of vLLM's NVFP4 recipe
    cases = [Case.of("rms_norm_quant", conv, dtype, shape, regime, weight="trained")
             for conv in ("mxfp8", "mxfp4") for dtype in DTYPES for shape in ("8x1024", "4x7168")
             for regime in ("normal", "outliers", "zero_rows")]
    cases += [Case.of("rms_norm_quant_static", "nvfp4", dtype, "8x1024", regime, weight="trained", tensor_scale=scale)
              for dtype in DTYPES for regime in ("normal", "outliers", "zero_rows")
              for scale in ("nvfp4-amax4", "nvfp4-amax64", "fp8-amax4")]
    cases = [o for c in cases for o in c.outputs()]
    rows = api.run_suite(Suite("mx", "", tuple(cases)), [QUANTIZE]).results
    assert len(rows) == len(cases) and set(rows["output"]) == {"q", "scale"}
    bad = rows[~rows["outcome"].isin(["identical", "agree"])]
    assert bad.empty, bad[["case_id", "outcome", "max_ulp", "detail"]].to_string()
    assert (rows.loc[rows["output"] == "scale", "output_dtype"] == "uint8").all()  # E8M0 / E4M3 bytes, as MLX gives them
