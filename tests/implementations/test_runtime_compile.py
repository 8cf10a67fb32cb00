"""torch.compile (inductor, CPU) of our own torch modules and of HF's Qwen3RMSNorm
(runtime_compile.py) through the runner: each agrees with the convention it is declared for, in
every dtype; the compiled bf16 Qwen3 RMSNorm rounds once where eager rounds twice (inductor does not
emulate the Llama cast's intermediate rounding), and without a C++ compiler they are unavailable.

Compiling costs ~2 s a shape cold (the first ~8 s), so the run below holds one shape per
implementation and dtype, several regimes and weights each (7 compilations); inductor's cache is kept
under .pytest_cache between runs (warm, ~0.2 s a shape)."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")

# before any worker starts (they inherit it): never the user's ~/.cache, and reused between runs
os.environ.setdefault("NORMDIFF_INDUCTOR_CACHE",
                      str(Path(__file__).parents[2] / ".pytest_cache" / "normdiff-inductor"))

from normdiff.cases.model import Case  # noqa: E402
from normdiff.cases.suites import Suite  # noqa: E402
from normdiff.harness import api  # noqa: E402
from normdiff.implementations import catalog, numpy_own, registry  # noqa: E402

NAMES = ("compile-torch-rmsnorm", "compile-hf-qwen3", "compile-torch-layernorm")
DTYPES = ("float32", "float16", "bfloat16")
RMS_DTYPES = ("float16", "bfloat16")
MISSING = catalog.compiler_missing()
needs_compiler = pytest.mark.skipif(MISSING is not None, reason=str(MISSING))


def suite() -> Suite:
    # rms_norm in the dtypes where the Llama cast rounds (float32 rows: the default suite's run)
    rms = [Case.of("rms_norm", "qwen3", dtype, "8x128", regime=regime, weight=weight)
           for dtype in RMS_DTYPES for regime, weight in (("normal", "trained"), ("normal", "large"),
                                                      ("tiny_rms:1e-3", "trained"), ("zero_rows", "trained"))]
    ln = [Case.of("layer_norm", "torch", dtype, "16x64", regime=regime, weight="trained", bias="trained")
          for dtype in DTYPES for regime in ("normal", "narrow:1", "zero_rows")]
    return Suite("compile", "", tuple(rms + ln))


@pytest.fixture(scope="module")
def report():
    impls = [registry.get(n) for n in NAMES] + [registry.get("torch")]  # eager torch_own alongside
    return api.run_suite(suite(), impls, keep_outputs=True)


def test_declared_conventions_forward_only_own_worker():
    listed = {i.name: i for i in catalog.runtime_implementations()}
    assert listed["compile-torch-rmsnorm"].op_conventions == {("rms_norm", "qwen3")}
    assert listed["compile-hf-qwen3"].op_conventions == {("rms_norm", "qwen3")}
    assert listed["compile-torch-layernorm"].op_conventions == {("layer_norm", "torch")}
    for name in NAMES:
        impl = listed[name]
        assert impl.passes == ("forward",) and impl.worker == "torch-compile" and not impl.batch_rows


def test_unavailable_without_a_compiler(monkeypatch):
    monkeypatch.setenv("CXX", "no-such-c++-compiler")
    for name in NAMES:
        reason = registry.get(name).unavailable_reason()
        assert reason and "no-such-c++-compiler" in reason and "inductor" in reason


@needs_compiler
@pytest.mark.parametrize("impl", NAMES)
def test_agrees_with_its_convention(report, impl, ran):
    rows = ran(report, impl)
    if impl == "compile-hf-qwen3" and registry.get(impl).unavailable_reason():
        pytest.skip(registry.get(impl).unavailable_reason())
    assert set(rows["dtype"]) == set(DTYPES if impl == "compile-torch-layernorm" else RMS_DTYPES)
    assert set(rows["outcome"]) <= {"identical", "agree"}, \
        rows[~rows["outcome"].isin(["identical", "agree"])][["case_id", "outcome", "max_ulp", "detail"]]
    assert (rows["max_ulp"] <= rows["tolerance_ulp"]).all()


def _mismatch(a, b) -> float:
    return float(np.mean(np.asarray(a, np.float64) != np.asarray(b, np.float64)))


@needs_compiler
def test_compiled_llama_cast_rounds_once_in_bf16(report):
    # inductor keeps x * rsqrt in float32 across `.to(bfloat16)`: one rounding, where eager rounds
    # twice; every weight of the shape is read from the parameter (one compiled graph serves both)
    for weight in ("trained", "large"):
        case = Case.of("rms_norm", "qwen3", "bfloat16", "8x128", weight=weight)
        one = numpy_own.run(case.op, case.contract.replace(cast="one_rounding"), case.inputs())
        eager = report.outputs[(case.id, "torch")]
        for impl in ("compile-torch-rmsnorm", "compile-hf-qwen3"):
            compiled = report.outputs[(case.id, impl)]
            assert _mismatch(compiled, one) == 0, (impl, weight)
            assert _mismatch(compiled, eager) > 0.1, (impl, weight)
