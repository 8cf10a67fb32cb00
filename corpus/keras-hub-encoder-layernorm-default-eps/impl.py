"""The LayerNorms of KerasNLP's TransformerEncoder at a6a3656 (keras_nlp/layers/transformer_encoder.py):
the encoder takes layer_norm_epsilon (default 1e-5, lines 77 and 88) but builds its two sublayers as
keras.layers.LayerNormalization() with no epsilon (lines 107-108), so they run at Keras' default,
1e-3 (keras-hub PR #133, "Actually use layer norm epsilon in encoder/decoder").

Modelled here as the sublayer the encoder builds: Keras' own LayerNormalization (the installed
Keras 3; tf.keras 2 at the time had the same formula and the same 1e-3 default), constructed the way
line 107 constructs it, whatever layer_norm_epsilon the encoder was given.
"""
import keras


class EncoderLayerNorm(keras.layers.LayerNormalization):
    def __init__(self, layer_norm_epsilon=1e-5, **kwargs):
        super().__init__(**kwargs)          # line 107: no epsilon, so Keras' default 1e-3
        self.layer_norm_epsilon = layer_norm_epsilon
