"""A model of Megatron-LM's BatchInvariantRMSNormFn at d98e8a6 (megatron/core/transformer/
custom_layers/batch_invariant_kernels.py, lines 1324-1382; unchanged since "Batch Invariance (#2308)"),
written here from reading it, with zero_centered_gamma=False, as its functional wrapper
rmsnorm_batch_invariant (lines 1385-1392) calls it.

Forward: everything in float32 (x and the weight upcast, the mean of squares by a batch-invariant
Triton mean, here torch's mean, r = rsqrt(mean + eps)), x * r * w formed in float32 and rounded
once to the input dtype. The CUDA-only guards are dropped (they do not change the arithmetic).

Backward (the bug, Megatron-LM PR #6859): the weight gradient is right, but the input gradient's
projection term carries the weight twice: once inside s = sum(g x w) and once more as a per-channel
factor w_k in front of it."""
import torch


class BatchInvariantRMSNormFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, eps, zero_centered_gamma):
        # the offset weight is formed and never read again (the forward bug of the same PR; with
        # zero_centered_gamma=False it is the weight itself, so it does not matter here)
        weight_eff = weight + 1.0 if zero_centered_gamma else weight  # noqa: F841
        dtype = x.dtype
        xf = x.float()
        wf = weight.to(dtype=torch.float32)
        ms = (xf * xf).mean(dim=-1, keepdim=True)  # float32 mean of squares over the last axis
        r = torch.rsqrt(ms + eps)
        out = ((xf * r) * wf).to(dtype)  # one rounding, at the end
        ctx.zero_centered_gamma = zero_centered_gamma
        ctx.save_for_backward(x, weight, r)  # x as given, r in float32
        return out

    @staticmethod
    def backward(ctx, grad_output):
        x, weight, r = ctx.saved_tensors
        w_eff = (weight + 1.0) if ctx.zero_centered_gamma else weight
        g = grad_output.float()
        xf = x.float()
        wf = w_eff.to(dtype=torch.float32)
        r3 = r * r * r
        n = x.shape[-1]
        rows = tuple(range(0, g.ndim - 1))
        # dw: sum over every leading axis of g x r, in float32, cast to the weight's dtype
        dw = (g * xf * r).sum(dim=rows).to(weight.dtype)
        # the row's projection sum, with the weight inside it
        s = (g * xf * wf).sum(dim=-1, keepdim=True)
        # dx: g w r minus the projection term, which is multiplied by w a second time here
        dx = g * (wf * r) - (wf * r3) * (s * xf) / n
        return dx.to(x.dtype), dw, None, None


def rms_norm(x, weight, eps):
    """The functional entry point: the autograd function with zero_centered_gamma=False."""
    return BatchInvariantRMSNormFn.apply(x, weight, eps, False)
