"""A model of KerasNLP's Gemma RMSNormalization at 9af2981 (keras_nlp/models/gemma/rms_normalization.py,
lines 19-40), written here from reading it, as a Keras 3 layer.

The layer takes an `epsilon` argument and stores it, but its call adds the literal 1e-6 to the
variance instead (keras-hub PR #1472 makes it use self.epsilon).

call, step by step:
  1. x and the scale weight cast to float32;
  2. the mean of the squares of x over the last axis, in float32;
  3. x times the reciprocal of sqrt(mean + 1e-6): the literal, not self.epsilon;
  4. times (1 + scale), in float32;
  5. cast once to the layer's compute dtype.
The weight is created at build time with zeros (Gemma's zero-centred scale).
"""
import keras
from keras import ops


class RMSNormalization(keras.layers.Layer):
    def __init__(self, epsilon=1e-6, **kwargs):
        super().__init__(**kwargs)
        self.epsilon = epsilon

    def build(self, input_shape):
        self.scale = self.add_weight(name="scale", shape=(input_shape[-1],), initializer="zeros", trainable=True)
        self.built = True

    def call(self, x):
        xf = ops.cast(x, "float32")                                    # 1.
        gain = 1 + ops.cast(self.scale, "float32")
        mean_square = ops.mean(ops.square(xf), axis=-1, keepdims=True)  # 2.
        y = xf * ops.reciprocal(ops.sqrt(mean_square + 1e-06))         # 3. the literal eps
        return ops.cast(y * gain, self.compute_dtype)                  # 4-5. one rounding
