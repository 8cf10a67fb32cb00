"""tinygrad's nn.RMSNorm and nn.LayerNorm (CPU, clang; runtime_tinygrad.py) through the runner:
RMSNorm agrees with the Llama-cast conventions it is declared for; LayerNorm agrees in float32 and
reproduces its finding in bf16 / fp16 (statistics in the input dtype; in fp16 the squares of
|x - mean| > 256 overflow and the row collapses to the bias)."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tinygrad")

from normdiff.cases.model import Case  # noqa: E402
from normdiff.cases.suites import Suite  # noqa: E402
from normdiff.harness import api  # noqa: E402
from normdiff.implementations import catalog  # noqa: E402

IMPLS = {i.name: i for i in catalog._mlx_keras_tinygrad() if i.framework == "tinygrad"}
REASON = IMPLS["tinygrad-nn.RMSNorm"].unavailable_reason()
needs_clang = pytest.mark.skipif(REASON is not None, reason=REASON or "")
DTYPES = ("float32", "bfloat16", "float16")
# default-suite cases of the finding: bf16 statistics at mean 1000 (51 ulp, budget 2.3), and an fp16
# outlier row whose squares overflow (2266 ulp, budget 2)
LN_FINDINGS = ("layer_norm@torch/bf16/16x64/narrow:4/w=trained/b=trained",
               "layer_norm@torch/fp16/16x64/outliers/w=trained/b=trained")


def _cases() -> list[Case]:
    out = []
    for dtype in DTYPES:  # few shapes: every new shape and dtype is a clang compile
        out.append(Case.of("rms_norm", "qwen3", dtype, "8x128", weight="trained"))
        out.append(Case.of("rms_norm", "qwen3", dtype, "8x128", "tiny_rms:1e-3", weight="trained"))
        out.append(Case.of("qk_norm", "qwen3", dtype, "8x4x32", "head_scales:lognormal", weight="trained"))
    out.append(Case.of("layer_norm", "torch", "float32", "16x64", "narrow:4", weight="trained", bias="trained"))
    return out + [Case.from_id(c) for c in LN_FINDINGS]


@pytest.fixture(scope="module")
def report():
    return api.run_suite(Suite("tinygrad", "", tuple(_cases())), list(IMPLS.values()))


def test_unavailable_names_the_compiler(monkeypatch):
    from normdiff.implementations.frameworks import tinygrad as record

    monkeypatch.setattr(record.shutil, "which", lambda name: None)
    assert "clang" in IMPLS["tinygrad-nn.RMSNorm"].unavailable_reason()


@needs_clang
def test_rms_norm_agrees_with_the_llama_cast(report, ran):
    rows = ran(report, "tinygrad-nn.RMSNorm").set_index("case_id")
    assert set(rows["dtype"]) == set(DTYPES) and (rows["output_dtype"] == rows["dtype"]).all()
    bad = rows[~rows["outcome"].isin(["identical", "agree"])]
    assert bad.empty, bad[["outcome", "max_ulp", "tolerance_ulp"]].to_string()


@needs_clang
def test_finding_layer_norm_statistics_in_the_input_dtype(report, ran):
    rows = ran(report, "tinygrad-nn.LayerNorm").set_index("case_id")
    assert rows.loc["layer_norm@torch/fp32/16x64/narrow:4/w=trained/b=trained", "outcome"] == "agree"
    for case_id in LN_FINDINGS:
        row = rows.loc[case_id]
        assert row["outcome"] == "disagree" and row["max_ulp"] > 10 * row["tolerance_ulp"], (case_id, row["max_ulp"])


@needs_clang
def test_fp16_outlier_rows_collapse_to_the_bias():
    """(x - mean)^2 overflows fp16 past |x - mean| = 256: the variance is inf, rsqrt 0, y = b, on most
    such rows (15 of these 16; clang keeps some fp16 products in float32, so not on every one)."""
    # through a worker, as a run calls it: tinygrad in this process would need the worker's set-up
    # (its CC) and leave its multiprocessing pool and resource tracker behind as our children
    case = Case.from_id(LN_FINDINGS[1])
    impl = IMPLS["tinygrad-nn.LayerNorm"]
    report = api.run_suite(Suite("outliers", "", (case,)), [impl], keep_outputs=True)
    inputs = case.inputs()
    x = inputs.arrays["x"].astype(np.float32)
    overflowing = (np.abs(x - x.mean(-1, keepdims=True)) > 256).any(-1)
    y = report.outputs[(case.id, impl.name)]
    collapsed = (y == np.broadcast_to(inputs.arrays["bias"], y.shape)).all(-1)
    assert collapsed.sum() > len(y) // 2 and not (collapsed & ~overflowing).any()
