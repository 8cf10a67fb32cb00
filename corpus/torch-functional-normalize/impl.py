"""torch.nn.functional.normalize (torch 2.13.0, torch/nn/functional.py lines 6070-6104), called as it
is: normalize(input, p=2.0, dim=1, eps=1e-12, out=None) divides by the p-norm along dim clamped below at
eps (x / max(norm, eps)), in the input dtype. For a 2-D (rows, width) input its default dim=1 is the
last axis."""
from torch.nn.functional import normalize  # noqa: F401
