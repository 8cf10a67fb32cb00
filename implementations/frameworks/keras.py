"""keras 3, on the backend configured (KERAS_BACKEND; JAX when none is set, since keras' own
default, TensorFlow, is not one of normdiff's). Its tensors are the backend's, converted with
keras.ops.convert_to_numpy (bf16 stays bf16 on JAX)."""
from __future__ import annotations

import os

import numpy as np

from normdiff.implementations.frameworks import jax as jax_framework
from normdiff.implementations.frameworks.record import Framework


def setup() -> None:
    os.environ.setdefault("KERAS_BACKEND", "jax")
    if os.environ["KERAS_BACKEND"] == "jax":  # its ops are JAX's: the same compilation cache
        jax_framework.setup()


def to_numpy(value) -> np.ndarray:
    import keras

    return np.asarray(keras.ops.convert_to_numpy(value))


def from_numpy(array: np.ndarray):
    import keras

    return keras.ops.convert_to_tensor(array)


def build(layer, x: np.ndarray) -> None:
    """A keras layer makes its weights when built for an input shape."""
    if hasattr(layer, "build") and not getattr(layer, "built", True):
        layer.build(tuple(x.shape))


def weights(layer) -> dict:
    return {getattr(v, "name", str(i)): tuple(v.shape) for i, v in enumerate(getattr(layer, "weights", []))}


def set_weight(layer, name: str, weight: np.ndarray) -> None:
    """Assign into the layer's variable (it keeps its own dtype: float32 under the default policy,
    which holds every bf16 and fp16 value exactly)."""
    variable = next(v for v in layer.weights if getattr(v, "name", None) == name)
    variable.assign(np.asarray(weight, dtype=np.float32) if variable.dtype == "float32" else weight)


FRAMEWORK = Framework("keras", modules=("keras",), extra="keras", distributions=("keras",), user_code=True,
                      detect=("keras",), array_types=("keras",), to_numpy=to_numpy, from_numpy=from_numpy,
                      setup=setup, module_types=("keras",), build=build, weights=weights, set_weight=set_weight)
