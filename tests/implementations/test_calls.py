"""Call templates and the default binding of an op's inputs to a function's parameters, on the
signatures of real library functions (copied here as stubs, so no framework is imported)."""
from __future__ import annotations

import pytest

from normdiff.harness.data.errors import UsageError
from normdiff.harness.data.ops import OPS
from normdiff.implementations import calls

RMS, GATED, QK = OPS["rms_norm"], OPS["gated_rms_norm"], OPS["qk_norm"]
VALUES = {"x": "X", "weight": "W", "gate": "G", "eps": 1e-6, "num_heads": 4, "dim": 64}


def test_a_template_binds_names_constants_and_keywords():
    t = calls.parse("f(x, scale=weight, axis=-1, epsilon=eps, bias=None, shape=(1, 2), name='n')", calls.names_for(RMS))
    args, kwargs = t.bind(VALUES)
    assert args == ["X"] and kwargs == {"scale": "W", "axis": -1, "epsilon": 1e-6, "bias": None, "shape": (1, 2),
                                        "name": "n"}


@pytest.mark.parametrize("text, says", [
    ("f(x, weight, eps", "not a call expression"),
    ("x + 1", "must be a call like"),
    ("f.g(x)", "must be a call like"),
    ("f(x, os.system('rm -rf /'))", "is neither a name normdiff provides nor a constant"),
    ("f(x, __import__('os'))", "is neither a name normdiff provides nor a constant"),
    ("f(x, weight * 2)", "is neither a name normdiff provides nor a constant"),
    ("f(*x)", "*args and **kwargs are not allowed"),
    ("f(x, **kw)", "*args and **kwargs are not allowed"),
    ("f(x, wieght, eps)", "unknown name 'wieght'"),
])
def test_a_template_is_parsed_never_evaluated(text, says):
    with pytest.raises(UsageError, match=says.replace("*", r"\*").replace("(", r"\(")):
        calls.parse(text, calls.names_for(RMS))


def test_extra_names_are_offered_and_gate_only_where_the_op_has_one():
    assert {"dim", "width", "head_dim", "dtype", "dtype_name"} <= calls.names_for(RMS)
    assert "gate" in calls.names_for(GATED) and "gate" not in calls.names_for(RMS)
    assert "num_heads" in calls.names_for(QK)


# real signatures, as stubs
def keras_rms_normalization(x, scale=None, axis=-1, epsilon=None): ...  # keras/src/ops/nn.py
def mamba_rms_norm_ref(x, weight, bias, z=None, eps=1e-6, group_size=None, norm_before_gate=True,  # noqa: E302
                       upcast=True): ...  # mamba_ssm/ops/triton/layernorm_gated.py
def hf_style(hidden_states, weight, variance_epsilon): ...  # noqa: E302
def swapped(x, eps, weight): ...  # noqa: E302
def neutral(a_, b_, c_): ...  # noqa: E302
def two_args(x, eps): ...  # noqa: E302
def liger_like(X, W, eps, offset=0.0, casting_mode="llama"): ...  # noqa: E302  (liger_kernel rms_norm_forward)


def _call(fn, record=RMS, values=VALUES):
    return calls.default_call(fn, record, fn.__name__).bind(values)


def test_keras_ops_gets_its_inputs_by_name_not_eps_as_axis():
    args, kwargs = _call(keras_rms_normalization)
    assert args == [] and kwargs == {"x": "X", "scale": "W", "epsilon": 1e-6}


def test_positional_when_the_names_agree_or_say_nothing():
    assert _call(hf_style) == (["X", "W", 1e-6], {})
    assert _call(neutral) == (["X", "W", 1e-6], {})
    assert _call(liger_like) == (["X", "W", 1e-6], {})


def test_by_name_when_positions_would_swap_two_inputs():
    assert _call(swapped) == ([], {"x": "X", "eps": 1e-6, "weight": "W"})


def test_a_required_parameter_nobody_knows_asks_for_call_with_a_suggestion():
    # mamba's rms_norm_ref would get eps as `bias` by position
    with pytest.raises(TypeError, match=r"mamba_rms_norm_ref\(x, weight, bias, .*\) has the wrong signature for rms_norm: "
                                        r"normdiff calls rms_norm\(x, weight, eps\); say how to call it with --call "
                                        r"'f\(x=x, weight=weight, bias=None, eps=eps\)'"):
        _call(mamba_rms_norm_ref)
    # the gated op binds its gate to mamba's z
    with pytest.raises(TypeError, match=r"'f\(x=x, weight=weight, bias=None, z=gate, eps=eps\)'"):
        _call(mamba_rms_norm_ref, GATED)


def test_too_few_parameters_say_the_signature_normdiff_calls():
    with pytest.raises(TypeError, match=r"two_args\(x, eps\) has the wrong signature for rms_norm: normdiff calls "
                                        r"rms_norm\(x, weight, eps\)"):
        _call(two_args)


def test_a_compiled_function_is_read_from_its_docstring():
    class NbFunc:  # what nanobind gives MLX's functions: no signature, a docstring that has one
        __name__ = "rms_norm"
        __doc__ = "rms_norm(x: array, weight: array | None, eps: float, *, stream: StreamOrDevice = None) -> array\n\nRMS."
        __signature__ = None

        def __call__(self, *args, **kwargs): ...

    params = calls._doc_parameters(NbFunc())
    assert [p.name for p in params] == ["x", "weight", "eps", "stream"]
    assert params[-1].kind == params[-1].KEYWORD_ONLY and params[-1].default is None


class KerasLayer:  # keras.layers.RMSNormalization's constructor
    def __init__(self, axis=-1, epsilon=1e-6, **kwargs): ...


class NnxLike:  # flax nnx: a metaclass hides the constructor behind (*args, **kwargs)
    class __metaclass__(type): ...

    def __init__(self, num_features, *, epsilon=1e-6, dtype=None, rngs): ...


class NeedsConfig:
    def __init__(self, config, layer_idx): ...


class HaikuLike:  # haiku's LayerNorm: a required axis and required switches for its params
    def __init__(self, axis, create_scale, create_offset, eps=1e-5, name=None): ...


def test_constructors_receive_the_span_and_eps_under_their_own_names():
    assert calls.default_init(KerasLayer, "KerasLayer").bind(VALUES) == ([], {"epsilon": 1e-6})
    assert calls.default_init(NnxLike, "NnxLike", provided=("rngs",)).bind(VALUES) == (
        [], {"num_features": 64, "epsilon": 1e-6})
    with pytest.raises(TypeError, match="NeedsConfig needs layer_idx.*--init"):  # a config it gets: see test_user
        calls.default_init(NeedsConfig, "NeedsConfig")


def test_a_required_axis_and_switches_are_what_the_op_decides():
    """The axis normalised is x's last; a switch that creates a param is on when the op has that
    operand (layer_norm: weight and bias; rms_norm: the weight only)."""
    template = calls.default_init(HaikuLike, "HaikuLike", operands=("x", "weight", "bias"))
    assert template.bind(VALUES) == ([], {"axis": -1, "create_scale": True, "create_offset": True, "eps": 1e-6})
    template = calls.default_init(HaikuLike, "HaikuLike", operands=("x", "weight"))
    assert template.bind(VALUES)[1]["create_offset"] is False


def test_a_template_builds_tuples_from_names():
    """normalized_shape=(dim,): a tuple of provided names (and constants) is resolved per case."""
    from normdiff.implementations import calls

    template = calls.parse("f(x, (dim,), weight, bias, eps=eps)", {"x", "dim", "weight", "bias", "eps"})
    args, kwargs = template.bind({"x": 1, "dim": 64, "weight": 2, "bias": 3, "eps": 1e-5})
    assert args == [1, (64,), 2, 3] and kwargs == {"eps": 1e-5}
    assert template.names() == {"x", "dim", "weight", "bias", "eps"}


def test_a_required_shape_parameter_gets_the_span():
    """Without --call, F.layer_norm's signature binds by name, normalized_shape given (dim,)."""
    from normdiff.harness.data.ops import get_op
    from normdiff.implementations import calls

    def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
        return input

    template = calls.default_call(layer_norm, get_op("layer_norm"), "layer_norm")
    args, kwargs = template.bind({"x": "X", "dim": 64, "weight": "W", "bias": "B", "eps": 1e-5})
    assert kwargs == {"input": "X", "normalized_shape": (64,), "weight": "W", "bias": "B", "eps": 1e-5}


def rms_norm_static_fp8_quant(input, weight, scale, epsilon):  # vLLM's (its out= dropped)
    pass


def fp4_by_keyword(x, *, global_scale, gamma, eps):
    pass


def test_scale_is_the_tensor_scale_where_the_op_takes_one_and_the_weight_elsewhere():
    """vLLM and FlashInfer call a static quantizer's per-tensor scale `scale`; haiku and keras call
    the weight so: the op's own call decides."""
    static = OPS["rms_norm_quant_static"]
    values = {**VALUES, "tensor_scale": "S"}
    assert _call(rms_norm_static_fp8_quant, static, values) == (["X", "W", "S", 1e-6], {})
    assert _call(fp4_by_keyword, static, values) == ([], {"x": "X", "global_scale": "S", "gamma": "W", "eps": 1e-6})
    assert _call(keras_rms_normalization)[1]["scale"] == "W"  # rms_norm: still the weight
