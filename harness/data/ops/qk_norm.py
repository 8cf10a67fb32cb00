"""qk_norm: an RMSNorm of q or k over each head (Qwen3, weight of head_dim shared by the heads) or
over the whole H*D vector (OLMo2); the scope is a knob, so taking the wrong one is a bug."""
from normdiff.harness.data import knobs as K
from normdiff.harness.data.ops import norm
from normdiff.harness.data.ops.record import ROUNDS_ONCE, HEAD_DIMS, WEIGHT, WEIGHTED_KNOBS, X, Op

OP = Op("qk_norm", "RMSNorm of q/k over each head (Qwen3) or the whole H*D vector (OLMo2)",
        (X, WEIGHT), ("x", "weight", "num_heads", "eps"), WEIGHTED_KNOBS + (K.SCOPE,), dims=HEAD_DIMS,
        relaxed=ROUNDS_ONCE, exact=norm.evaluate, vjp=norm.vjp, order=4)
