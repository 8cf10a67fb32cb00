"""keras.ops.layer_normalization (keras 3.15.1, keras/src/ops/nn.py lines 3079-3134), called as it is:
layer_normalization(x, gamma=None, beta=None, axis=-1, epsilon=None). Its weight is `gamma` and its
bias `beta` (keras' names), and epsilon defaults to keras' backend epsilon (1e-7) when not given."""
from keras.ops import layer_normalization  # noqa: F401
