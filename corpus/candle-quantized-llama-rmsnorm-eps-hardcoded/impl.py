"""The RMSNorm of candle's quantized (GGUF / GGML) LLaMA example at 0f4ff8a, written here from reading
the Rust, in PyTorch:
  - candle-examples/examples/quantized/main.rs lines 22-39: RmsNorm::new dequantizes the scale and
    builds candle_nn::LayerNorm::rms_norm(scale, 1e-5): a literal eps, whatever the model file
    says (the GGUF metadata carries llama.attention.layer_norm_rms_epsilon: 1e-6 for LLaMA-1);
  - candle-nn/src/layer_norm.rs lines 100-123, LayerNorm::forward without mean removal: x cast to
    float32 (from f16 / bf16), the mean of x^2 over the last dim, x divided by sqrt(mean + eps),
    cast back to the input dtype, then multiplied by the weight (Llama's cast).
The example runs its activations in float32; for half inputs the layer's own rule is modelled with
the weight in the input dtype. Fixed by PR #565 (the eps read from the GGUF metadata).
"""
import torch
from torch import nn


class RmsNorm(nn.Module):
    def __init__(self, hidden_size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.eps = 1e-5               # RmsNorm::new: LayerNorm::rms_norm(scale, 1e-5); eps never reaches it

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        xf = x.float()
        norm_x = (xf * xf).sum(-1, keepdim=True) / x.shape[-1]
        x_normed = xf / torch.sqrt(norm_x + self.eps)
        return x_normed.to(dtype) * self.weight
