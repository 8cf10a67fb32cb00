"""haiku.LayerNorm (dm-haiku 0.0.17, haiku/_src/layer_norm.py lines 66-208), called as it is:
constructed inside hk.transform with axis=-1, create_scale=True, create_offset=True (required, no
default) and eps; init then apply with the case's weight and bias as its `scale` and `offset`
params, which it creates in the input's dtype. Mean and two-pass variance in the input dtype."""
from haiku import LayerNorm  # noqa: F401
