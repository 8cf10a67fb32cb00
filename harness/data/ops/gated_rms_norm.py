"""gated_rms_norm: y = rms_norm(x) * w * act(gate), Qwen3.5's (and Qwen3-Next's) linear-attention
output norm. HF rounds it three times, its backward's activation twice more (budgets.py)."""
from normdiff.harness.data import knobs as K
from normdiff.harness.data.ops import norm
from normdiff.harness.data.ops.record import GATE, THREE_ROUNDINGS, WEIGHT, WEIGHTED_KNOBS, X, Op

OP = Op("gated_rms_norm", "y = rms_norm(x) * w * act(gate)  (Qwen3.5 linear attention)",
        (X, GATE, WEIGHT), ("x", "gate", "weight", "eps"), WEIGHTED_KNOBS + (K.GATE,),
        module_call=("x", "gate"), rounding=THREE_ROUNDINGS, exact=norm.evaluate, vjp=norm.vjp, order=2)
