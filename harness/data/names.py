"""The names a user types (ops, conventions, implementations, bugs, regimes, suites, dtypes), read
one way everywhere.

A name is matched on its normal form: lower case, with `-`, `_`, `.` and spaces dropped, so `Qwen3`,
`QWEN-3` and `qwen 3` all read as `qwen3`, and `eps_outside_sqrt` as `eps-outside-sqrt`. A name whose
normal form is exactly one known name's is that name (a person should not be refused over a case or
a separator); any other unknown name is a UsageError that suggests the nearest few, never the whole
list of a long catalogue (85 implementations help no one).
"""
from __future__ import annotations

import difflib
import re
from collections.abc import Iterable

from normdiff.harness.data.errors import UsageError

LISTED_UP_TO = 12  # a catalogue this short is listed whole in the error; a longer one is pointed at
_SEPARATORS = re.compile(r"[-_.\s]+")


def normal(text) -> str:
    """The form two names are compared in: lower case, no separators."""
    return _SEPARATORS.sub("", str(text)).lower()


def canonical(text, known) -> str | None:
    """The known name `text` means (itself, or the one name of the same normal form), else None."""
    names = [str(k) for k in known]
    if str(text) in names:
        return str(text)
    same = [n for n in names if normal(n) == normal(text)]
    return same[0] if len(same) == 1 else None


def nearest(text, known, n: int = 3) -> list[str]:
    """Up to `n` known names close to `text`, the closest first (compared in normal form, so a
    misplaced separator costs nothing and a typo costs its letters)."""
    by_normal: dict[str, str] = {}
    for name in map(str, known):
        by_normal.setdefault(normal(name), name)
    if normal(text) in by_normal:  # the same name but for case and separators: that one, alone
        return [by_normal[normal(text)]]
    close = difflib.get_close_matches(normal(text), list(by_normal), n=n, cutoff=0.6)
    return [by_normal[c] for c in close]


def unknown(kind: str, text, known, listing: str | None = None) -> str:
    """The message for a name that is not known: the problem, then the fix (the nearest names; the
    whole list when short, else the command that lists it)."""
    names = sorted(str(k) for k in known)
    message = f"unknown {kind} {text!r}" if str(text).strip() else f"an empty {kind} name ({text!r})"
    if len(names) <= LISTED_UP_TO:
        message += f"; known: {', '.join(names)}"
    close = nearest(text, names)
    if close:
        message += f"; did you mean {' or '.join(map(repr, close))}?"
    if len(names) > LISTED_UP_TO:
        message += f" ({len(names)} known: {listing or 'normdiff list'} names them all)"
    return message


def resolve(kind: str, text, known, listing: str | None = None, what: str | None = None) -> str:
    """The known name `text` means; a UsageError naming the nearest ones when there is none, and
    naming `what` (the parameter; default: the kind) when it is no string at all."""
    if not isinstance(text, str):
        example = min(map(str, known), key=len, default="")
        raise UsageError(f"{what or kind} must be {'an' if kind[:1] in 'aeiou' else 'a'} {kind} name (a string), e.g. "
                         f"{example!r}; got {text!r} ({type(text).__name__})")
    name = canonical(text, known)
    if name is None:
        raise UsageError(unknown(kind, text, known, listing))
    return name


def several(given, what: str) -> tuple[str, ...]:
    """Names given as one or several: None or () none, 'bfloat16' one (never its letters), a list,
    a tuple or another iterable of strings each; anything else is a UsageError naming `what`."""
    if given is None:
        return ()
    items = (given,) if isinstance(given, str) else given
    if isinstance(items, (bytes, dict)) or not isinstance(items, Iterable):
        items = None
    else:
        items = tuple(items)
    if items is None or not all(isinstance(n, str) for n in items):
        raise UsageError(f"{what} must be a name or a list of names (strings); got {given!r} ({type(given).__name__})")
    return items
