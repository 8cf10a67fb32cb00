"""A model of Megatron-LM's BatchInvariantRMSNormFn at d98e8a6 (megatron/core/transformer/
custom_layers/batch_invariant_kernels.py, lines 1324-1382; unchanged since "Batch Invariance (#2308)"),
written here from reading it, with zero_centered_gamma=True, as the patched TE RMSNorm.forward
(_te_rmsnorm_forward_patched, lines 1641-1650) calls it for a zero-centred-gamma model.

Forward (the bug, Megatron-LM PR #6859 commit 1): the offset weight w + 1 is computed and never read;
the output is x * r * w in float32, rounded once, with the raw stored weight. Backward: the offset is
honoured (w + 1 formed in the weight's dtype), and the projection term of dx carries the weight
twice (PR #6859 commit 2)."""
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
    return BatchInvariantRMSNormFn.apply(x, weight, eps, True)
