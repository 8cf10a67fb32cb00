"""What a user hands normdiff: every file opened as what it must be, every number within bounds.

A file a user names (a suite, a baseline, a checkpoint's .safetensors, .gguf and config.json, the
Python source of a target) is opened by `open_file`: os.stat refuses by name anything that is not
a regular file (a named pipe would block for ever, /dev/zero or /dev/urandom would be read until
memory runs out, a folder cannot be read), then the file is opened without blocking and fstat'ed
again (a pipe swapped in between is refused too). `read_bytes` / `read_text` read at most a stated
number of bytes per kind of file (KINDS) and refuse a larger one before reading it, by its size; a
file whose size lies (/proc) is cut at the limit and refused as well. The parsers' own errors are
the callers' to word (they know the format); a nesting deeper than Python's parsers follow is
`TooDeep`, a ValueError like their other errors.

Every refusal is a UsageError (exit 2) of one line: the file, the problem, the fix.

The numbers: a time limit in seconds (`seconds`: finite, above 0, at most MAX_SECONDS), a seed
(`seed`: 0 .. MAX_SEED, the range every seed normdiff draws itself is in), a count (`whole`) and an
eps (`positive`). The other arguments of the Python API: a yes-or-no (`flag`: True or False, never
'yes' or 1) and a path or name given as a string or a pathlib.Path (`path`).

Pure but for reading the files it is asked to: imports nothing from normdiff but the UsageError
and normdiff.text's byte sizes.
"""
from __future__ import annotations

import json
import math
import numbers
import os
import stat
import sys

from normdiff.harness.data.errors import UsageError
from normdiff.text import byte_size

MiB = 2 ** 20
# The most bytes read of each kind of file: far above any real one, far below a machine's memory.
KINDS = {
    "suite": 16 * MiB,  # cases/suites/default.toml has 16 KiB
    # about 365 bytes a cell (the smoke suite's 80 cells: 29 KB), so the default suite's at most
    # 1490 x 76 cells under 42 MiB; JSON read into Python takes about ten times the file
    "baseline": 512 * MiB,
    "config": 16 * MiB,  # a model's config.json: a few KiB
    "source": 64 * MiB,  # a target's Python file
    "manifest": 16 * MiB,  # a report folder's .normdiff-manifest.json: a list of a few dozen files
}

# what a file that is not a regular one is, in the words strerror uses for a folder
_NOT_REGULAR = ((stat.S_ISDIR, "Is a directory"), (stat.S_ISFIFO, "Is a named pipe (FIFO), not a file"),
                (stat.S_ISCHR, "Is a character device, not a file"),
                (stat.S_ISBLK, "Is a block device, not a file"), (stat.S_ISSOCK, "Is a socket, not a file"))


class InputError(UsageError):
    """A file normdiff was asked to read that cannot be read as what it must be; `why` is the
    problem alone (No such file or directory, Is a named pipe (FIFO), not a file, ...)."""

    def __init__(self, message: str, why: str = ""):
        super().__init__(message)
        self.why = why


def _refused(path, why: str, fix: str) -> InputError:
    return InputError(f"{os.fspath(path)}: cannot read it ({why})" + (f"; {fix}" if fix else ""), why)


def kind_of(mode: int) -> str | None:
    """Why a file of this st_mode cannot be read as a file ('Is a directory', ...), or None for a
    regular file."""
    return next((why for test, why in _NOT_REGULAR if test(mode)), None if stat.S_ISREG(mode) else "Is not a file")


def check_file(path, fix: str = "") -> os.stat_result:
    """The stat of `path` (symbolic links followed), which must be a regular file; InputError
    names it and the problem otherwise (missing, unreadable, a folder, a pipe, a device, a socket)."""
    try:
        st = os.stat(path)
    except OSError as exc:
        raise _refused(path, exc.strerror or type(exc).__name__, fix) from None
    except ValueError as exc:  # a NUL in the name
        raise _refused(path, str(exc), fix) from None
    why = kind_of(st.st_mode)
    if why:
        raise _refused(path, why, fix)
    return st


def open_file(path, fix: str = ""):
    """`path` opened for reading in binary, checked to be a regular file before it is opened and
    again once it is (open never blocks: a pipe swapped in after the first check is refused by
    the second). The caller closes it (a `with` block)."""
    check_file(path, fix)
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise _refused(path, exc.strerror or type(exc).__name__, fix) from None
    try:
        why = kind_of(os.fstat(fd).st_mode)
        if why:
            raise _refused(path, why, fix)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def too_large(path, size: int, kind: str, limit: int, fix: str = "") -> InputError:
    return InputError(f"{os.fspath(path)}: it has {byte_size(size)}; a {kind} file has at most {byte_size(limit)}"
                      + (f": {fix}" if fix else ""), "too large")


def read_bytes(path, kind: str, fix: str = "", limit: int | None = None) -> bytes:
    """The bytes of the regular file `path`, at most KINDS[kind] (or `limit`): a larger file is
    refused by its size before it is read, one whose size lies when more is read than it said."""
    limit = KINDS[kind] if limit is None else limit
    with open_file(path, fix) as fh:
        size = os.fstat(fh.fileno()).st_size
        if size > limit:
            raise too_large(path, size, kind, limit, fix)
        try:
            data = fh.read(limit + 1)
        except OSError as exc:
            raise _refused(path, exc.strerror or type(exc).__name__, fix) from None
    if len(data) > limit:
        raise too_large(path, len(data), kind, limit, fix)
    return data


def read_text(path, kind: str, fix: str = "", limit: int | None = None) -> str:
    """The file's text, UTF-8 (read_bytes's checks first); an undecodable byte is an InputError
    that names its offset."""
    data = read_bytes(path, kind, fix, limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{os.fspath(path)}: not a text file (byte {exc.start} is not UTF-8); a {kind} file is "
                         "UTF-8 text" + (f": {fix}" if fix else ""), "not UTF-8") from None


class TooDeep(ValueError):
    """A document nested deeper than Python's recursive parsers follow (a RecursionError)."""

    def __init__(self):
        super().__init__(f"its values nest deeper than normdiff reads (Python's limit is about "
                         f"{sys.getrecursionlimit()} levels)")


def json_loads(data):
    """json.loads, with a nesting too deep for it a TooDeep (a ValueError, as its other errors)."""
    try:
        return json.loads(data)
    except RecursionError:
        raise TooDeep() from None


def toml_loads(text: str) -> dict:
    """tomllib.loads, with a nesting too deep for it a TooDeep."""
    import tomllib

    try:
        return tomllib.loads(text)
    except RecursionError:
        raise TooDeep() from None


# ---- numbers ------------------------------------------------------------------------------------

MAX_SECONDS = 86400  # one day: a time limit above it is a typo (1e10 would overflow a thread's wait)
MAX_SEED = 2 ** 32 - 1  # the seeds normdiff draws (fuzz, campaigns) are 32-bit; torch takes at most 2**63


def seconds(value, what: str = "timeout") -> float:
    """A time limit in seconds: a finite number above 0 and at most MAX_SECONDS."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise UsageError(f"{what} must be a number of seconds, e.g. 60; got {value!r} ({type(value).__name__})")
    if not math.isfinite(value) or value <= 0:
        raise UsageError(f"{what} must be a finite number of seconds above 0, e.g. 60; got {value!r}")
    if value > MAX_SECONDS:
        raise UsageError(f"{what} must be a number of seconds of at most {MAX_SECONDS} (one day); got {value!r}")
    return float(value)


def whole(value, what: str, least: int = 1, most: int | None = None) -> int:
    """A whole number from `least` to `most` (a bool, a float or a string is refused)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < least or \
            (most is not None and value > most):
        span = f"from {least} to {most}" if most is not None else f">= {least}"
        raise UsageError(f"{what} must be a whole number {span}; got {value!r}")
    return int(value)


def seed(value, what: str = "seed") -> int:
    """A seed: a whole number from 0 to MAX_SEED."""
    return whole(value, what, 0, MAX_SEED)


def positive(value, what: str) -> float:
    """A finite number above 0 (an eps: 0 or NaN would divide by zero or poison every case)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or value <= 0:
        raise UsageError(f"{what} must be a finite number above 0, e.g. 1e-6; got {value!r}")
    return float(value)


def flag(value, what: str) -> bool:
    """A yes-or-no of the Python API: True or False itself ('yes', 1 or None would be read as one)."""
    if not isinstance(value, bool):
        raise UsageError(f"{what} must be True or False; got {value!r} ({type(value).__name__})")
    return value


def path(value, what: str, example: str) -> str:
    """A path or a name, given as a string or a path object (pathlib.Path): its text; an empty one,
    bytes or anything else is refused with `example` (what to give)."""
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str):
        raise UsageError(f"{what} must be {example} (a string or a pathlib.Path); got {value!r} "
                         f"({type(value).__name__})")
    if not value.strip():
        raise UsageError(f"{what} is empty: give {example}")
    return value
