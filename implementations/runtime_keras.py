"""keras 3's normalization op and layers on its JAX backend, called as a user calls them on the
case's tensors (eager: keras runs each op as JAX dispatches it, nothing is jitted here).

  keras.ops.rms_normalization(x, scale, axis, epsilon)
        x is lifted to float32 (`result_type(x.dtype, "float32")`), the scale cast to it, then
        x * rsqrt(mean(x^2) + eps) * scale in float32 and ONE rounding back to x's dtype: plain
        gamma, one rounding (olmo2's order, also torch's). `epsilon=None` means
        `keras.config.epsilon()` (1e-7): the contract's eps is always passed.
  keras.layers.RMSNormalization(axis, epsilon)       (epsilon defaults to 1e-6)
        calls the op above with its `scale` variable. Under the default dtype policy ("float32")
        the layer casts a bf16 / fp16 input to float32 before its call and RETURNS FLOAT32: the
        catalogue's `output-dtype-promoted` behaviour. It is returned as keras returns it; the
        harness measures its error in ULPs of the case dtype and records `output_dtype` float32,
        so the promotion shows in every report instead of being hidden by a cast here (flax's
        `flax-rmsnorm` is treated the same way).
  keras.layers.LayerNormalization(axis, epsilon)     (epsilon defaults to 1e-3: passed explicitly)
        mean and (two-pass, biased: jnp.var) variance in float32, then
        x * (rsqrt(var + eps) * gamma) + (beta - mean * rsqrt(var + eps) * gamma): F.layer_norm's
        maths, the centring folded into the bias term (x * inv and mean * inv each rounded in
        float32 before they cancel: on rows at mean 1000 that costs about |mean| / std float32 ulps,
        inside the centring part of the budget). Float32 output under the default policy, as above.
        (`rms_scaling=True` is deprecated and uses the variance, not the mean square: not run.)

Declared for: the op and RMSNormalization on rms_norm@olmo2, rms_norm@torch and qk_norm@olmo2 (the
full H*D vector with an (H*D,) weight); LayerNormalization on layer_norm@torch. Not for the Llama
cast (llama, qwen3: they round before the weight multiply) nor 1 + w, for builtins.py's reasons.

The layers' weights are float32 variables under the default policy: the case's weight and bias
are assigned into them exactly (every bf16 / fp16 value is a float32). The op gets the case's
weight as it is (keras casts it to float32). Layers are cached per (kind, width, eps); rows are
padded to a power of two with zero rows (harmless: rows are independent and eps keeps them
finite; sliced off) so that batches of different sizes share JAX's compiled kernels.

Only ever imported inside the keras worker.
"""
from __future__ import annotations

import os

os.environ.setdefault("KERAS_BACKEND", "jax")  # the worker's setup sets it too (frameworks/keras.py)

import keras  # noqa: E402
import numpy as np  # noqa: E402

from normdiff.cases.model import CaseInputs  # noqa: E402
from normdiff.harness.data.contracts import Contract  # noqa: E402


def _padded_rows(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def _operands(inputs: CaseInputs, *names: str) -> list[np.ndarray]:
    missing = [n for n in names if n not in inputs.arrays]
    if missing:
        raise ValueError(f"this built-in takes {', '.join(missing)}; the op gives only {', '.join(inputs.arrays)}")
    x = np.asarray(inputs.arrays["x"])
    out = []
    for name in names:
        v = np.asarray(inputs.arrays[name])
        if name != "x" and v.shape[-1] != x.shape[-1]:  # a shorter per-case operand, tiled across the row
            v = np.tile(v, x.shape[-1] // v.shape[-1])
        out.append(v)
    return out


def _padded(x: np.ndarray) -> np.ndarray:
    return np.pad(x, ((0, _padded_rows(x.shape[0]) - x.shape[0]), (0, 0)))


def _result(y, rows: int) -> np.ndarray:
    return np.array(keras.ops.convert_to_numpy(y))[:rows]


def ops_rms_normalization(op: str, contract: Contract, inputs: CaseInputs) -> np.ndarray:
    x, weight = _operands(inputs, "x", "weight")
    y = keras.ops.rms_normalization(keras.ops.convert_to_tensor(_padded(x)), scale=keras.ops.convert_to_tensor(weight),
                                    axis=-1, epsilon=contract.eps)
    return _result(y, x.shape[0])


_LAYERS: dict[tuple, keras.layers.Layer] = {}


def _layer(kind, width: int, eps: float):
    key = (kind, width, eps)
    if key not in _LAYERS:
        layer = kind(axis=-1, epsilon=eps)  # the default dtype policy: float32 variables and compute
        layer.build((None, width))
        _LAYERS[key] = layer
    return _LAYERS[key]


def _assign(variable, value: np.ndarray) -> None:
    variable.assign(value.astype(variable.dtype))  # exact: bf16 / fp16 values are float32 values


def layer_rms_normalization(op: str, contract: Contract, inputs: CaseInputs) -> np.ndarray:
    x, weight = _operands(inputs, "x", "weight")
    layer = _layer(keras.layers.RMSNormalization, x.shape[-1], contract.eps)
    _assign(layer.scale, weight)
    return _result(layer(keras.ops.convert_to_tensor(_padded(x))), x.shape[0])


def layer_layer_normalization(op: str, contract: Contract, inputs: CaseInputs) -> np.ndarray:
    x, weight, bias = _operands(inputs, "x", "weight", "bias")
    layer = _layer(keras.layers.LayerNormalization, x.shape[-1], contract.eps)
    _assign(layer.gamma, weight)
    _assign(layer.beta, bias)
    return _result(layer(keras.ops.convert_to_tensor(_padded(x))), x.shape[0])
