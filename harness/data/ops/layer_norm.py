"""layer_norm: y = (x - mean x) / sqrt(var(x) + eps) * w + b, in torch's F.layer_norm order (centre,
normalise, then w, then + b): GPT-2, GPT-NeoX, Phi, Falcon, StableLM through nn.LayerNorm, Cohere
without a bias, OLMo-1 with neither. Its budget grows with the rows' |mean| / std, the conditioning
of the centring (budgets.py, "Centring"; engine/oracle.py centring_condition)."""
from normdiff.harness.data import knobs as K
from normdiff.harness.data.ops import norm
from normdiff.harness.data.ops.record import BIAS, CENTRED, CENTRED_ONE_ROUNDING, WEIGHT, WEIGHTED_KNOBS, X, Op

OP = Op("layer_norm", "y = (x - mean x) / sqrt(var(x) + eps) * w + b  (GPT-2, GPT-NeoX, Phi, Cohere, OLMo-1)",
        (X, WEIGHT, BIAS), ("x", "weight", "bias", "eps"), WEIGHTED_KNOBS + (K.CENTRE, K.BIAS),
        rounding=CENTRED, relaxed=(("cast", "one_rounding", CENTRED_ONE_ROUNDING),), exact=norm.evaluate, vjp=norm.vjp, order=6)
