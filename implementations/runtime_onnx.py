"""onnxruntime (CPU provider) running normalization graphs built here, in code, with onnx.helper
(nothing is downloaded), and one HF layer exported with torch.onnx.export. Forward only: an
InferenceSession has no backward pass.

  onnx-RMSNormalization          the standard op (ai.onnx opset 23), weight as a graph input
  onnx-LayerNormalization        the standard op (ai.onnx opset 17), weight and bias as inputs
  onnx-SimplifiedLayerNormalization  onnxruntime's own RMSNorm kernel (a contrib op it registers in
                                 the default domain; not in the ONNX standard)
  onnx-export-hf-qwen3           HF Qwen3RMSNorm traced by torch.onnx.export (the legacy TorchScript
                                 exporter, dynamo=False: no onnxscript needed; ~30 ms an export),
                                 run with onnxruntime's default optimizations
  onnx-QuantizeLinear            the quantizing norms: RMSNormalization in float32, the scale from
                                 ReduceMax |y|, QuantizeLinear (opset 23) to FP8 (`quantize_linear`)

Each graph is built once per (kind, width, eps, dtype) and kept as an InferenceSession; its row
dimension is symbolic ("rows"), so the rows of every case of a width share it and the runner may
batch them (rows are independent in every graph here). A graph that onnxruntime refuses to load
is kept as its error, so every case of that key says the same thing.

bf16: onnxruntime 1.32's CPU provider has no bfloat16 Mul kernel. It has an RMSNormalization kernel
for float32 and float16 only (bit for bit SimplifiedLayerNormalization's); for bf16 it falls back to
the op's ONNX *function* body (Casts, Mul, ReduceMean, Add, Sqrt, ..., the scale's Mul), whose bf16
Mul has no kernel, so the graph fails to load ("NOT_IMPLEMENTED : Could not find an implementation
for Mul(14)"); the exported Qwen3RMSNorm (weight * y.to(bf16): a bf16 Mul, node '/Mul_1') fails the
same way. Those cases are errors that say so (`UnsupportedDtype`), each case of the key the same one
(harness/data/findings.py lists them). LayerNormalization and SimplifiedLayerNormalization have
bf16 kernels and run. Tensors cross through
frameworks/onnxruntime.py's run_graph (bf16 as raw 16-bit words over io_binding).

Which conventions, and why (measured against the oracle; tests/implementations/test_runtime_onnx.py
checks it):
  * RMSNormalization: the ONNX spec's function body casts the normalised value back to the input
    dtype and then multiplies by the scale in it (on paper the Llama cast, two roundings), but
    onnxruntime's own kernel computes x / sqrt(mean(x^2) + eps) * w in float32 and rounds once: in
    float16 its outputs are the one-rounding formula's, not the two-rounding one's (which differs on
    ~25% of elements). Declared for what it computes, plain gamma, one rounding: rms_norm@olmo2 and
    rms_norm@torch (as torch's own F.rms_norm, builtins.py).
  * SimplifiedLayerNormalization: onnxruntime's RMSNorm kernel, the same numbers, the same pairs.
  * LayerNormalization: layer_norm@torch (biased variance, float32 statistics, one rounding).
  * QuantizeLinear: the contracts that keep y in float32 and take a linear scale, per token:
    sglang-fp8 and aiter-fp8, with and without the fused add (x + residual added in float32, the
    sum returned cast to the case dtype). Not vLLM's nor DeepSeek-V3's (y rounded to the input
    dtype before quantizing: another contract), nor the MX ones (power-of-two scales). Every dtype
    runs: the graph casts its inputs to float32 first (onnxruntime has bf16 Casts), so no bf16 Mul
    is needed. Measured on onnxruntime 1.32's CPU provider: QuantizeLinear rounds y / scale once to
    nearest even (1.0625 + 2^-20 -> 1.125, the tie 1.0625 -> 1.0 in E4M3FN), saturates at the
    format's max with saturate=1, takes one scale per row or per block of columns (block_size, opset
    21) and makes y / 0 NaN (0xff E4M3FN, 0x80 E4M3FNUZ, -128 INT8), so a scale that may be 0 is
    guarded; its FLOAT4E2M1 output has no CPU kernel (NOT_IMPLEMENTED). Its Python API gives an
    E4M3FN tensor as its uint8 bits and cannot give E4M3FNUZ or E5M2 at all ("No corresponding Numpy
    type"): frameworks/onnxruntime.py reads each float8 output by its bits as ml_dtypes' type.
  * the exported Qwen3RMSNorm: declared for rms_norm@qwen3, the layer's own convention, whose
    contract rounds twice (the Llama cast: eager HF computes weight * y.to(fp16) in fp16). The CPU
    provider has no float16 Mul either, so onnxruntime runs that Mul in float32 between inserted
    casts (its "InsertedPrecisionFreeCast" nodes) and removes the exported Cast(-> fp16) together
    with its inserted Cast(-> fp32), at every optimization level, ORT_DISABLE_ALL included: the
    float16 graph rounds once, where the model it was exported from rounds twice. The budget holds
    either rounding, so the rows agree (the pairs table shows it against hf-qwen3); ORT_ENABLE_ALL
    also rewrites the exported x * (1 / sqrt(v)) as x / sqrt(v) (float32: another rounding of the
    same maths, within budget).

It runs in the torch worker (catalog.py): exporting needs torch and transformers, which that worker
has imported already for the HF and torch implementations, where the onnxruntime worker would pay
~8 s for them; onnxruntime's import (~1 s) is paid there instead.
"""
from __future__ import annotations

import io
import threading

import numpy as np

from normdiff.cases.model import CaseInputs
from normdiff.harness.data.contracts import Contract

FLOAT, FLOAT16, BFLOAT16 = 1, 10, 16  # onnx.TensorProto element types
_ELEMENT = {"float32": FLOAT, "float16": FLOAT16, "bfloat16": BFLOAT16}
IR_VERSION = 10  # onnxruntime 1.32 reads IR 10 (opset 23 needs >= 10)


class UnsupportedDtype(RuntimeError):
    """onnxruntime cannot load this graph in this dtype (no kernel): said once per key."""


def _dtype_name(array: np.ndarray) -> str:
    return "bfloat16" if array.dtype.name == "bfloat16" else array.dtype.name


# ---------------------------------------------------------------------------------------------
# The graphs


def _graph_model(op_type: str, operands: list[str], element: int, width: int, opset: int, **attributes):
    """One node `op_type`(operands) -> y over the last axis, x of shape (rows, width)."""
    from onnx import helper

    inputs = [helper.make_tensor_value_info("x", element, ["rows", width])]
    inputs += [helper.make_tensor_value_info(name, element, [width]) for name in operands[1:]]
    node = helper.make_node(op_type, operands, ["y"], axis=-1, **attributes)
    graph = helper.make_graph([node], op_type, inputs,
                              [helper.make_tensor_value_info("y", element, ["rows", width])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="normdiff")
    model.ir_version = IR_VERSION
    return model


def rms_normalization(width: int, eps: float, dtype: str):
    """ai.onnx RMSNormalization-23: stash_type 1 (float32 statistics), the scale an input."""
    import onnx

    model = _graph_model("RMSNormalization", ["x", "weight"], _ELEMENT[dtype], width, 23,
                         epsilon=float(eps), stash_type=1)
    onnx.checker.check_model(model, full_check=True)
    return model


def layer_normalization(width: int, eps: float, dtype: str):
    """ai.onnx LayerNormalization-17: stash_type 1 (float32 statistics), scale and bias inputs."""
    import onnx

    model = _graph_model("LayerNormalization", ["x", "weight", "bias"], _ELEMENT[dtype], width, 17,
                         epsilon=float(eps), stash_type=1)
    onnx.checker.check_model(model, full_check=True)
    return model


def simplified_layer_normalization(width: int, eps: float, dtype: str):
    """onnxruntime's SimplifiedLayerNormalization, registered in the default domain. It is not an
    ONNX op, so onnx.checker does not know it (not checked)."""
    return _graph_model("SimplifiedLayerNormalization", ["x", "weight"], _ELEMENT[dtype], width, 17,
                        epsilon=float(eps), stash_type=1)


def export_qwen3_rmsnorm(width: int, eps: float, dtype: str) -> bytes:
    """HF Qwen3RMSNorm(width, eps) in `dtype`, exported as it is by torch.onnx.export (the legacy
    exporter, opset 17, the row dimension dynamic). The exporter stores the layer's weight as an
    initializer named "weight"; it is turned into a graph input of that name (the nodes are left as
    the exporter wrote them), so one export serves every case's weight."""
    import warnings

    import onnx
    import torch
    from transformers.models.qwen3.modeling_qwen3 import Qwen3RMSNorm

    torch_dtype = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[dtype]
    norm = Qwen3RMSNorm(width, eps=eps).to(torch_dtype).eval()
    buffer = io.BytesIO()
    with warnings.catch_warnings():  # the legacy exporter's deprecation notice
        warnings.simplefilter("ignore")
        torch.onnx.export(norm, (torch.ones(2, width, dtype=torch_dtype),), buffer, input_names=["x"],
                          output_names=["y"], opset_version=17, dynamic_axes={"x": {0: "rows"}, "y": {0: "rows"}},
                          dynamo=False)
    model = onnx.load_from_string(buffer.getvalue())
    weights = [i for i in model.graph.initializer if i.name == "weight"]
    if len(weights) != 1 or list(weights[0].dims) != [width]:
        raise RuntimeError(f"the exported Qwen3RMSNorm has no ({width},) initializer 'weight': "
                           f"{[(i.name, list(i.dims)) for i in model.graph.initializer]}")
    model.graph.initializer.remove(weights[0])
    model.graph.input.append(onnx.helper.make_tensor_value_info("weight", _ELEMENT[dtype], [width]))
    onnx.checker.check_model(model)
    return model.SerializeToString()


# ---------------------------------------------------------------------------------------------
# The quantizing norms: the norm in float32, a scale per row or block, QuantizeLinear

QUANT_OPSET = 23  # RMSNormalization (23); QuantizeLinear's output_dtype and blocked scales (21)
_QUANT_ELEMENT = {"float8_e4m3fn": "FLOAT8E4M3FN", "float8_e4m3fnuz": "FLOAT8E4M3FNUZ",
                  "float8_e5m2": "FLOAT8E5M2"}  # onnx.TensorProto's names of the formats it writes

# the knobs of a quantizing contract this graph computes, each as it computes it (anything else is
# another contract: `quantizing_norm` refuses it rather than compute the wrong one)
QUANT_KNOBS = {"quant_input": "float32", "scale_rounding": "none", "scale_from": "y", "saturate": True,
               "quant_rounding": "nearest", "amax_bound": "floor", "zero_guard": True}
ADD_KNOBS = {"residual_dtype": "float32", "residual_rounding": "nearest", "residual_order": "before_norm"}


def quantize_linear(width: int, eps: float, dtype: str, contract: Contract, fused_add: bool):
    """x (and the residual) and the weight in `dtype`, cast to float32; h = x + residual in float32
    (also returned, cast back: residual_out); y = RMSNormalization(h, w) in float32, kept in float32;
    the scales (`_scale_nodes`); q = QuantizeLinear(y, scale) in the format, saturating, one scale
    per block (opset 21's block_size: a row is one block of its width). Returns q, the float32
    scales (rows, blocks) and residual_out."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    c, element = contract, _ELEMENT[dtype]
    group, fmt = c.quant_group or width, getattr(TensorProto, _QUANT_ELEMENT[c.quant_dtype])
    operands = ("x", "residual", "weight") if fused_add else ("x", "weight")
    nodes = [helper.make_node("Cast", [name], [name + "32"], to=FLOAT) for name in operands]
    outputs = [helper.make_tensor_value_info("q", fmt, ["rows", width]),
               helper.make_tensor_value_info("scale", FLOAT, ["rows", width // group])]
    if fused_add:
        nodes += [helper.make_node("Add", ["x32", "residual32"], ["h32"]),
                  helper.make_node("Cast", ["h32"], ["residual_out"], to=element)]
        outputs.append(helper.make_tensor_value_info("residual_out", element, ["rows", width]))
    nodes.append(helper.make_node("RMSNormalization", ["h32" if fused_add else "x32", "weight32"], ["y"], axis=-1,
                                  epsilon=float(eps), stash_type=1))
    scale_nodes, divisor, constants = _scale_nodes(c, group)
    nodes += scale_nodes + [helper.make_node("QuantizeLinear", ["y", divisor], ["q"], axis=1, block_size=group,
                                             output_dtype=fmt, saturate=1)]
    inputs = [helper.make_tensor_value_info(name, element, [width] if name == "weight" else ["rows", width])
              for name in operands]
    graph = helper.make_graph(nodes, "quantize_linear", inputs, outputs,
                              [numpy_helper.from_array(np.asarray(v), name) for name, v in constants.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", QUANT_OPSET)], producer_name="normdiff")
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model, full_check=True)
    return model


def _scale_nodes(c: Contract, group: int) -> tuple[list, str, dict]:
    """The nodes from y to its scales, "scale" (rows, blocks): amax = ReduceMax |y| over each block,
    Max with the contract's amax floor, / quant_max, Max with its scale floor (each where it has
    one); the name QuantizeLinear divides by; and the constants they read.

    A zero row's scale is 0 without a floor, and QuantizeLinear's y / 0 is NaN (0xff in E4M3FN, 0x80
    in E4M3FNUZ: measured). Such a contract (SGLang's) returns the 0 and quantizes with
    Where(scale == 0, 1, scale): its kernel guards the same division (`scale_inv = (scale == 0.f) ?
    0.f : 1.0f / scale`), and QuantizeLinear takes a scale, not its reciprocal; the row's y is 0, so
    its q is 0 either way."""
    from onnx import helper

    constants = {"blocks": np.array([0, -1, group], np.int64), "axes": np.array([-1], np.int64),
                 "quant_max": np.float32(c.quant_max)}
    nodes = [helper.make_node("Reshape", ["y", "blocks"], ["y_blocks"]),  # (rows, blocks, group)
             helper.make_node("Abs", ["y_blocks"], ["magnitude"]),
             helper.make_node("ReduceMax", ["magnitude", "axes"], ["amax"], keepdims=0)]
    amax = "amax"
    if c.amax_floor:
        constants["amax_floor"] = np.float32(c.amax_floor)
        nodes.append(helper.make_node("Max", ["amax", "amax_floor"], ["amax_floored"]))
        amax = "amax_floored"
    nodes.append(helper.make_node("Div", [amax, "quant_max"], ["raw_scale" if c.scale_floor else "scale"]))
    if c.scale_floor:
        constants["scale_floor"] = np.float32(c.scale_floor)
        nodes.append(helper.make_node("Max", ["raw_scale", "scale_floor"], ["scale"]))
    if c.amax_floor or c.scale_floor:
        return nodes, "scale", constants
    constants.update(zero=np.float32(0.0), one=np.float32(1.0))
    nodes += [helper.make_node("Equal", ["scale", "zero"], ["zero_scale"]),
              helper.make_node("Where", ["zero_scale", "one", "scale"], ["divisor"])]
    return nodes, "divisor", constants


def _quant_refusal(contract: Contract, fused_add: bool) -> str | None:
    """Why the graph does not compute this contract's quantizer (a knob it does not model), or None."""
    computed = {**QUANT_KNOBS, **(ADD_KNOBS if fused_add else {})}
    other = {knob: getattr(contract, knob) for knob, value in computed.items() if getattr(contract, knob) != value}
    if contract.quant_dtype not in _QUANT_ELEMENT:
        other["quant_dtype"] = contract.quant_dtype
    return f"the QuantizeLinear graph computes {computed} to {list(_QUANT_ELEMENT)}; this contract has {other}" \
        if other else None


# ---------------------------------------------------------------------------------------------
# Sessions, cached per key (kept as the error when onnxruntime refuses the graph)

_SESSIONS: dict[tuple, object] = {}
_EXPORTS: dict[tuple, bytes] = {}  # the exported model bytes, per (width, eps, dtype)
_LOCK = threading.Lock()


def _session_options(optimize: bool = True):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3  # errors only: no optimizer chatter in the worker's log
    # idle intra-op threads sleep instead of spinning on a core another worker computes on (the
    # thread count, and so how a kernel splits its work, is unchanged)
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if not optimize:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return options


def load(model, optimize: bool = True):
    """An InferenceSession on the CPU provider for a ModelProto or its bytes."""
    import onnxruntime as ort

    data = model if isinstance(model, bytes) else model.SerializeToString()
    return ort.InferenceSession(data, _session_options(optimize), providers=["CPUExecutionProvider"])


def session(kind: str, width: int, eps: float, dtype: str, optimize: bool = True, params: tuple = ()):
    """The kind's graph as a session; `params`: what else its builder takes (hashable: part of the key)."""
    key = (kind, width, float(eps), dtype, optimize, params)
    with _LOCK:
        if key not in _SESSIONS:
            try:
                _SESSIONS[key] = load(GRAPHS[kind](width, eps, dtype, *params), optimize)
            except Exception as exc:  # noqa: BLE001 - kept, so every case of this key says the same
                _SESSIONS[key] = _refusal(kind, dtype, exc)
        found = _SESSIONS[key]
    if isinstance(found, Exception):
        raise found
    return found


def _exported(width: int, eps: float, dtype: str) -> bytes:
    key = (width, float(eps), dtype)
    if key not in _EXPORTS:
        _EXPORTS[key] = export_qwen3_rmsnorm(width, eps, dtype)
    return _EXPORTS[key]


def _refusal(kind: str, dtype: str, exc: Exception) -> Exception:
    said = str(exc).splitlines()[0] if str(exc) else repr(exc)
    if "NOT_IMPLEMENTED" in said:
        import onnxruntime as ort

        return UnsupportedDtype(
            f"onnxruntime {ort.__version__} (CPU) cannot run {kind} in {dtype}: {said} (its CPU provider has no "
            f"{dtype} kernel for an op of the graph)")
    return RuntimeError(f"onnxruntime cannot load the {kind} graph for {dtype}: {said}")


GRAPHS = {"RMSNormalization": rms_normalization, "LayerNormalization": layer_normalization,
          "SimplifiedLayerNormalization": simplified_layer_normalization,
          "export-hf-qwen3": _exported, "QuantizeLinear": quantize_linear}


# ---------------------------------------------------------------------------------------------
# The adapters


def _check(op: str, contract: Contract, inputs: CaseInputs, operands: tuple[str, ...]) -> np.ndarray:
    x = inputs.arrays["x"]
    if x.ndim != 2:
        raise ValueError(f"these graphs take x of shape (rows, width); got {x.shape}")
    if contract.weight_offset:  # imported here: a row's detail names the line an error above is raised at
        from normdiff.text import general

        raise ValueError(f"the graph multiplies by w, not {general(contract.weight_offset)} + w")
    for name in operands:
        if inputs.arrays[name].shape != (x.shape[-1],):
            raise ValueError(f"the graph takes a {name} of the row's width ({x.shape[-1]},); this case's is "
                             f"{inputs.arrays[name].shape}")
    return x


def _run(kind: str, op: str, contract: Contract, inputs: CaseInputs, operands: tuple[str, ...]) -> np.ndarray:
    from normdiff.implementations.frameworks.onnxruntime import run_graph

    x = _check(op, contract, inputs, operands)
    graph = session(kind, x.shape[-1], contract.eps, _dtype_name(x))
    return run_graph(graph, {"x": x, **{name: inputs.arrays[name] for name in operands}})


def rms_norm(op: str, contract: Contract, inputs: CaseInputs) -> np.ndarray:
    return _run("RMSNormalization", op, contract, inputs, ("weight",))


def layer_norm(op: str, contract: Contract, inputs: CaseInputs) -> np.ndarray:
    return _run("LayerNormalization", op, contract, inputs, ("weight", "bias"))


def simplified_layer_norm(op: str, contract: Contract, inputs: CaseInputs) -> np.ndarray:
    return _run("SimplifiedLayerNormalization", op, contract, inputs, ("weight",))


def exported_qwen3(op: str, contract: Contract, inputs: CaseInputs) -> np.ndarray:
    return _run("export-hf-qwen3", op, contract, inputs, ("weight",))


def quantizing_norm(op: str, contract: Contract, inputs: CaseInputs) -> tuple:
    """rms_norm_quant's (q, scale), or add_rms_norm_quant's (q, scale, residual_out), from the
    QuantizeLinear graph (`quantize_linear`)."""
    from normdiff.implementations.frameworks.onnxruntime import run_graph_outputs

    x = _check(op, contract, inputs, ("weight",))
    fused_add = "residual" in inputs.arrays
    refusal = _quant_refusal(contract, fused_add)
    if refusal:
        raise ValueError(refusal)
    graph = session("QuantizeLinear", x.shape[-1], contract.eps, _dtype_name(x), params=(contract, fused_add))
    feeds = {name: inputs.arrays[name] for name in ("x", "residual", "weight") if name in inputs.arrays}
    return tuple(run_graph_outputs(graph, feeds))
