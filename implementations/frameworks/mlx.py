"""MLX, on the CPU (`pip install 'mlx[cpu]'` on Linux: plain mlx lacks libmlx.so there). bf16 arrays
do not cross the buffer protocol: they go through float32, which holds every bf16 value exactly."""
from __future__ import annotations

import numpy as np

from normdiff.implementations.frameworks.record import Framework


def _mx():
    import mlx.core as mx

    mx.set_default_device(mx.cpu)
    return mx


def to_numpy(value) -> np.ndarray:
    import ml_dtypes

    mx = _mx()
    if value.dtype == mx.bfloat16:
        return np.array(value.astype(mx.float32)).astype(ml_dtypes.bfloat16)
    return np.array(value)


def from_numpy(array: np.ndarray):
    import ml_dtypes

    mx = _mx()
    if array.dtype == ml_dtypes.bfloat16:
        return mx.array(array.astype(np.float32)).astype(mx.bfloat16)
    return mx.array(array)


def prepare_module(module, x: np.ndarray):
    """An mlx.nn module with its parameters in x's dtype, as a model loaded in that dtype."""
    if hasattr(module, "set_dtype"):
        module.set_dtype(from_numpy(x[:0]).dtype)
    return module


def weights(module) -> dict:
    from mlx.utils import tree_flatten

    return {name: tuple(v.shape) for name, v in tree_flatten(module.parameters())}


def set_weight(module, name: str, weight: np.ndarray) -> None:
    from mlx.utils import tree_unflatten

    module.update(tree_unflatten([(name, from_numpy(weight))]))


FRAMEWORK = Framework("mlx", modules=("mlx",), extra="mlx", distributions=("mlx",), user_code=True,
                      detect=("mlx",), array_types=("mlx",), to_numpy=to_numpy, from_numpy=from_numpy,
                      module_types=("mlx.nn",), prepare_module=prepare_module, weights=weights,
                      set_weight=set_weight)
