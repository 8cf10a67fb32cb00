"""The LayerNorms of KerasNLP's TransformerEncoder at 6537de9 (PR #133, "Actually use layer norm
epsilon in encoder/decoder"): keras_nlp/layers/transformer_encoder.py lines 107-112 build both
sublayers as keras.layers.LayerNormalization(epsilon=self.layer_norm_epsilon).

Modelled here as the sublayer the encoder builds: Keras' own LayerNormalization (the installed
Keras 3; tf.keras 2 at the time had the same formula), constructed as the fixed lines construct it.
"""
import keras


class EncoderLayerNorm(keras.layers.LayerNormalization):
    def __init__(self, layer_norm_epsilon=1e-5, **kwargs):
        super().__init__(epsilon=layer_norm_epsilon, **kwargs)   # the encoder's epsilon passed on
        self.layer_norm_epsilon = layer_norm_epsilon
