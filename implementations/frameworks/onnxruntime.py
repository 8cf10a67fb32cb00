"""onnxruntime, CPU provider: a user's ONNX graph (an .onnx file, or a function that returns an
InferenceSession or a ModelProto) runs on the case's arrays fed by input name. NumPy has no bf16 in
onnxruntime's Python API, so bf16 crosses as raw 16-bit words through io_binding
(OrtValue.ortvalue_from_numpy_with_onnx_type). onnxruntime 1.32's CPU provider has no bf16 Mul
kernel, so a bf16 graph fails to load: its cases cannot run, and check says `partial` with that
reason rather than `disagrees`."""
from __future__ import annotations

import numpy as np

from normdiff.implementations.frameworks.record import Framework

BFLOAT16 = 16  # onnx.TensorProto.BFLOAT16


def load_graph(obj):
    """An InferenceSession from a path to an .onnx file, a ModelProto or a session itself."""
    import onnxruntime as ort

    if isinstance(obj, ort.InferenceSession):
        return obj
    if isinstance(obj, (str, bytes)) or hasattr(obj, "SerializeToString"):
        model = obj.SerializeToString() if hasattr(obj, "SerializeToString") else obj
        return ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    return None


def graph_inputs(session) -> dict:
    """input name -> the NumPy dtype it takes (None for a type normdiff does not feed)."""
    import ml_dtypes

    types = {"tensor(float)": np.float32, "tensor(double)": np.float64, "tensor(float16)": np.float16,
             "tensor(bfloat16)": ml_dtypes.bfloat16, "tensor(int64)": np.int64, "tensor(int32)": np.int32}
    return {i.name: types.get(i.type) for i in session.get_inputs()}


def run_graph(session, feeds: dict) -> np.ndarray:
    """Run with every input bound as an OrtValue (bf16 as its raw bits), the first output back."""
    import ml_dtypes
    import onnxruntime as ort

    binding = session.io_binding()
    for name, array in feeds.items():
        array = np.ascontiguousarray(array)
        if array.dtype == ml_dtypes.bfloat16:
            value = ort.OrtValue.ortvalue_from_numpy_with_onnx_type(array.view(np.uint16), BFLOAT16)
        else:
            value = ort.OrtValue.ortvalue_from_numpy(array)
        binding.bind_ortvalue_input(name, value)
    output = session.get_outputs()[0].name
    binding.bind_output(output)
    session.run_with_iobinding(binding)
    result = binding.get_outputs()[0]
    if result.data_type() == "tensor(bfloat16)":  # .numpy() has no bf16: copy the raw words out
        return _raw_words(result).view(ml_dtypes.bfloat16)
    return np.asarray(result.numpy())


def _raw_words(value) -> np.ndarray:
    """A CPU OrtValue's 16-bit elements, copied out by address (its shape kept)."""
    import ctypes

    shape = tuple(value.shape())
    count = int(np.prod(shape, dtype=np.int64))
    buffer = (ctypes.c_uint16 * count).from_address(value.data_ptr()) if count else []
    return np.array(buffer, dtype=np.uint16).reshape(shape)


FRAMEWORK = Framework("onnxruntime", modules=("onnxruntime",), extra="onnx", distributions=("onnxruntime", "onnx"),
                      user_code=True, detect=("onnxruntime", "onnx"), array_types=("onnxruntime",),
                      graph_files=(".onnx",), load_graph=load_graph, graph_inputs=graph_inputs, run_graph=run_graph)
