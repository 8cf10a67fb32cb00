"""Liger-Kernel's LigerRMSNormFunction as PR #376 (commit 563e5e5) fixes the Gemma 2 patch, modelled
(src/liger_kernel/ops/rms_norm.py: the backward kernel, lines 116-195, rms_norm_backward, lines
259-306; the Gemma 2 patch in transformers/monkey_patch.py now passes in_place=False): the same
gemma-mode arithmetic (float32 throughout, offset 1.0, one rounding), and the backward writes dx
into a fresh zero tensor instead of into dy."""
import torch


class LigerRMSNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, eps, offset=0.0, in_place=True):
        xf = x.float()
        rstd = torch.rsqrt((xf * xf).sum(dim=-1, keepdim=True) / x.shape[-1] + eps)
        y = (xf * rstd * (offset + w.float())).to(x.dtype)
        ctx.offset = offset
        ctx.in_place = in_place
        ctx.save_for_backward(x, w, rstd)
        return y

    @staticmethod
    def backward(ctx, dy):
        x, w, rstd = ctx.saved_tensors
        dy = dy.contiguous()
        n = x.shape[-1]
        xf = x.float()
        m = dy.float() * (w.float() + ctx.offset)
        dx = rstd * m - rstd * (rstd * rstd * (m * xf).sum(dim=-1, keepdim=True) / n) * xf
        dw = (dy.float() * (xf * rstd)).sum(dim=0).to(w.dtype)
        out = dy if ctx.in_place else torch.zeros_like(dy)
        out.copy_(dx.to(x.dtype))
        return out, dw, None, None, None


def rms_norm(x, weight, eps):
    """LigerRMSNorm as the fixed Gemma 2 patch builds it: offset 1.0, 'gemma', in_place=False."""
    return LigerRMSNormFunction.apply(x, weight, eps, 1.0, False)
