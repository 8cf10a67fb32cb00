"""The float32 error bounds that both the exact maths (ops/norm.py, where a gradient's terms are
floored at what a legal mean may be off) and the budgets (budgets.py, which derives them) use.
Pure functions of n."""
from __future__ import annotations

U32 = 2.0 ** -24


def gamma(n: int) -> float:
    """gamma_n = n u32 / (1 - n u32): the relative error bound of a float32 sum of n terms of one
    sign in any order (Higham, section 4.2)."""
    return n * U32 / (1.0 - n * U32)


def centring_gamma(n: int) -> float:
    """How far a correct float32 centring's subtracted mean may be off, relative to mean|x| over a
    span of n: gamma_n for the mean's sum and division (any order), plus 2 u32 for the fused form
    x a - m a (a = rsqrt(var + eps), PyTorch's CPU layer_norm), whose two products are each rounded
    against |x| a and |m| a rather than against the centred value (budgets.py, "Centring")."""
    return gamma(n) + 2.0 * U32
