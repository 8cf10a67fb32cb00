"""transformers' FalconH1RMSNormGated (transformers 5.24.0, models/falcon_h1/modeling_falcon_h1.py lines
238-273), called as it is with its defaults n_groups=1 and norm_before_gate=True: the input upcast to
float32, viewed as (batch, seq, groups, dim / groups), each group normalised, the float32 weight applied,
then times silu(gate in float32), rounded once to the input dtype. It takes a 2-D input by treating it
as seq_len 1."""
from transformers.models.falcon_h1.modeling_falcon_h1 import FalconH1RMSNormGated  # noqa: F401
