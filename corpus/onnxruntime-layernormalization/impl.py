"""ONNX's LayerNormalization operator (opset 17) run by onnxruntime's CPU kernel (onnxruntime 1.32.0):
a graph of the one node, written with onnx.helper as an exporter writes it (torch.onnx.export of an
nn.LayerNorm emits this node since opset 17). x, weight (Scale) and bias (B) in the case dtype,
axis=-1, the case's epsilon, stash_type=1 (the statistics in float32). normdiff calls the builder once
per dtype and eps."""
import onnx
from onnx import TensorProto, helper

_TYPES = {"float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16, "bfloat16": TensorProto.BFLOAT16}


def layer_norm(dtype_name, eps):
    t = _TYPES[dtype_name]
    node = helper.make_node("LayerNormalization", ["x", "weight", "bias"], ["y"], axis=-1, epsilon=eps,
                            stash_type=1)
    graph = helper.make_graph(
        [node], "layer_norm",
        [helper.make_tensor_value_info("x", t, ["rows", "width"]),
         helper.make_tensor_value_info("weight", t, ["width"]),
         helper.make_tensor_value_info("bias", t, ["width"])],
        [helper.make_tensor_value_info("y", t, ["rows", "width"])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model
