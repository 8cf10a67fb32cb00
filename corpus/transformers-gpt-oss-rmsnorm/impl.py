"""transformers' GptOssRMSNorm (transformers 5.24.0, models/gpt_oss/modeling_gpt_oss.py lines 47-65),
called as it is: float32 statistic, the weight multiplied before the cast back, so one rounding at the
end (the order OLMo2 uses, and unlike Llama's). GptOssConfig's rms_norm_eps is 1e-5."""
from transformers.models.gpt_oss.modeling_gpt_oss import GptOssRMSNorm  # noqa: F401
