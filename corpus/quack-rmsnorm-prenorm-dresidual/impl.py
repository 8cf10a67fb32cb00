"""A model of quack's RMSNorm with a residual in prenorm mode (quack/rmsnorm.py at af46792, the parent
of the fix): the forward kernel (lines 275-330), the backward kernel (lines 760-850), rmsnorm_bwd
(lines 1060-1095) and RMSNormFunction (lines 1097-1154), written here from reading them; the CuTe
kernels become PyTorch tensor ops with the same dtypes at each step.

Forward: x and the residual are upcast and added in float32; that float32 sum is stored rounded to
the residual's dtype as residual_out, and it (not the rounded copy) feeds the statistic:
rstd = rsqrt(sum(h^2) / n + eps) in float32; y = h * rstd * w in float32, rounded once. The saved
tensors are the rounded residual_out, the weight and rstd.

Backward (the bug, quack PR #53): the upstream gradient of residual_out is added to dy *before* the
norm's backward, so the norm's backward is applied to dy + dresidual_out (and dw sums
(dy + dresidual_out) * x_hat), where dresidual_out should pass straight through to the sum's
operands. dx and dresidual are the same tensor."""
import torch


class RMSNormPrenorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, residual, eps):
        h = x.float() + residual.float()  # the sum, kept in float32
        residual_out = h.to(residual.dtype)  # published rounded
        rstd = torch.rsqrt((h * h).sum(dim=-1, keepdim=True) / h.shape[-1] + eps)
        y = (h * rstd * weight.float()).to(x.dtype)  # one rounding
        ctx.save_for_backward(residual_out, weight, rstd)
        return y, residual_out

    @staticmethod
    def backward(ctx, dout, dresidual_out):
        xs, weight, rstd = ctx.saved_tensors  # xs is residual_out, rounded
        n = xs.shape[-1]
        x = xs.float()
        g = dout.float()
        if dresidual_out is not None:
            g = g + dresidual_out.float()  # the bug: the residual's gradient joins dy here
        x_hat = x * rstd
        wdy = g * weight.float()
        mean_xhat_wdy = (x_hat * wdy).sum(dim=-1, keepdim=True) / n
        dx32 = (wdy - x_hat * mean_xhat_wdy) * rstd
        dx = dx32.to(xs.dtype)
        # per-row partial products in float32, summed over rows, cast to the weight's dtype
        dw = (g * x_hat).sum(dim=0).to(weight.dtype)
        return dx, dw, dx, None  # dresidual is dx itself


def add_rms_norm(x, residual, weight, eps):
    """rmsnorm(x, weight, residual=residual, eps=eps, prenorm=True): returns (out, residual_out)."""
    return RMSNormPrenorm.apply(x, weight, residual, eps)
