"""transformers' ChameleonLayerNorm (transformers 5.24.0, models/chameleon/modeling_chameleon.py lines
187-202), called as it is. An nn.LayerNorm subclass built with a shape tuple (Chameleon passes (heads,
head_dim) for its q/k norms; (width,) for a plain row) whose statistics are taken over the last axis only:
F.layer_norm without affine and with eps written as the literal 1e-5, in the input dtype, then times the
weight and plus the bias, each in the input dtype. The constructor's eps argument is stored but unused."""
from transformers.models.chameleon.modeling_chameleon import ChameleonLayerNorm  # noqa: F401
