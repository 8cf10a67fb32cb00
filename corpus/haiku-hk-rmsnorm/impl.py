"""haiku.RMSNorm (dm-haiku 0.0.17, haiku/_src/rms_norm.py lines 44-133), called as it is: constructed
inside hk.transform with axis=-1 (and eps), init then apply with the case's weight as its `scale`
param. Its scale param is created in the input's dtype and every step runs in that dtype."""
from haiku import RMSNorm  # noqa: F401
