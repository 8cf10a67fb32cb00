"""mlx.nn.LayerNorm (mlx 0.32.4, python/mlx/nn/layers/normalization.py lines 86-130), called as it is
with affine=False: LayerNorm(dims, eps=1e-5, affine=True, bias=True). Without affine it holds no weight
and no bias and calls mx.fast.layer_norm(x, None, None, eps): the non-parametric LayerNorm of OLMo-1."""
from mlx.nn import LayerNorm  # noqa: F401
