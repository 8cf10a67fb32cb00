"""add_rms_norm: vLLM's and SGLang's fused_add_rms_norm: h = x + residual, y = rms_norm(h); returns
(y, residual_out = h), both judged. The sum is rounded to the input dtype before the norm (HF's
unfused decoder: one rounding more in its chain) or kept in float32 (vLLM's native path: the plain
norm's chain) by convention; residual_out is h in the input dtype (budgets.py)."""
from normdiff.harness.data import knobs as K
from normdiff.harness.data.ops import norm
from normdiff.harness.data.ops.record import RESIDUAL, RESIDUAL_SUM, SINGLE, WEIGHT, WEIGHTED_KNOBS, X, Op

OP = Op("add_rms_norm", "h = x + residual; y = rms_norm(h) * w; returns (y, residual_out = h)  (vLLM, SGLang)",
        (X, RESIDUAL, WEIGHT), ("x", "residual", "weight", "eps"), WEIGHTED_KNOBS + (K.RESIDUAL,),
        module_call=("x", "residual"), rounding=RESIDUAL_SUM, relaxed=(("residual_dtype", "float32", SINGLE),),
        results=("y", "residual_out"), exact=norm.evaluate, vjp=norm.vjp, order=7)
