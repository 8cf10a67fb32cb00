"""transformers' FalconMambaWeightlessRMSNorm (transformers 5.24.0,
models/falcon_mamba/modeling_falcon_mamba.py lines 47-61), called as it is: an RMSNorm with no weight
(it holds an all-ones buffer only to mimic the kernels' signature, unused), the statistic and scaling in
float32, cast back with type_as. FalconMamba applies it to B, C and dt with mixer_rms_eps = 1e-6."""
from transformers.models.falcon_mamba.modeling_falcon_mamba import FalconMambaWeightlessRMSNorm  # noqa: F401
