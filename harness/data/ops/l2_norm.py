"""l2_norm: y = x * rsqrt(sum(x^2) + eps), Qwen3.5's q/k normalisation before the delta rule (and,
weightless and per head, Llama 4's QK norm). Its eps is optional in a user's call. torch's autograd
of F.normalize, which takes every backward step in the dtype, rounds dx ten times (budgets.py)."""
from normdiff.harness.data.ops import norm
from normdiff.harness.data.ops.record import NORM_KNOBS, ONE_ROUNDING, X, Op

OP = Op("l2_norm", "y = x * rsqrt(sum(x^2) + eps)  (Qwen3.5 q/k before the delta rule)",
        (X,), ("x", "eps"), NORM_KNOBS, optional=("eps",), rounding=ONE_ROUNDING,  # no weight: one rounding, always
        dtype_backward_roundings=(("dx", 10),),
        exact=norm.evaluate, vjp=norm.vjp, order=3)
