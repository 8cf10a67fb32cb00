"""group_gated_rms_norm: Mamba2's MambaRMSNormGated (Bamba, Zamba2, NemotronH): x * silu(gate), then
an RMSNorm over each group of group_size channels (a case's "heads" are the groups), the weight over
the whole width. Rounded three times, as the gated norm."""
from normdiff.harness.data import knobs as K
from normdiff.harness.data.ops import norm
from normdiff.harness.data.ops.record import GATE, GROUP_DIMS, THREE_ROUNDINGS, WEIGHT, WEIGHTED_KNOBS, X, Op

OP = Op("group_gated_rms_norm", "y = rms_norm_per_group(x * silu(gate)) * w  (Mamba2 MambaRMSNormGated)",
        (X, GATE, WEIGHT), ("x", "gate", "weight", "group_size", "eps"), WEIGHTED_KNOBS + (K.GATE, K.SCOPE),
        module_call=("x", "gate"), dims=GROUP_DIMS, rounding=THREE_ROUNDINGS, span_name="group",
        exact=norm.evaluate, vjp=norm.vjp, order=8)
