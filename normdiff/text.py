"""How normdiff writes a number for a person: one formatter for every report, message and command.

Pure: imports nothing from normdiff.
"""
from __future__ import annotations

import math
import numbers

import numpy as np


def number(value, digits: int = 3, missing: str = "") -> str:
    """`value` with `digits` significant digits; `missing` for None and NaN; integers and booleans
    as they are; anything else as its str."""
    if value is None:
        return missing
    if isinstance(value, (bool, np.bool_)):
        return str(bool(value))
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if isinstance(value, numbers.Real):
        value = float(value)
        return missing if math.isnan(value) else f"{value:.{digits}g}"
    return str(value)
