"""The adapters that call a user's code (in-process here; a check runs them inside a worker):
functions through templates, classes built and given their gain, graphs fed by input name."""
from __future__ import annotations

import sys
import textwrap

import numpy as np
import pytest

from normdiff.cases.model import Case
from normdiff.implementations.user import make_adapter

CASE = Case.of("rms_norm", "qwen3", "float32", "4x64", weight="trained")
HEADS = Case.of("qk_norm", "qwen3", "bfloat16", "4x2x32", weight="trained")


def _module(tmp_path, source: str) -> str:
    path = tmp_path / "mod.py"
    path.write_text(textwrap.dedent(source))
    return str(path)


def _run(adapter, case=CASE):
    return np.asarray(adapter(case.op, case.contract, case.inputs()))


def _expected(case=CASE):
    from normdiff.harness.engine import oracle

    inputs = case.inputs()
    return oracle.evaluate(case.contract, inputs.arrays, inputs.num_heads)


def test_a_function_is_called_through_its_template(tmp_path):
    path = _module(tmp_path, """
        import numpy as np

        def norm(inputs, *, gain, epsilon, axis):
            assert axis == -1
            xf = inputs.astype(np.float32)
            return (xf / np.sqrt((xf * xf).mean(axis, keepdims=True) + epsilon) * gain).astype(inputs.dtype)
        """)
    adapter = make_adapter(f"{path}:norm", "numpy", "rms_norm", call="f(x, gain=weight, epsilon=eps, axis=-1)")
    assert np.allclose(_run(adapter), _expected(), rtol=1e-5)


@pytest.mark.parametrize("source, weight_attr, says", [
    ("self.weight = np.ones(dim, np.float32); self.bias = np.zeros(dim, np.float32)", "", None),  # the weight-named one
    ("self.gain = np.ones(dim, np.float32)", "", None),  # the one of the weight's shape
    ("self.a = np.ones(dim, np.float32); self.b = np.ones(dim, np.float32)", "",
     "found a, b among a (64,), b (64,); name it with --weight-attr"),
    ("self.a = np.ones(dim, np.float32); self.b = np.ones(dim, np.float32)", "b", None),
    ("self.table = np.ones((2, dim), np.float32)", "", "found none among table (2, 64)"),
    ("self.gain = np.ones(dim, np.float32)", "scale", "has no parameter 'scale'; its parameters: gain (64,)"),
])
def test_a_class_gain_is_the_one_parameter_of_the_weights_shape(tmp_path, source, weight_attr, says):
    path = _module(tmp_path, f"""
        import numpy as np

        class Norm:
            def __init__(self, hidden_size, variance_epsilon=1e-6):
                dim = hidden_size
                {source}
                self.eps = variance_epsilon

            def __call__(self, x):
                w = next(v for k, v in vars(self).items() if k in ("weight", "gain", "b"))
                xf = x.astype(np.float32)
                return (xf / np.sqrt((xf * xf).mean(-1, keepdims=True) + self.eps) * w).astype(x.dtype)
        """)
    adapter = make_adapter(f"{path}:Norm", "numpy", "rms_norm", weight_attr=weight_attr)
    if says:
        with pytest.raises(TypeError, match=says.replace("(", r"\(").replace(")", r"\)")):
            _run(adapter)
    else:  # it got the case's eps through `variance_epsilon` and the case's weight
        assert np.allclose(_run(adapter), _expected(), rtol=1e-5)


def test_a_class_over_heads_sees_each_head(tmp_path):
    path = _module(tmp_path, """
        import numpy as np

        class Norm:
            def __init__(self, dim, eps):
                self.dim, self.eps, self.weight = dim, eps, np.ones(dim, np.float32)

            def __call__(self, x):
                assert x.shape[-1] == self.dim and x.shape[-2] == 2  # (..., heads, head_dim)
                xf = x.astype(np.float32)
                y = (xf / np.sqrt((xf * xf).mean(-1, keepdims=True) + self.eps)).astype(x.dtype)
                return y * self.weight
        """)
    out = _run(make_adapter(f"{path}:Norm", "numpy", "qk_norm"), HEADS)
    assert out.shape == HEADS.inputs().arrays["x"].shape


def test_a_class_nobody_can_build_asks_for_init_and_init_builds_it(tmp_path):
    path = _module(tmp_path, """
        import numpy as np

        class Norm:
            def __init__(self, layer_idx, dim=None, eps=None):
                assert layer_idx is None and dim == 64
                self.eps, self.weight = eps, np.ones(dim, np.float32)

            def __call__(self, x):
                xf = x.astype(np.float32)
                return (xf / np.sqrt((xf * xf).mean(-1, keepdims=True) + self.eps) * self.weight).astype(x.dtype)
        """)
    with pytest.raises(TypeError, match="Norm needs layer_idx, which normdiff cannot tell what to give: say how to "
                                        "build it with --init"):
        make_adapter(f"{path}:Norm", "numpy", "rms_norm")
    adapter = make_adapter(f"{path}:Norm", "numpy", "rms_norm", init="Cls(None, dim=dim, eps=eps)")
    assert np.allclose(_run(adapter), _expected(), rtol=1e-5)


def test_a_class_built_from_a_config_reads_the_usual_names(tmp_path):
    """HF-style `__init__(self, config)`: a config carrying hidden_size, rms_norm_eps, ... (the span
    and the case's eps); one reading a name no config of normdiff's has is told to write --init."""
    path = _module(tmp_path, """
        import numpy as np

        class Norm:
            def __init__(self, config):
                self.eps, self.weight = config.rms_norm_eps, np.ones(config.hidden_size, np.float32)

            def __call__(self, x):
                xf = x.astype(np.float32)
                return (xf / np.sqrt((xf * xf).mean(-1, keepdims=True) + self.eps) * self.weight).astype(x.dtype)

        class Odd(Norm):
            def __init__(self, config):
                super().__init__(config)
                self.extra = config.vocab_size
        """)
    adapter = make_adapter(f"{path}:Norm", "numpy", "rms_norm")
    assert {"dim", "eps"} <= adapter.takes  # a config carries both: the check runs every eps
    assert np.allclose(_run(adapter), _expected(), rtol=1e-5)
    with pytest.raises(TypeError, match=r"Odd cannot be built as Cls\(config=config\): the config normdiff gives "
                                        r"carries hidden_size.*vocab_size.*--init"):
        _run(make_adapter(f"{path}:Odd", "numpy", "rms_norm"))


def _onnx_graph():
    onnx = pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    sys.path.insert(0, "tests/fixtures/user")
    try:
        import onnx_norms
    finally:
        sys.path.remove("tests/fixtures/user")
    return onnx, onnx_norms


def test_a_factory_may_return_a_session_and_is_built_once_per_dtype_and_eps(tmp_path):
    _onnx_graph()
    path = _module(tmp_path, """
        import sys
        import onnxruntime as ort
        sys.path.insert(0, "tests/fixtures/user")
        import onnx_norms

        BUILT = []

        def make(dtype_name, eps):
            BUILT.append((dtype_name, eps))
            model = onnx_norms.rms_norm_weight_in_float(dtype_name, eps)
            return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        """)
    adapter = make_adapter(f"{path}:make", "onnxruntime", "rms_norm")
    assert np.allclose(_run(adapter), _expected(), rtol=1e-5)
    _run(adapter)
    assert sys.modules["normdiff_user_mod"].BUILT == [("float32", CASE.contract.eps)]


def test_a_graph_input_normdiff_cannot_feed_is_named(tmp_path):
    onnx, _ = _onnx_graph()
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Mul", ["x", "mask"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["r", "c"]),
                               helper.make_tensor_value_info("mask", TensorProto.FLOAT, ["r", "c"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["r", "c"])])
    path = tmp_path / "masked.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    adapter = make_adapter(str(path), "onnxruntime", "rms_norm")
    with pytest.raises(TypeError, match="graph input 'mask' is none of what normdiff feeds"):
        _run(adapter)
