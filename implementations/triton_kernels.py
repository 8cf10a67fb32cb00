"""Real Triton norm kernels, called as their libraries' users call them, run on the CPU by Triton's
interpreter under normdiff's faithful layer (the `triton` worker: frameworks/triton.py). Registered
in the full tier (implementations/catalog.py): the interpreter runs a kernel program by program,
~3 ms a row, so each costs ~15 s over the default suite (docs/triton.md).

  Liger-Kernel (liger_kernel.ops)
    LigerRMSNormFunction, casting_mode "llama": x * rstd in float32, rounded to the input dtype, then
        times w in it: the Llama cast (rms_norm@qwen3, @llama)
    LigerRMSNormFunction, casting_mode "gemma", offset 1: everything in float32 with (1 + w), rounded
        once (rms_norm@gemma3, @qwen3.5)
    LigerLayerNormFunction: float32 statistics, rounded once (layer_norm@torch)
  flash-linear-attention (fla.modules.norm; `fla` is not among normdiff's extras, see the Makefile)
    rms_norm / layer_norm: float32 throughout, y = x_hat * w (+ b) rounded once (rms_norm@olmo2,
        @torch; layer_norm@torch)
    rms_norm_gated (the fused norm-gate): rms_norm(x) * w * silu(g) in float32, rounded once
        (gated_rms_norm@qwen3.5, @qwen3-next)
    l2norm: x * rsqrt(sum(x^2) + eps) in float32 (l2_norm@qwen3.5, @qwen3-next)
    layernorm_gated's rmsnorm_fn with norm_before_gate=False: Mamba2's grouped gated norm (mamba_ssm's
        layernorm_gated, which fla carries) (group_gated_rms_norm@mamba2)

Liger's casting_mode "none" (statistics in the input dtype) implements no convention here; `normdiff
check` shows it disagreeing with qwen3 (docs/triton.md). Each backward is the kernel's own, through
autograd (frameworks/torch.py autograd_vjp). Only ever imported inside the Triton worker.
"""
from __future__ import annotations

from normdiff.cases.model import CaseInputs
from normdiff.harness.data.contracts import Contract
from normdiff.implementations.frameworks.torch import autograd_vjp, from_numpy, input_leaf


def _tensors(inputs: CaseInputs, names: tuple[str, ...], leaves: bool) -> dict:
    make = input_leaf if leaves else from_numpy
    return {name: make(inputs.arrays[name]) for name in names if name in inputs.arrays}


def _adapter(call, names: tuple[str, ...]):
    """A forward adapter and its backward (the kernel's own, by autograd) for
    call(contract, inputs, **tensors)."""
    def forward(op: str, contract: Contract, inputs: CaseInputs):
        return call(contract, inputs, **_tensors(inputs, names, leaves=False))

    def backward(op: str, contract: Contract, inputs: CaseInputs, dy) -> dict:
        leaves = _tensors(inputs, names, leaves=True)
        return autograd_vjp(lambda: call(contract, inputs, **leaves), leaves, dy)

    forward.backward = backward
    return forward


def _liger_rms_norm(mode: str, offset: float):
    def call(contract, inputs, x, weight):
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction

        return LigerRMSNormFunction.apply(x, weight, contract.eps, offset, mode, False)
    return call


def _liger_layer_norm(contract, inputs, x, weight, bias):
    from liger_kernel.ops.layer_norm import LigerLayerNormFunction

    return LigerLayerNormFunction.apply(x, weight, bias, contract.eps)


def _fla_rms_norm(contract, inputs, x, weight):
    from fla.modules.norm.layernorm import rms_norm

    return rms_norm(x, weight, None, eps=contract.eps)


def _fla_layer_norm(contract, inputs, x, weight, bias):
    from fla.modules.norm.layernorm import layer_norm

    return layer_norm(x, weight, bias, eps=contract.eps)


def _fla_rms_norm_gated(contract, inputs, x, gate, weight):
    from fla.modules.norm.fused_norm_gate import rms_norm_gated

    return rms_norm_gated(x, gate, weight, None, eps=contract.eps)


def _fla_l2norm(contract, inputs, x):
    from fla.modules.norm.l2norm import l2norm

    return l2norm(x, eps=contract.eps)


def _fla_mamba2_gated(contract, inputs, x, gate, weight):
    from fla.modules.norm.layernorm_gated import rmsnorm_fn

    # the case's "heads" are the groups (harness/data/ops/group_gated_rms_norm.py)
    return rmsnorm_fn(x, weight, None, z=gate, eps=contract.eps, group_size=x.shape[-1] // inputs.num_heads,
                      norm_before_gate=False)


liger_rms_norm_llama = _adapter(_liger_rms_norm("llama", 0.0), ("x", "weight"))
liger_rms_norm_gemma = _adapter(_liger_rms_norm("gemma", 1.0), ("x", "weight"))
liger_layer_norm = _adapter(_liger_layer_norm, ("x", "weight", "bias"))
fla_rms_norm = _adapter(_fla_rms_norm, ("x", "weight"))
fla_layer_norm = _adapter(_fla_layer_norm, ("x", "weight", "bias"))
fla_rms_norm_gated = _adapter(_fla_rms_norm_gated, ("x", "gate", "weight"))
fla_l2norm = _adapter(_fla_l2norm, ("x",))
fla_mamba2_gated = _adapter(_fla_mamba2_gated, ("x", "gate", "weight"))
