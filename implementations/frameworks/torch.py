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
    name = str(value.dtype).removeprefix("torch.")
    if name.startswith("float8") and hasattr(ml_dtypes, name):  # NumPy has no float8: its bits, as ml_dtypes'
        return value.view(torch.uint8).numpy().view(getattr(ml_dtypes, name))
    return value.numpy()


def from_numpy(array: np.ndarray):
    """A tensor with exactly the array's bits, and its strides (a transposed or strided view stays
    one: cases/layouts.py); only negative strides, which torch has not, are copied away."""
    import ml_dtypes
    import torch

    if any(s < 0 for s in array.strides):
        array = np.ascontiguousarray(array)
    if array.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(array)


def input_leaf(array: np.ndarray):
    """A fresh tensor with exactly the array's bits that autograd differentiates with respect to (a
    copy: never a view of the caller's array)."""
    return from_numpy(array).clone().requires_grad_(True)


def autograd_vjp(forward, leaves: dict, dy: np.ndarray) -> dict:
    """J^T dy through torch's own autograd: `forward()` is run under torch.enable_grad() and
    torch.autograd.grad of its output with respect to each of `leaves` (name -> tensor with
    requires_grad: an `input_leaf`, or a module's parameter that already holds the case's bits) is
    returned by name, in the dtype autograd gives it (a bf16 parameter gets a bf16 gradient), zeros
    for a leaf the output does not depend on. grad_outputs is dy with exactly its bits; cast to the
    output's dtype only where the two differ, and only if that cast is exact. `leaves` is read once
    forward() has run, so forward may fill in a tensor it makes itself (a hooked module's input)."""
    import torch

    with torch.enable_grad():
        out = forward()
    # an op with several results (a fused add's (y, residual_out)) gets one upstream gradient per
    # result: dy is then {result: gradient} in the results' order, and out the tuple of them
    outs = list(out) if isinstance(dy, dict) else [out]
    dys = list(dy.values()) if isinstance(dy, dict) else [dy]
    if len(outs) != len(dys):
        raise ValueError(f"the forward returned {len(outs)} results for {len(dys)} upstream gradients")
    pairs = [(o, _grad_output(o, g)) for o, g in zip(outs, dys) if o.requires_grad]
    names = list(leaves)
    if not pairs:  # depends on none of the leaves
        return {name: torch.zeros_like(leaves[name]) for name in names}
    grads = torch.autograd.grad([o for o, _ in pairs], [leaves[name] for name in names],
                                grad_outputs=[g for _, g in pairs], allow_unused=True)
    return {name: torch.zeros_like(leaves[name]) if g is None else g for name, g in zip(names, grads)}


def _grad_output(out, dy):
    """dy as the grad_output of `out`: its bits, cast to out's dtype only where that is exact."""
    grad = from_numpy(dy)
    if tuple(grad.shape) != tuple(out.shape):
        raise ValueError(f"dy has shape {tuple(grad.shape)}; the output has {tuple(out.shape)}")
    if grad.dtype != out.dtype:
        cast = grad.to(out.dtype)
        if not bool((cast.to(grad.dtype) == grad).all()):
            raise ValueError(f"dy in {grad.dtype} is not exactly representable in the output's {out.dtype}")
        grad = cast
    return grad


def fold(grad, shape: tuple):
    """A gradient of a weight that was tiled to grad's length, summed back over the tiles to
    `shape` (autograd's own backward of `repeat`: the tiles' sum, in the gradient's dtype)."""
    shape = tuple(shape)
    if tuple(grad.shape) == shape:
        return grad
    return grad.reshape(-1, *shape).sum(0)


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


def differentiate(forward, arrays: dict, dy: np.ndarray, params: dict) -> dict:
    """J^T dy of a user's torch code by autograd (a custom autograd.Function's own backward is what
    runs): `forward(leaves)` gets fresh differentiable tensors of `arrays`; `params` are a module's
    parameters, already holding the case's bits."""
    import torch

    leaves = {name: input_leaf(array) for name, array in arrays.items()}
    with torch.enable_grad():
        out = forward(leaves)
    outs = list(out) if isinstance(dy, dict) else [out]  # several results: one upstream gradient each
    wrong = [type(o).__name__ for o in outs if not isinstance(o, torch.Tensor)]
    if wrong:
        raise TypeError(f"returned a {wrong[0]}{' among its results' if len(outs) > 1 else ''}, not a tensor "
                        "autograd can differentiate")
    if not any(o.requires_grad for o in outs):
        raise TypeError("its output does not depend on its inputs through autograd (computed under no_grad, "
                        "detached, or through NumPy): normdiff cannot differentiate it; give an explicit "
                        "backward whose first parameter is dy")
    return autograd_vjp(lambda: out, {**leaves, **params}, dy)


FRAMEWORK = Framework("torch", modules=("torch",), extra="torch", distributions=("torch",),
                      libraries={"transformers": "hf"}, user_code=True,
                      # torch, and the libraries built on it that a norm class is imported from
                      detect=("torch", "transformers", "apex", "timm", "vllm", "sglang", "megatron",
                              "flash_attn", "xformers", "fairseq"),
                      array_types=("torch",), to_numpy=to_numpy, from_numpy=from_numpy, strides=True,
                      module_types=("torch.nn",), prepare_module=prepare_module, weights=weights,
                      set_weight=set_weight, differentiate=differentiate)
