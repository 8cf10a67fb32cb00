"""equinox.nn.LayerNorm (equinox 0.13.8, equinox/nn/_normalisation.py lines 17-162), called as it is:
LayerNorm(shape, eps=1e-5, use_weight=True, use_bias=True, dtype=None), one example at a time
(normdiff vmaps it over the rows)."""
from equinox.nn import LayerNorm  # noqa: F401
