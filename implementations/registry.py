"""The registry: the built-in implementations (catalog.py), looked up by name.

Listing the registry imports no framework: the catalog only describes implementations, and each
adapter module is imported inside its worker.
"""
from __future__ import annotations

from functools import lru_cache

from normdiff.harness.data.errors import UsageError
from normdiff.harness.data.names import unknown
from normdiff.implementations import catalog
from normdiff.implementations.entry import Implementation


@lru_cache(maxsize=1)
def _builtins() -> dict[str, Implementation]:
    return {impl.name: impl for impl in catalog.builtin()}


def implementations() -> list[Implementation]:
    return list(_builtins().values())


def get(name: str) -> Implementation:
    if name not in _builtins():
        raise UsageError(unknown("implementation", name, _builtins(), "normdiff list implementations"))
    return _builtins()[name]


def find(name: str) -> Implementation | None:
    """The built-in of this name, or None (a name that may be no built-in: a known finding's library)."""
    return _builtins().get(name)
