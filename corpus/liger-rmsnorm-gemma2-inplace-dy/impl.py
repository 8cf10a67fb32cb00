"""A model of Liger-Kernel's LigerRMSNormFunction at 5ef09d5 (src/liger_kernel/ops/rms_norm.py: the
forward kernel, lines 44-113, the backward kernel, lines 116-188, rms_norm_backward, lines 254-291,
and the autograd function, lines 294-346), written here from reading it, in PyTorch, in the mode
its Gemma 2 patch uses: offset 1.0 and casting_mode "gemma".

Forward (gemma casting): x and w upcast to float32, rstd = rsqrt(sum(x^2) / n + eps) saved in
float32, y = x * rstd * (1 + w) in float32, rounded once.
Backward: m = dy * (w + 1) in float32, dx = rstd * m - rstd^3 / n * sum(m x) * x, dw summed over
rows in float32 and cast to the weight's dtype. dx is stored *into dy's own memory* ("use dY to store
the value of dX to save memory") and returned: the caller's upstream gradient is overwritten (the
bug of Liger issue #370: Gemma 2's double norm around a residual reads that dy again, and training
diverged)."""
import torch


class LigerRMSNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, eps, offset=0.0):
        xf = x.float()
        rstd = torch.rsqrt((xf * xf).sum(dim=-1, keepdim=True) / x.shape[-1] + eps)
        y = (xf * rstd * (offset + w.float())).to(x.dtype)
        ctx.offset = offset
        ctx.save_for_backward(x, w, rstd)
        return y

    @staticmethod
    def backward(ctx, dy):
        x, w, rstd = ctx.saved_tensors
        dy = dy.contiguous()  # the ensure_contiguous decorator: the same tensor when contiguous
        n = x.shape[-1]
        xf = x.float()
        m = dy.float() * (w.float() + ctx.offset)
        dx = rstd * m - rstd * (rstd * rstd * (m * xf).sum(dim=-1, keepdim=True) / n) * xf
        dw = (dy.float() * (xf * rstd)).sum(dim=0).to(w.dtype)
        dy.copy_(dx.to(x.dtype))  # dX written over dY
        return dy, dw, None, None


def rms_norm(x, weight, eps):
    """LigerRMSNorm as the Gemma 2 patch builds it: offset 1.0, casting_mode 'gemma'."""
    return LigerRMSNormFunction.apply(x, weight, eps, 1.0)
