"""qk_norm_rope: Qwen3's per-head QK-Norm followed by rotary position embedding in rotate_half form at
the case's token positions, with float32 angles as HF computes them (rope.py). A norm module cannot
take the positions (RoPE is not its business), so it has no class protocol. Errors are counted at
the magnitude of each rotated channel pair (engine/judge.py, "rotation_pair"); the rotation's
roundings have a chain of their own (budgets.py)."""
from normdiff.harness.data import knobs as K
from normdiff.harness.data.ops import norm
from normdiff.harness.data.ops.record import HEAD_DIMS, POSITIONS, ROTATION, WEIGHT, WEIGHTED_KNOBS, X, Op

OP = Op("qk_norm_rope", "per-head QK-Norm, then rotary position embedding (rotate_half form; Qwen3 attention)",
        (X, WEIGHT, POSITIONS), ("x", "weight", "positions", "num_heads", "eps"),
        WEIGHTED_KNOBS + (K.SCOPE, K.ROPE), module_call=None, dims=HEAD_DIMS, rounding=ROTATION,
        ulp_at="rotation_pair", even_head_dim=True, exact=norm.evaluate, vjp=norm.vjp, order=5)
