"""PyTorch's own normalization built-ins, called as a user would call them on the case's tensors.

  torch.nn.functional.rms_norm   x * rsqrt(mean(x^2) + eps) * w, statistics in float32, rounded
  torch.nn.RMSNorm               once to the input dtype (plain gamma, one rounding: the bits of HF
                                 Olmo2RMSNorm's order (w * xh).to(d), as torch_own computes it;
                                 tests/implementations/test_builtins.py checks bf16 and fp16)
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
  * F.normalize: only l2_norm@torch (clamp, eps 1e-12). Qwen3.5's l2norm puts eps 1e-6 inside the
    square root, a different function once ||x|| <~ 1e-2; the suite measures both on the same inputs.

Each eps is the contract's (passed explicitly: `nn.RMSNorm(eps=None)` would use finfo(float32).eps).
Only ever imported inside the torch worker.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from normdiff.cases.model import CaseInputs
from normdiff.harness.data.contracts import Contract
from normdiff.implementations.frameworks.torch import from_numpy as to_torch


def _x_and_weight(inputs: CaseInputs) -> tuple[torch.Tensor, torch.Tensor]:
    if "weight" not in inputs.arrays:
        raise ValueError(f"this built-in takes a weight; the op gives only {', '.join(inputs.arrays)}")
    x, weight = to_torch(inputs.arrays["x"]), to_torch(inputs.arrays["weight"])
    if weight.shape[-1] != x.shape[-1]:
        # a (head_dim,) weight on a full-vector norm is tiled over the heads (numpy_own's rule)
        weight = weight.repeat(x.shape[-1] // weight.shape[-1])
    return x, weight


def functional_rms_norm(op: str, contract: Contract, inputs: CaseInputs) -> torch.Tensor:
    x, weight = _x_and_weight(inputs)
    return F.rms_norm(x, (x.shape[-1],), weight, contract.eps)


_MODULES: dict[tuple, torch.nn.RMSNorm] = {}


def module_rms_norm(op: str, contract: Contract, inputs: CaseInputs) -> torch.Tensor:
    x, weight = _x_and_weight(inputs)
    key = (x.shape[-1], contract.eps, x.dtype)
    if key not in _MODULES:  # weight stored in the case dtype, as in a model loaded in that dtype
        _MODULES[key] = torch.nn.RMSNorm(x.shape[-1], eps=contract.eps, dtype=x.dtype)
    norm = _MODULES[key]
    with torch.inference_mode():
        norm.weight.copy_(weight)
        return norm(x)


def normalize(op: str, contract: Contract, inputs: CaseInputs) -> torch.Tensor:
    return F.normalize(to_torch(inputs.arrays["x"]), p=2.0, dim=-1, eps=contract.eps)
