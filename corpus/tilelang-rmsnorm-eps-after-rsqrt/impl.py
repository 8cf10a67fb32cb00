"""A model of TileLang's RMSNorm example kernel at 6882bd5 (examples/norm/rms_norm.py, the one-block
`rms_norm` kernel, lines 36-59), written here from reading it, in PyTorch.

The kernel is declared on float32 tensors only (its dtype is "float"); a caller with bf16 / fp16
activations would convert them to float32 and back, which the model does around the kernel. Per row:
  1. the row is copied to local memory and each element squared, in float32;
  2. a block reduction sums the squares (float32);
  3. the sum is divided by the width and its reciprocal square root taken, and only then the literal
     1e-12 is added to that reciprocal (eps outside the root, on the inverse: PR #1243 moved it
     inside);
  4. every element is multiplied by it, float32, and the row copied out. There is no weight.
"""
import torch


def rms_norm(x):
    in_dtype = x.dtype
    a = x.to(torch.float32)
    n = a.shape[-1]
    powsum = (a * a).sum(dim=-1, keepdim=True)      # 1-2. float32 squares and block sum
    scale = torch.rsqrt(powsum / n) + 1e-12          # 3. eps added after the reciprocal root
    return (a * scale).to(in_dtype)                  # 4. no weight
