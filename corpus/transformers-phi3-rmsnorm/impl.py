"""transformers' Phi3RMSNorm (transformers 5.24.0, models/phi3/modeling_phi3.py lines 256-274), called
as it is: Llama's RMSNorm (float32 statistic, cast back, then the weight). Phi3Config's rms_norm_eps is
1e-5."""
from transformers.models.phi3.modeling_phi3 import Phi3RMSNorm  # noqa: F401
