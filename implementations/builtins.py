"""PyTorch's own normalization built-ins, called as a user would call them on the case's tensors.

  torch.nn.functional.rms_norm   x * rsqrt(mean(x^2) + eps) * w, statistics in float32, rounded
  torch.nn.RMSNorm               once to the input dtype (plain gamma, one rounding: the bits of HF
                                 Olmo2RMSNorm's order (w * xh).to(d), as torch_own computes it;
                                 tests/implementations/test_builtins.py checks bf16 and fp16)
  torch.nn.functional.layer_norm (x - mean x) * rsqrt(var(x) + eps) * w + b, the biased variance,
  torch.nn.LayerNorm             statistics in float32 for bf16 and fp16 input, rounded once to the
                                 input dtype: layer_norm@torch's contract exactly (eps 1e-5, weight
                                 and bias in the case dtype)
  torch.nn.functional.normalize  x / max(||x||_2, eps), eps 1e-12, computed in the input dtype
                                 (so in float16 eps underflows to 0 and a zero row gives 0 / 0 =
                                 NaN where the contract gives 0: a real finding, reported as
                                 nan_mismatch, not hidden by an upcast here)

Which conventions they are declared for, and why:
  * rms_norm@olmo2 and rms_norm@torch: their contract is exactly plain gamma, one rounding.
  * qk_norm@olmo2: OLMo2's q_norm is an RMSNorm over the full H*D vector with an (H*D,) weight,
    which is what `F.rms_norm(x, (H*D,), w)` / `nn.RMSNorm(H*D)` compute.
  * NOT llama / qwen3 / gemma3 / qwen3.5. Llama and Qwen3 round the normalised value to the input
    dtype before multiplying by w (two roundings); the built-ins round once. The ULP budget accepts
    that difference as `agree` (and tests show it does), but the built-ins do not implement that
    contract, and "identical to the real model" would never hold; declaring them would blur the
    report's bit-exact families. Gemma3 / Qwen3.5 multiply by 1 + w, which the built-ins do not.
  * F.layer_norm / nn.LayerNorm: layer_norm@torch, F.layer_norm's own semantics (the cohere and
    olmo conventions share the contract, but they name HF's layers, which are not these calls).
  * F.normalize: only l2_norm@torch (clamp, eps 1e-12). Qwen3.5's l2norm puts eps 1e-6 inside the
    square root, a different function once ||x|| <~ 1e-2; the suite measures both on the same inputs.

The backward adapters (`functional_rms_norm_backward`, `module_rms_norm_backward`,
`functional_layer_norm_backward`, `module_layer_norm_backward`, `normalize_backward`) run the same
calls under autograd (frameworks/torch.py `autograd_vjp`): the built-ins' own derivative formulas,
gradients in the case dtype. LayerNorm's, measured: with the weight in the input's bf16 / fp16 (as
a model loaded in that dtype holds it), torch's CPU native_layer_norm saves the mean and rstd for
its backward in that dtype (in float32 only when the weight is float32), so dx and dw are computed
from a mean rounded to bf16 / fp16: on rows at mean 1000 (bf16 spacing 4 there) they miss the
budget (dw 180 bf16 ULPs against 8.5 at narrow:1). Reported as it is, not hidden by an upcast here.

Each eps is the contract's (passed explicitly: `nn.RMSNorm(eps=None)` would use finfo(float32).eps).
Only ever imported inside the torch worker.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from normdiff.cases.model import CaseInputs
from normdiff.harness.data.contracts import Contract
from normdiff.implementations.frameworks.torch import autograd_vjp, fold, input_leaf
from normdiff.implementations.frameworks.torch import from_numpy as to_torch


def _x_and_weight(inputs: CaseInputs, leaves: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """x and the case's weight as tensors with their bits (`leaves`: fresh tensors for autograd)."""
    if "weight" not in inputs.arrays:
        raise ValueError(f"this built-in takes a weight; the op gives only {', '.join(inputs.arrays)}")
    tensor = input_leaf if leaves else to_torch
    return tensor(inputs.arrays["x"]), tensor(inputs.arrays["weight"])


def _tiled(weight: torch.Tensor, width: int) -> torch.Tensor:
    # a (head_dim,) weight on a full-vector norm is tiled over the heads (numpy_own's rule); inside
    # autograd's graph, so the tiles' gradients come back summed to the case weight's shape
    return weight if weight.shape[-1] == width else weight.repeat(width // weight.shape[-1])


def _functional(x: torch.Tensor, weight: torch.Tensor, contract: Contract) -> torch.Tensor:
    return F.rms_norm(x, (x.shape[-1],), _tiled(weight, x.shape[-1]), contract.eps)


def functional_rms_norm(op: str, contract: Contract, inputs: CaseInputs) -> torch.Tensor:
    return _functional(*_x_and_weight(inputs), contract)


def functional_rms_norm_backward(op: str, contract: Contract, inputs: CaseInputs, dy) -> dict[str, torch.Tensor]:
    """F.rms_norm's own autograd backward: {"x", "weight"}, each in the case dtype."""
    x, weight = _x_and_weight(inputs, leaves=True)
    return autograd_vjp(lambda: _functional(x, weight, contract), {"x": x, "weight": weight}, dy)


_MODULES: dict[tuple, torch.nn.RMSNorm] = {}


def _module(x: torch.Tensor, weight: torch.Tensor, contract: Contract) -> torch.nn.RMSNorm:
    """The cached nn.RMSNorm for the case, holding the case's weight (tiled to the width)."""
    key = (x.shape[-1], contract.eps, x.dtype)
    if key not in _MODULES:  # weight stored in the case dtype, as in a model loaded in that dtype
        _MODULES[key] = torch.nn.RMSNorm(x.shape[-1], eps=contract.eps, dtype=x.dtype)
    norm = _MODULES[key]
    with torch.no_grad():
        norm.weight.copy_(_tiled(weight, x.shape[-1]))
    return norm


def module_rms_norm(op: str, contract: Contract, inputs: CaseInputs) -> torch.Tensor:
    x, weight = _x_and_weight(inputs)
    norm = _module(x, weight, contract)
    with torch.inference_mode():
        return norm(x)


def module_rms_norm_backward(op: str, contract: Contract, inputs: CaseInputs, dy) -> dict[str, torch.Tensor]:
    """nn.RMSNorm's autograd backward: {"x", "weight"}; the weight's is the parameter's gradient
    (case dtype), summed over the tiles where a (head_dim,) case weight was tiled to the width."""
    x, weight = _x_and_weight(inputs, leaves=True)
    norm = _module(x, weight, contract)
    grads = autograd_vjp(lambda: norm(x), {"x": x, "weight": norm.weight}, dy)
    return dict(grads, weight=fold(grads["weight"], weight.shape))


def normalize(op: str, contract: Contract, inputs: CaseInputs) -> torch.Tensor:
    return F.normalize(to_torch(inputs.arrays["x"]), p=2.0, dim=-1, eps=contract.eps)


def normalize_backward(op: str, contract: Contract, inputs: CaseInputs, dy) -> dict[str, torch.Tensor]:
    """F.normalize's own autograd backward (in the input dtype, as its forward): {"x"}."""
    x = input_leaf(inputs.arrays["x"])
    return autograd_vjp(lambda: F.normalize(x, p=2.0, dim=-1, eps=contract.eps), {"x": x}, dy)


def _x_weight_and_bias(inputs: CaseInputs, leaves: bool = False) -> tuple[torch.Tensor, ...]:
    """x, the case's weight and its bias as tensors with their bits (`leaves`: fresh tensors for
    autograd)."""
    if "bias" not in inputs.arrays:
        raise ValueError(f"this built-in takes a bias; the op gives only {', '.join(inputs.arrays)}")
    tensor = input_leaf if leaves else to_torch
    return (*_x_and_weight(inputs, leaves), tensor(inputs.arrays["bias"]))


def _functional_ln(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, contract: Contract) -> torch.Tensor:
    width = x.shape[-1]
    return F.layer_norm(x, (width,), _tiled(weight, width), _tiled(bias, width), contract.eps)


def functional_layer_norm(op: str, contract: Contract, inputs: CaseInputs) -> torch.Tensor:
    return _functional_ln(*_x_weight_and_bias(inputs), contract)


def functional_layer_norm_backward(op: str, contract: Contract, inputs: CaseInputs, dy) -> dict[str, torch.Tensor]:
    """F.layer_norm's own autograd backward: {"x", "weight", "bias"}, each in the case dtype."""
    x, weight, bias = _x_weight_and_bias(inputs, leaves=True)
    return autograd_vjp(lambda: _functional_ln(x, weight, bias, contract),
                        {"x": x, "weight": weight, "bias": bias}, dy)


_LAYER_NORMS: dict[tuple, torch.nn.LayerNorm] = {}


def _layer_norm_module(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
                       contract: Contract) -> torch.nn.LayerNorm:
    """The cached nn.LayerNorm for the case, holding the case's weight and bias (tiled to the width)."""
    width = x.shape[-1]
    key = (width, contract.eps, x.dtype)
    if key not in _LAYER_NORMS:  # weight and bias in the case dtype, as in a model loaded in that dtype
        _LAYER_NORMS[key] = torch.nn.LayerNorm(width, eps=contract.eps, dtype=x.dtype)
    norm = _LAYER_NORMS[key]
    with torch.no_grad():
        norm.weight.copy_(_tiled(weight, width))
        norm.bias.copy_(_tiled(bias, width))
    return norm


def module_layer_norm(op: str, contract: Contract, inputs: CaseInputs) -> torch.Tensor:
    x, weight, bias = _x_weight_and_bias(inputs)
    norm = _layer_norm_module(x, weight, bias, contract)
    with torch.inference_mode():
        return norm(x)


def module_layer_norm_backward(op: str, contract: Contract, inputs: CaseInputs, dy) -> dict[str, torch.Tensor]:
    """nn.LayerNorm's autograd backward: {"x", "weight", "bias"}; the weight's and the bias' are the
    parameters' gradients (case dtype), summed over the tiles where a shorter case operand was tiled."""
    x, weight, bias = _x_weight_and_bias(inputs, leaves=True)
    norm = _layer_norm_module(x, weight, bias, contract)
    grads = autograd_vjp(lambda: norm(x), {"x": x, "weight": norm.weight, "bias": norm.bias}, dy)
    return dict(grads, weight=fold(grads["weight"], weight.shape), bias=fold(grads["bias"], bias.shape))
