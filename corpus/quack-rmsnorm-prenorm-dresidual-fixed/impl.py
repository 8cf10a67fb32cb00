"""quack's RMSNorm with a residual in prenorm mode as PR #53 (commit 3e0fa64) fixes its backward,
modelled (quack/rmsnorm.py at 3e0fa64: the backward kernel, lines 760-850; the rest as at its parent):
the same forward (float32 sum, residual_out rounded, statistic and y from the float32 sum, one
rounding); in the backward the norm's gradient is taken of dy alone, and the upstream gradient of
residual_out is added to dx after it (dw sums dy * x_hat only). dx and dresidual are the same."""
import torch


class RMSNormPrenorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, residual, eps):
        h = x.float() + residual.float()
        residual_out = h.to(residual.dtype)
        rstd = torch.rsqrt((h * h).sum(dim=-1, keepdim=True) / h.shape[-1] + eps)
        y = (h * rstd * weight.float()).to(x.dtype)
        ctx.save_for_backward(residual_out, weight, rstd)
        return y, residual_out

    @staticmethod
    def backward(ctx, dout, dresidual_out):
        xs, weight, rstd = ctx.saved_tensors
        n = xs.shape[-1]
        x = xs.float()
        g = dout.float()  # dy alone goes through the norm's backward
        x_hat = x * rstd
        wdy = g * weight.float()
        mean_xhat_wdy = (x_hat * wdy).sum(dim=-1, keepdim=True) / n
        dx32 = (wdy - x_hat * mean_xhat_wdy) * rstd
        if dresidual_out is not None:
            dx32 = dx32 + dresidual_out.float()  # then the residual's gradient passes through
        dx = dx32.to(xs.dtype)
        dw = (g * x_hat).sum(dim=0).to(weight.dtype)
        return dx, dw, dx, None


def add_rms_norm(x, residual, weight, eps):
    return RMSNormPrenorm.apply(x, weight, residual, eps)
