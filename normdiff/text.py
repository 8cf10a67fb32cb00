"""How normdiff writes a number for a person: the named formats every report, message and command
uses (`number`, `precise`, `general`, `fixed`, `share`, `seconds`, `ulps`, `columns`), so that no
module spells a format of its own; and how it prints text it was given (names, exception text,
stderr) without letting it act on a terminal (`printable`), clipped to a stated length (`clipped`). The sentences that compare an error
with its budget are built from these in normdiff/wording.py.

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


def precise(value, missing: str = "-") -> str:
    """`number` with six significant digits and '-' where there is none: the figures a replay lists
    in full ('max_ulp 121.375', 'rel_l2 0.0123457')."""
    return number(value, 6, missing=missing)


def general(value) -> str:
    """Python's general format ('g': six significant digits, no trailing zeros, an exponent from
    1e+06 up and below 1e-04), as a value someone set is written: an eps ('1e-06'), a theta ('1e+06'), a
    weight offset ('1'), a timeout in seconds, a budget as configured. Exactly f"{value:g}"; unlike
    `number`, an integer gets the same form as a float."""
    return f"{value:g}"


def fixed(value, places: int) -> str:
    """`value` with `places` digits after the point: a cosine ('0.999998'), a time ('1.234')."""
    return f"{value:.{places}f}"


def share(value, digits: int = 0) -> str:
    """A fraction as a percentage: 0.99 -> '99%', with `digits` after the point."""
    return f"{value:.{digits}%}"


def seconds(value, places: int = 1) -> str:
    """A duration: '18.2 s'."""
    return f"{fixed(value, places)} s"


def ulps(value, digits: int = 3, missing: str = "") -> str:
    """An error in ULPs: '43.6 ulp' (`number`'s digits and `missing`)."""
    return f"{number(value, digits, missing=missing)} ulp"


def columns(values, width: int, digits: int) -> str:
    """Numbers as right-aligned columns `width` wide with `digits` significant digits, one space
    apart: the rows of a side-by-side ('    0.1235     -1.235'); 'nan' and 'inf' as such."""
    return " ".join(f"{v:>{width}.{digits}g}" for v in values)


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


SHOWN = 1000  # the characters of a text normdiff was given (an exception's message) shown in one place


def clipped(text, limit: int = SHOWN) -> str:
    """`text` (any value, as its str) of at most `limit` characters, and what is left out counted:
    an exception's 5 MB message is shown as its first `limit` characters, then '... (5241880 more
    characters)'. Text within the limit comes back unchanged."""
    text = str(text)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text) - limit} more characters)"


_ESCAPE = "normdiff.escape"


def unbreakable_streams() -> None:
    r"""Let stdout and stderr print any text: a character their encoding lacks (ASCII under LANG=C
    with PYTHONUTF8=0, PYTHONIOENCODING=ascii) is written as its backslash escape ('é' as '\xe9',
    as Python writes it in a string) instead of raising UnicodeEncodeError; a byte that came
    undecoded from a file name (surrogateescape) is written as that byte, as before."""
    import codecs
    import sys

    try:
        codecs.lookup_error(_ESCAPE)
    except LookupError:
        codecs.register_error(_ESCAPE, _escape)
    for stream in (sys.stdout, sys.stderr):
        if getattr(stream, "errors", None) in ("strict", "surrogateescape") and hasattr(stream, "reconfigure"):
            try:
                stream.reconfigure(errors=_ESCAPE)
            except (ValueError, OSError):  # a stream already closed, or not a text file underneath
                pass


def _escape(exc: UnicodeError):
    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    char = exc.object[exc.start]
    if "\udc80" <= char <= "\udcff":  # surrogateescape's stand-in for an undecodable byte
        return bytes([ord(char) - 0xDC00]), exc.start + 1
    return char.encode("ascii", "backslashreplace").decode("ascii"), exc.start + 1
