"""NumPy: plain arrays; bfloat16 through ml_dtypes. Every case's inputs are NumPy arrays."""
from __future__ import annotations

from normdiff.implementations.frameworks.record import Framework

FRAMEWORK = Framework("numpy", modules=("numpy",), extra="", distributions=("numpy", "ml_dtypes"),
                      user_code=True, strides=True)
