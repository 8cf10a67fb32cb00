"""PyTorch: tensors cross through exact bits (torch cannot read ml_dtypes' bfloat16 itself, and
NumPy has no native bf16: through float32, which holds every bf16 value exactly). HuggingFace
transformers runs on it, in the same worker (a second torch import cost more than it overlapped on
two cores: measured 8.2-9.2 s for the default run in a separate worker, 7.7 s sharing)."""
from __future__ import annotations

import numpy as np

from normdiff.implementations.frameworks.record import Framework


def to_numpy(value) -> np.ndarray:
    import ml_dtypes
    import torch

    value = value.detach().cpu()
    if value.dtype == torch.bfloat16:
        return value.float().numpy().astype(ml_dtypes.bfloat16)
    return value.numpy()


def from_numpy(array: np.ndarray):
    """A tensor with exactly the array's bits."""
    import ml_dtypes
    import torch

    array = np.ascontiguousarray(array)
    if array.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(array)


def prepare_module(module, x: np.ndarray):
    """A torch module in the case dtype, as a model loaded in bf16 holds its norms."""
    if hasattr(module, "to") and hasattr(module, "parameters"):
        return module.to(from_numpy(x[:0]).dtype)
    return module


def set_weight(module, attribute: str, weight: np.ndarray) -> None:
    """Copy the case's weight into a parameter (same dtype on both sides: the bits are kept); an
    attribute that is not a tensor is replaced by the weight as a tensor. `attribute` may be a
    dotted path (norm.weight)."""
    import torch

    *path, attribute = attribute.split(".")
    for part in path:
        module = getattr(module, part)
    current = getattr(module, attribute)
    value = from_numpy(weight)
    if not (hasattr(current, "data") and hasattr(current, "copy_")):
        setattr(module, attribute, value)
        return
    if tuple(current.shape) != tuple(value.shape):
        raise TypeError(f"{type(module).__name__}.{attribute} has shape {tuple(current.shape)}; the case's "
                        f"weight is {tuple(value.shape)}")
    with torch.no_grad():
        current.copy_(value)


def weights(module) -> dict:
    if hasattr(module, "named_parameters"):
        return {name: tuple(p.shape) for name, p in module.named_parameters()}
    return {name: tuple(v.shape) for name, v in vars(module).items() if hasattr(v, "shape")}


FRAMEWORK = Framework("torch", modules=("torch",), extra="torch", distributions=("torch",),
                      libraries={"transformers": "hf"}, user_code=True, detect=("torch",),
                      array_types=("torch",), to_numpy=to_numpy, from_numpy=from_numpy,
                      module_types=("torch.nn",), prepare_module=prepare_module, weights=weights,
                      set_weight=set_weight)
