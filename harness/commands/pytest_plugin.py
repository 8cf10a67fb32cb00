"""The pytest plugin: a `normdiff` fixture so a user's own test suite runs the same check.

    def test_my_norm(normdiff):
        normdiff.check(my_rms_norm, op="rms_norm", convention="qwen3")

fails with the diagnosed bug, its fix and the worst case when the function disagrees. Registered
through the `pytest11` entry point, so installing normdiff is all it takes.
"""
from __future__ import annotations

import inspect

import pytest


class Checker:
    def __init__(self, suite: str = "default", timeout: float = 60.0):
        self.suite, self.timeout = suite, timeout

    def check(self, fn, op: str, convention: str, suite: str | None = None, framework: str | None = None,
              eps: float | None = None):
        """Run `fn` (a module-level function or class, or a 'FILE.py:NAME' target) and fail the test
        unless it agrees with the convention; returns the CheckResult."""
        from normdiff.harness.commands import check, usercode

        target = fn if isinstance(fn, str) else target_of(fn)
        try:
            impl = usercode.user_implementation(target, op, convention, framework)
            result = check.check(impl, suite or self.suite, timeout=self.timeout, eps=eps)
        except usercode.TargetError as exc:
            pytest.fail(f"normdiff cannot run {target}: {exc}", pytrace=False)
        if result.verdict != "agrees":
            pytest.fail(check.describe(result, target), pytrace=False)
        return result


def target_of(fn) -> str:
    """'FILE.py:NAME' for a module-level function or class (the worker process imports it there)."""
    fn = inspect.unwrap(fn)  # jax.jit and functools.wraps keep the original in __wrapped__
    name = getattr(fn, "__qualname__", "")
    if not name or "<" in name or "." in name:
        raise TypeError(f"normdiff.check needs a module-level function or class (got {name or fn!r}): "
                        "it runs in a separate process, which imports it from its file")
    return f"{inspect.getsourcefile(fn)}:{name}"


@pytest.fixture
def normdiff() -> Checker:
    """Checks an implementation with `normdiff.check(fn, op=..., convention=...)`."""
    return Checker()
