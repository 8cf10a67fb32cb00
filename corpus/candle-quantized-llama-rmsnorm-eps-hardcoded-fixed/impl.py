"""The RMSNorm of candle's quantized LLaMA example at 4ee1cf0 (PR #565, "Get the rms epsilon from
GGUF"), written here from reading the Rust, in PyTorch:
  - candle-examples/examples/quantized/main.rs lines 22-39 and 288-320: RmsNorm::new(scale, eps)
    with eps read from the GGUF metadata (llama.attention.layer_norm_rms_epsilon), passed to
    candle_nn::LayerNorm::rms_norm;
  - candle-nn/src/layer_norm.rs (unchanged), LayerNorm::forward without mean removal: x cast to
    float32, the mean of x^2 over the last dim, x divided by sqrt(mean + eps), cast back to the
    input dtype, then multiplied by the weight (Llama's cast).
The example runs its activations in float32; for half inputs the layer's own rule is modelled with
the weight in the input dtype.
"""
import torch
from torch import nn


class RmsNorm(nn.Module):
    def __init__(self, hidden_size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.eps = eps                # from the model file's metadata

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        xf = x.float()
        norm_x = (xf * xf).sum(-1, keepdim=True) / x.shape[-1]
        x_normed = xf / torch.sqrt(norm_x + self.eps)
        return x_normed.to(dtype) * self.weight
