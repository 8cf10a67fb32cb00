"""How normdiff writes a number for a person: one formatter for every report, message and command;
and how it prints text it was given (names, exception text, stderr) without letting it act on a
terminal (`printable`).

Pure: imports nothing from normdiff.
"""
from __future__ import annotations

import math
import numbers
import re

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


def byte_size(count: float) -> str:
    """A size in bytes for a person: '50.5 GiB', '4 GiB', '812 B' (three significant digits)."""
    count = float(count)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if count < 1024 or unit == "TiB":
            return f"{number(count)} {unit}"
        count /= 1024


# Characters a terminal (or a log viewer) acts on instead of showing: C0 controls and DEL, C1
# controls (U+0080-U+009F: U+009B is a CSI on some terminals), the Unicode line and paragraph
# separators, the bidirectional overrides and isolates that reorder what is shown, and lone
# surrogates (undecodable bytes of a command's output: no UTF-8 stream can carry them).
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
                      "\ud800-\udfff]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def visible(char: str) -> str:
    r"""One control character as text: '\n', '\r', '\t', else '\xNN' or '\uNNNN'."""
    code = ord(char)
    return _NAMED.get(char) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


def printable(text, newlines: bool = True) -> str:
    r"""`text` (any value, as its str) safe to print: every control character shown as an escape
    (an ANSI sequence '\x1b[31m' prints as those characters, a BEL as '\x07', a carriage return as
    '\r'), so user-derived text (names, exception text, a command's stderr) cannot move the cursor,
    clear the screen, recolour or overwrite what is printed. With `newlines` (text that is
    multi-line by design) '\n' and '\t' stay as they are; without (a name, one table cell) they
    are escaped too. Text with nothing to escape comes back unchanged."""
    text = str(text)
    keep = "\n\t" if newlines else ""
    return _CONTROL.sub(lambda m: m.group() if m.group() in keep else visible(m.group()), text)
