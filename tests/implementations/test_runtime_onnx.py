"""onnxruntime running normalization graphs built in code (runtime_onnx.py) through the runner: each
agrees with the conventions it is declared for in float32 and float16 (and bf16 where onnxruntime
has the kernels), bf16 RMSNormalization and the bf16 exported Qwen3RMSNorm fail to load with the
reason (no bf16 Mul kernel), and the float16 roundings the declarations rest on are pinned; the
QuantizeLinear graph of the quantizing norms against the exact maths, and what its QuantizeLinear
node does (nearest-even, saturating, NaN for a zero scale)."""
from __future__ import annotations

import importlib.util

import ml_dtypes
import numpy as np
import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

from normdiff.cases.model import Case, CaseInputs  # noqa: E402
from normdiff.cases.suites import Suite  # noqa: E402
from normdiff.harness import api  # noqa: E402

from normdiff.harness.data import quant  # noqa: E402
from normdiff.harness.data.ops import quantize  # noqa: E402
from normdiff.harness.engine import verdict  # noqa: E402
from normdiff.implementations import catalog, numpy_own, registry, runtime_onnx  # noqa: E402
from normdiff.implementations.frameworks.onnxruntime import run_graph  # noqa: E402

NAMES = ("onnx-RMSNormalization", "onnx-LayerNormalization", "onnx-SimplifiedLayerNormalization",
         "onnx-export-hf-qwen3")
DTYPES = ("float32", "float16", "bfloat16")
REGIMES = ("normal", "tiny_rms:1e-3", "zero_rows", "spike")
NO_BF16 = ("onnx-RMSNormalization", "onnx-export-hf-qwen3")  # no bf16 Mul kernel
def _cases(op: str, convention: str, shape: str) -> list[Case]:
    return [Case.of(op, convention, dtype, shape, regime=regime, weight="trained", **extra)
            for dtype in DTYPES for regime in REGIMES
            for extra in ([{"bias": "trained"}] if op == "layer_norm" else [{}])]


def suite() -> Suite:
    return Suite("onnx", "", tuple(_cases("rms_norm", "olmo2", "8x1024") + _cases("rms_norm", "qwen3", "8x123")
                                   + _cases("layer_norm", "torch", "16x64")))


def _impls():
    impls = [registry.get(n) for n in NAMES]
    if any(i.unavailable_reason() for i in impls if i.name == "onnx-export-hf-qwen3"):
        impls = [i for i in impls if i.name != "onnx-export-hf-qwen3"]  # no torch / transformers here
    return impls


@pytest.fixture(scope="module")
def report():
    return api.run_suite(suite(), _impls(), keep_outputs=True)


def test_declared_conventions_and_forward_only():
    listed = {i.name: i for i in catalog.runtime_implementations()}
    assert set(NAMES) <= set(listed)
    one_rounding = {("rms_norm", "olmo2"), ("rms_norm", "torch")}
    assert listed["onnx-RMSNormalization"].op_conventions == one_rounding
    assert listed["onnx-SimplifiedLayerNormalization"].op_conventions == one_rounding
    assert listed["onnx-LayerNormalization"].op_conventions == {("layer_norm", "torch")}
    assert listed["onnx-export-hf-qwen3"].op_conventions == {("rms_norm", "qwen3")}
    for name in NAMES:
        assert listed[name].passes == ("forward",) and listed[name].framework == "onnxruntime"
        assert "onnx" in listed[name].requires


@pytest.mark.parametrize("impl", NAMES)
def test_agrees_with_its_conventions(report, impl, ran):
    if impl not in {i.name for i in _impls()}:
        pytest.skip(f"{impl}: {registry.get(impl).unavailable_reason()}")
    rows = ran(report, impl)
    ran = rows[~((rows["dtype"] == "bfloat16") & (impl in NO_BF16))]
    assert set(ran["dtype"]) == (set(DTYPES) - ({"bfloat16"} if impl in NO_BF16 else set()))
    assert len(ran) and set(ran["outcome"]) <= {"identical", "agree"}, \
        ran[~ran["outcome"].isin(["identical", "agree"])][["case_id", "outcome", "max_ulp", "detail"]]
    assert (ran["max_ulp"] <= ran["tolerance_ulp"]).all()


@pytest.mark.parametrize("impl", NO_BF16)
def test_finding_no_bf16_mul_kernel(report, impl, ran):
    if impl not in {i.name for i in _impls()}:
        pytest.skip(f"{impl}: {registry.get(impl).unavailable_reason()}")
    rows = ran(report, impl)
    bf16 = rows[rows["dtype"] == "bfloat16"]
    assert len(bf16) and set(bf16["outcome"]) == {"error"}
    for detail in bf16["detail"]:
        assert "NOT_IMPLEMENTED" in detail and "Mul(14)" in detail and "bfloat16" in detail, detail
    # the finding explains exactly those rows (by their message: engine/verdict.py), and nothing else
    # of this run fails
    annotated, stale = verdict.annotate(report.results)
    assert not stale and (annotated.loc[bf16.index, "known_finding"] != "").all()
    assert verdict.failing_implementations(annotated) == []


def _fp16_case(convention: str, shape: str = "64x1024") -> Case:
    return Case.of("rms_norm", convention, "float16", shape, weight="trained")


def _graph(kind: str, case: Case) -> np.ndarray:
    inputs = case.inputs()
    graph = runtime_onnx.session(kind, case.width, case.contract.eps, case.dtype)
    return run_graph(graph, {"x": inputs.arrays["x"], "weight": inputs.arrays["weight"]})


def _mismatch(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.mean(a.astype(np.float64) != b.astype(np.float64)))


def _roundings(case: Case) -> tuple[np.ndarray, np.ndarray]:
    """numpy_own's float16 output with one rounding and with the Llama cast's two."""
    inputs = case.inputs()
    return tuple(np.asarray(numpy_own.run(case.op, case.contract.replace(cast=cast), inputs))
                 for cast in ("one_rounding", "llama"))


def test_rms_normalization_rounds_once_in_fp16():
    # the ONNX spec rounds the normalised value before the scale; onnxruntime's kernel does not
    case = _fp16_case("olmo2")
    one, two = _roundings(case)
    assert _mismatch(one, two) > 0.1  # the weight makes the two orders differ on many elements
    got = _graph("RMSNormalization", case)
    assert _mismatch(got, one) < 0.001 and _mismatch(got, two) > 0.1
    assert np.array_equal(got.view(np.uint16), _graph("SimplifiedLayerNormalization", case).view(np.uint16))


def test_exported_qwen3_rounds_once_in_fp16(report):
    # the exported Qwen3RMSNorm's float16 rows (from the run): the Llama cast's second rounding is gone
    if "onnx-export-hf-qwen3" not in {i.name for i in _impls()}:
        pytest.skip(registry.get("onnx-export-hf-qwen3").unavailable_reason())
    case = Case.of("rms_norm", "qwen3", "float16", "8x123", weight="trained")
    one, two = _roundings(case)
    got = report.outputs[(case.id, "onnx-export-hf-qwen3")]
    assert _mismatch(one, two) > 0.1
    assert _mismatch(got, one) == 0 and _mismatch(got, two) > 0.1


def _llama_cast_graph(width: int, eps: float):
    """The graph torch.onnx.export writes for Qwen3RMSNorm in float16 (Cast to float, Pow,
    ReduceMean, Add, Sqrt, 1 / ., Mul, Cast back to float16, times the weight in float16)."""
    from onnx import TensorProto, helper, numpy_helper

    f16, f32 = TensorProto.FLOAT16, TensorProto.FLOAT
    const = lambda name, v: helper.make_node("Constant", [], [name], value=numpy_helper.from_array(  # noqa: E731
        np.array(v, np.float32), name))
    nodes = [helper.make_node("Cast", ["x"], ["xf"], to=f32), const("two", 2.0), const("eps", eps), const("one", 1.0),
             helper.make_node("Pow", ["xf", "two"], ["sq"]),
             helper.make_node("ReduceMean", ["sq"], ["ms"], axes=[-1], keepdims=1),
             helper.make_node("Add", ["ms", "eps"], ["v"]), helper.make_node("Sqrt", ["v"], ["s"]),
             helper.make_node("Div", ["one", "s"], ["r"]), helper.make_node("Mul", ["xf", "r"], ["n"]),
             helper.make_node("Cast", ["n"], ["nh"], to=f16), helper.make_node("Mul", ["weight", "nh"], ["y"])]
    graph = helper.make_graph(nodes, "llama_cast", [helper.make_tensor_value_info("x", f16, ["rows", width]),
                                                    helper.make_tensor_value_info("weight", f16, [width])],
                              [helper.make_tensor_value_info("y", f16, ["rows", width])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = runtime_onnx.IR_VERSION
    return model


@pytest.mark.parametrize("optimize", [True, False])
def test_onnxruntime_drops_the_fp16_cast_at_every_optimization_level(optimize):
    # no float16 Mul on the CPU provider: it runs the Mul in float32 between inserted casts and
    # removes the graph's Cast(-> fp16) with its inserted Cast(-> fp32), even with ORT_DISABLE_ALL
    case = _fp16_case("qwen3")
    one, two = _roundings(case)
    inputs = case.inputs()
    graph = runtime_onnx.load(_llama_cast_graph(case.width, case.contract.eps), optimize)
    got = run_graph(graph, {"x": inputs.arrays["x"], "weight": inputs.arrays["weight"]})
    assert _mismatch(got, one) < 0.001 and _mismatch(got, two) > 0.1


def test_bf16_refusal_is_kept_per_key():
    case = Case.of("rms_norm", "olmo2", "bfloat16", "8x128", weight="trained")
    for _ in range(2):
        with pytest.raises(runtime_onnx.UnsupportedDtype, match=r"no bfloat16 kernel"):
            runtime_onnx.rms_norm(case.op, case.contract, case.inputs())


# ---- the quantizing norms: onnx-QuantizeLinear (runtime_onnx.quantize_linear) -----------------------

QUANTIZE = "onnx-QuantizeLinear"
FLOAT32_Y = {(op, convention) for op in ("rms_norm_quant", "add_rms_norm_quant")
             for convention in ("sglang-fp8", "aiter-fp8")}  # y kept in float32, a linear scale


def _quant_case(op: str, convention: str, dtype: str, regime: str) -> Case:
    extra = {"residual": "large"} if op.startswith("add_") else {}
    return Case.of(op, convention, dtype, "8x1024", regime, weight="trained", **extra)


def test_quantize_linear_is_declared_for_the_float32_y_contracts_only(monkeypatch):
    # not vLLM's (y rounded to bf16 first), DeepSeek's (the bf16 norm output) nor the MX ones (power-of-two scales)
    impl = registry.get(QUANTIZE)
    assert impl.op_conventions == FLOAT32_Y
    assert impl.passes == ("forward",) and impl.framework == "onnxruntime" and impl.batch_rows
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "onnx" else real(name, *a))
    assert "onnx is not installed" in impl.unavailable_reason()  # unavailable without onnx, not a failure


@pytest.mark.parametrize("op,convention", sorted(FLOAT32_Y))
def test_quantize_linear_against_the_exact_maths(op, convention):
    case = _quant_case(op, convention, "float32", "normal")
    inputs = case.inputs()
    rowed = {name: a.copy() for name, a in inputs.arrays.items() if name in ("x", "residual")}
    for a in rowed.values():
        a[0] = 0.0  # a zero row (x and the residual): a zero amax
    inputs = CaseInputs({**inputs.arrays, **rowed}, inputs.num_heads, inputs.layout)
    out = runtime_onnx.quantizing_norm(op, case.contract, inputs)
    exact = quantize.results(case.contract, inputs.arrays)
    fmt = quant.get_format(case.contract.quant_dtype)
    q, scale = quant.decode(out[0], fmt), out[1].astype(np.float64)
    assert out[0].dtype == fmt.np_dtype and out[1].dtype == np.float32 and scale.shape == (case.rows, 1)
    zero = ~exact["y"].any(-1)
    assert zero.tolist() == [True] + [False] * (case.rows - 1)
    # a zero row: SGLang's scale 0 and q 0 (y / 0 would be NaN: the graph's Where guard), aiter's 1e-10 / 240
    assert np.array_equal(scale[zero], exact["scale"][zero].astype(np.float32).astype(np.float64))
    assert not q[zero].any() and not np.isnan(q).any()
    # amax / max of a float32 y: a few float32 ulps from the exact scale
    assert np.allclose(scale, exact["scale"], rtol=2.0 ** -20, atol=0)
    # y / scale rounded once: the exact q but where a legal float32 rounding of y crosses a code boundary (one code)
    assert np.mean(q == exact["q"]) > 0.999
    assert (np.abs(q - exact["q"]) <= fmt.spacing(np.maximum(np.abs(q), np.abs(exact["q"])))).all()
    # each row's largest |y| lands on the format's largest value, its sign kept
    rows = np.flatnonzero(~zero)
    top = np.abs(exact["y"][rows]).argmax(-1)
    assert np.array_equal(q[rows, top], np.sign(exact["y"][rows, top]) * fmt.max)
    if op.startswith("add_"):  # x + residual in float32, rounded to the case dtype
        assert np.array_equal(out[2], numpy_own.run(op, case.contract, inputs)[2])


def _quantize_node(fmt: str, width: int):
    """One QuantizeLinear(y, scale) with one scale per row, to `fmt`, saturating (as quantize_linear writes it)."""
    from onnx import TensorProto, helper

    element = getattr(TensorProto, runtime_onnx._QUANT_ELEMENT[fmt])
    node = helper.make_node("QuantizeLinear", ["y", "scale"], ["q"], axis=1, block_size=width, output_dtype=element,
                            saturate=1)
    graph = helper.make_graph([node], "quantize", [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["rows", width]),
                                                   helper.make_tensor_value_info("scale", TensorProto.FLOAT, ["rows", 1])],
                              [helper.make_tensor_value_info("q", element, ["rows", width])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", runtime_onnx.QUANT_OPSET)])
    model.ir_version = runtime_onnx.IR_VERSION
    return model


@pytest.mark.parametrize("fmt", ["float8_e4m3fn", "float8_e4m3fnuz"])
def test_quantize_linear_rounds_to_nearest_even_saturates_and_makes_nan_of_a_zero_scale(fmt):
    # what the graph rests on (onnxruntime 1.32, CPU): one rounding to nearest even, the format's max past it
    # (saturate=1), and y / 0 NaN, which is why a scale that may be 0 is guarded; e4m3fnuz, which onnxruntime's
    # .numpy() cannot return, comes back by its bits
    y = np.array([[1.0625 + 2.0 ** -20, 1.0625, 1000.0, -1000.0], [0.0, 0.0, 0.0, 0.0]], np.float32)
    q = run_graph(runtime_onnx.load(_quantize_node(fmt, 4)), {"y": y, "scale": np.array([[1.0], [0.0]], np.float32)})
    top = quant.get_format(fmt).max
    assert q.dtype == np.dtype(getattr(ml_dtypes, fmt))
    assert q[0].astype(np.float64).tolist() == [1.125, 1.0, top, -top]  # 1.0625 a tie: to even, 1.0
    assert np.isnan(q[1].astype(np.float64)).all()


def test_quantize_linear_agrees_with_its_conventions():
    cases = [o for op, convention in sorted(FLOAT32_Y) for dtype in DTYPES
             for regime in ("normal", "outliers", "zero_rows", "tiny_rms:1e-3")
             for o in _quant_case(op, convention, dtype, regime).outputs()]
    rows = api.run_suite(Suite("quantize", "", tuple(cases)), [registry.get(QUANTIZE)]).results
    assert len(rows) == len(cases)
    bad = rows[~rows["outcome"].isin(["identical", "agree"])]
    assert bad.empty, bad[["case_id", "outcome", "max_ulp", "detail"]].to_string()
