"""rms_norm: y = x / sqrt(mean(x^2) + eps) * w, with w or 1 + w by convention (Llama, Qwen, Gemma,
OLMo2; torch's F.rms_norm). The norm every other op here builds on."""
from normdiff.harness.data.ops import norm
from normdiff.harness.data.ops.record import ROUNDS_ONCE, WEIGHT, WEIGHTED_KNOBS, X, Op

OP = Op("rms_norm", "y = x / sqrt(mean(x^2) + eps) * w  (w or 1 + w by convention)",
        (X, WEIGHT), ("x", "weight", "eps"), WEIGHTED_KNOBS, relaxed=ROUNDS_ONCE, exact=norm.evaluate, vjp=norm.vjp, order=1)
