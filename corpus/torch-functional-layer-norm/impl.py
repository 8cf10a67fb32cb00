"""torch.nn.functional.layer_norm (torch 2.13.0, torch/nn/functional.py lines 2966-2989), called as it
is: layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5). The second positional
parameter is the shape of the normalised trailing dimensions, a tuple, not the weight."""
from torch.nn.functional import layer_norm  # noqa: F401
