"""onnxruntime, CPU provider: a user's ONNX graph (an .onnx file, or a function that returns an
InferenceSession or a ModelProto) runs on the case's arrays fed by input name. NumPy has no bf16 in
onnxruntime's Python API, so bf16 crosses as raw 16-bit words through io_binding
(OrtValue.ortvalue_from_numpy_with_onnx_type); bf16 and float8 outputs come back by their bits as
ml_dtypes' arrays (a QuantizeLinear's q). onnxruntime 1.32's CPU provider has no bf16 Mul
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
    return run_graph_outputs(session, feeds, first_only=True)[0]


def run_graph_outputs(session, feeds: dict, first_only: bool = False) -> list[np.ndarray]:
    """Run with every input bound as an OrtValue (bf16 as its raw bits); every output back (or the
    first), as NumPy (`as_numpy`)."""
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
    for output in (session.get_outputs()[:1] if first_only else session.get_outputs()):
        binding.bind_output(output.name)
    session.run_with_iobinding(binding)
    return [as_numpy(value) for value in binding.get_outputs()]


# the element types onnxruntime's .numpy() has no NumPy dtype for, read by their bits as ml_dtypes'
# (measured on 1.32: bf16, float8e4m3fnuz and float8e5m2 raise "No corresponding Numpy type";
# float8e4m3fn comes back as its uint8 bits, viewed here as the format it is)
_BY_BITS = {"tensor(bfloat16)": "bfloat16", "tensor(float8e4m3fn)": "float8_e4m3fn",
            "tensor(float8e4m3fnuz)": "float8_e4m3fnuz", "tensor(float8e5m2)": "float8_e5m2",
            "tensor(float8e5m2fnuz)": "float8_e5m2fnuz"}


def as_numpy(value) -> np.ndarray:
    """A CPU OrtValue as NumPy: bf16 and the float8 types as ml_dtypes' arrays of the same bits."""
    import ml_dtypes

    name = _BY_BITS.get(value.data_type())
    if name is None:
        return np.asarray(value.numpy())
    return _raw(value, np.dtype(getattr(ml_dtypes, name)))


def _raw(value, dtype: np.dtype) -> np.ndarray:
    """A CPU OrtValue's elements, copied out by address as `dtype` (its shape kept)."""
    import ctypes

    shape = tuple(value.shape())
    size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if not size:
        return np.zeros(shape, dtype)
    buffer = (ctypes.c_uint8 * size).from_address(value.data_ptr())
    return np.frombuffer(buffer, np.uint8).copy().view(dtype).reshape(shape)


FRAMEWORK = Framework("onnxruntime", modules=("onnxruntime",), extra="onnx", distributions=("onnxruntime", "onnx"),
                      user_code=True, detect=("onnxruntime", "onnx"), array_types=("onnxruntime",),
                      graph_files=(".onnx",), load_graph=load_graph, graph_inputs=graph_inputs, run_graph=run_graph)
