"""equinox.nn.RMSNorm (equinox 0.13.8, equinox/nn/_normalisation.py lines 286-408), called as it is:
RMSNorm(shape, eps=1e-5, use_weight=True, use_bias=True, dtype=None). An equinox module takes one
example of exactly `shape`; normdiff vmaps it over the rows, as equinox's users do."""
from equinox.nn import RMSNorm  # noqa: F401
