"""The fix of the weight-twice input gradient in Megatron-LM's BatchInvariantRMSNormFn (PR #6859,
its second commit), modelled: the arithmetic of d98e8a6 (batch_invariant_kernels.py, lines
1324-1382) with the projection term carrying the weight only inside its row sum
s = sum(g x w), as the PR's derivation gives dx_k = g_k w_k r - r^3 x_k / n * s. Called with
zero_centered_gamma=False, as rmsnorm_batch_invariant (lines 1385-1392) calls it."""
import torch


class BatchInvariantRMSNormFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, eps, zero_centered_gamma):
        dtype = x.dtype
        xf = x.float()
        wf = weight.to(dtype=torch.float32)
        if zero_centered_gamma:  # the PR's other commit: the offset after the float32 cast
            wf = wf + 1.0
        ms = (xf * xf).mean(dim=-1, keepdim=True)  # float32 mean of squares
        r = torch.rsqrt(ms + eps)
        out = ((xf * r) * wf).to(dtype)  # one rounding
        ctx.zero_centered_gamma = zero_centered_gamma
        ctx.save_for_backward(x, weight, r)
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
        dw = (g * xf * r).sum(dim=rows).to(weight.dtype)  # unchanged by the fix
        s = (g * xf * wf).sum(dim=-1, keepdim=True)
        dx = g * (wf * r) - r3 * (s * xf) / n  # the weight once, inside s
        return dx.to(x.dtype), dw, None, None


def rms_norm(x, weight, eps):
    return BatchInvariantRMSNormFn.apply(x, weight, eps, False)
