"""The pytest plugin: a `normdiff` fixture so a user's own test suite runs the same check.

    def test_my_norm(normdiff):
        normdiff.check(my_rms_norm, op="rms_norm", convention="qwen3")

fails when the function disagrees: pytest's one-line summary names the verdict and the bug
("normdiff check my_norm.py:f: disagrees, eps-outside-sqrt (24 of 78 cases)"), the body gives the
fix, the worst case and its `normdiff repro` command; and

    def test_my_norm_fuzzed(normdiff):
        normdiff.fuzz(my_rms_norm, op="rms_norm", convention="qwen3", max_examples=200)

fuzzes it as `normdiff fuzz --with` does (Hypothesis, shrinking), failing with the minimal case and
its `normdiff repro` command. Registered through the `pytest11` entry point, so installing normdiff
is all it takes.
"""
from __future__ import annotations

import inspect
import os
import warnings

import pytest


class Checker:
    def __init__(self, suite: str = "default", timeout: float = 60.0):
        self.suite, self.timeout = suite, timeout

    def _options(self, said: str, op, convention, framework, call_: str, init: str, weight_attr: str, timeout,
                 dtype, regimes, **more) -> tuple:
        """The keywords every check and fuzz takes, checked before any work as the CLI checks its
        options (a name read as the CLI reads it: 'RMS_norm' is rms_norm): (op, convention,
        framework, timeout, dtype, regimes); a wrong one fails the test with `said` (what cannot be
        done to which target), which keyword, what it got and what it takes. `more`: the call's own
        keywords, by name, that must be True or False."""
        from normdiff.harness.data import inputs, names
        from normdiff.harness.data.conventions import CONVENTIONS
        from normdiff.harness.data.errors import UsageError
        from normdiff.harness.data.ops import OPS
        from normdiff.implementations.frameworks import user_frameworks

        try:
            op = names.resolve("op", op, OPS, what="op")
            if convention is not None:
                convention = names.resolve("convention", convention, CONVENTIONS, "normdiff list conventions",
                                           what="convention")
            if framework is not None:
                framework = names.resolve("framework", framework, user_frameworks(), what="framework")
            for keyword, value in (("call", call_), ("init", init), ("weight_attr", weight_attr)):
                if not isinstance(value, str):
                    raise UsageError(f"{keyword} must be a string (a template such as 'f(x, weight, eps=eps)', or "
                                     f"'' for none); got {value!r} ({type(value).__name__})")
            for keyword, value in more.items():
                inputs.flag(value, keyword)
            timeout = inputs.seconds(timeout, "timeout") if timeout is not None else None
            dtype, regimes = names.several(dtype, "dtype"), names.several(regimes, "regimes")
        except UsageError as exc:
            _fail(f"{said}: {exc}")
        return op, convention, framework, timeout, dtype, regimes

    def check(self, fn, op: str, convention: str | None = None, suite: str | None = None,
              framework: str | None = None, eps: float | None = None, call: str = "", init: str = "",
              weight_attr: str = "", dtype=(), regimes=(), timeout: float | None = None, dtypes=None):
        """Run `fn` (a module-level function or class, a library's function such as
        mx.fast.rms_norm, or a target string as `normdiff check` takes it) and fail the test unless
        it agrees with the convention; returns the CheckResult. The keywords are check's options
        (`dtype`, as --dtype, and `regimes` one name or a list; `timeout` seconds per call;
        `dtypes`, the old name of `dtype`, still works with a DeprecationWarning). The convention is
        required: a test that passed under whichever convention the code agrees with would pass
        still when the code drifts from one convention to another (the CLI's check without
        --convention finds the ones it agrees with)."""
        from normdiff.harness.commands import check, usercode
        from normdiff.harness.data.errors import UsageError

        if convention is None:
            _fail("normdiff.check needs convention=, the convention your code claims (e.g. convention='qwen3'), so "
                  "that the test fails if it drifts to another; to find the ones it agrees with, run: normdiff check "
                  f"TARGET --op {op} (without --convention)")
        try:
            target = _target(fn)
        except TypeError as exc:
            _fail(f"normdiff cannot check {fn!r}: {exc}")
        op, convention, framework, timeout, dtype, regimes = self._options(
            f"normdiff cannot run {_shown(target)}", op, convention, framework, call, init, weight_attr, timeout,
            _dtype(dtype, dtypes), regimes)
        try:
            impl = usercode.user_implementation(target, op, convention, framework, call=call, init=init,
                                                weight_attr=weight_attr)
            result = check.check(impl, suite or self.suite, timeout=timeout or self.timeout, eps=eps, dtypes=dtype,
                                 regimes=regimes)
        except (usercode.TargetError, UsageError) as exc:
            _fail(f"normdiff cannot run {_shown(target)}: {exc}")
        if result.verdict != "agrees":
            # pytest's short summary shows the first line: the verdict and the bug; the body the rest
            shown = _shown(target)
            _fail(f"{check.summary(result, shown)}\n{check.describe(result, shown)}")
        return result


    def fuzz(self, fn, op: str, convention: str, max_examples: int | None = 100, max_time: float | None = None,
             seed: int | None = None, framework: str | None = None, call: str = "", init: str = "",
             weight_attr: str = "", dtype=(), regimes=(), passes: str | None = None, max_rows: int | None = None,
             max_width: int | None = None, timeout: float | None = None, database: bool = True, dtypes=None):
        """Fuzz `fn` (as for `check`) with Hypothesis for `max_examples` examples (or `max_time`
        seconds) and fail the test with the shrunk minimal case and its repro command when one fails;
        returns the FuzzResult. `seed` repeats a run's examples; the example database (normdiff's
        cache) makes the next run try a failure first. `dtype` as for `check`."""
        from normdiff.harness.commands import fuzz, usercode
        from normdiff.harness.data.errors import UsageError

        try:
            target = _target(fn)
        except TypeError as exc:
            _fail(f"normdiff cannot fuzz {fn!r}: {exc}")
        op, convention, framework, timeout, dtype, regimes = self._options(
            f"normdiff cannot fuzz {_shown(target)}", op, convention, framework, call, init, weight_attr, timeout,
            _dtype(dtype, dtypes), regimes, database=database)
        if convention is None:
            _fail("normdiff.fuzz needs convention=, the convention your code claims (e.g. convention='qwen3')")
        limits = {k: v for k, v in (("max_rows", max_rows), ("max_width", max_width)) if v is not None}
        try:
            impl = usercode.user_implementation(target, op, convention, framework, call=call, init=init,
                                                weight_attr=weight_attr)
            result = fuzz.fuzz([impl], dtypes=dtype, regimes=regimes, passes=passes,
                               max_examples=max_examples, max_time=max_time, seed=seed,
                               timeout=timeout or min(self.timeout, fuzz.DEFAULT_TIMEOUT), database=database,
                               **limits)
        except (usercode.TargetError, UsageError) as exc:
            _fail(f"normdiff cannot fuzz {_shown(target)}: {exc}")
        if result.found:
            _fail(fuzz.describe(result))
        return result


def _fail(message: str):
    """Fail the test with `message` and no traceback: not normdiff's (pytrace=False), nor the
    exception it was raised while handling (`from None`: a usage error is said once, not chained)."""
    raise pytest.fail.Exception(message, pytrace=False) from None


def _dtype(dtype, dtypes):
    """`dtype`, the CLI's --dtype; `dtypes`, its old name here, still taken with a warning."""
    if dtypes is None:
        return dtype
    if dtype:
        _fail("give dtype= only: dtypes= is its old name")
    warnings.warn("the normdiff fixture's dtypes= is deprecated: use dtype=, as the CLI's --dtype", DeprecationWarning,
                  stacklevel=3)
    return dtypes


def _shown(target: str) -> str:
    """The target as a user reads it in a one-line summary: its file relative to the directory
    pytest runs in when it lies there (the whole path otherwise: it still locates the file)."""
    path, sep, name = target.rpartition(":")
    if not sep or not os.path.isabs(path):
        return target
    relative = os.path.relpath(path)
    return target if relative.startswith("..") else f"{relative}:{name}"


def _target(fn) -> str:
    """The target string of what a test hands check or fuzz: a target string or a path object
    (a graph's .onnx file) as it is, a function or a class by where it is defined (target_of)."""
    if isinstance(fn, (str, os.PathLike)):
        given = os.fspath(fn)
        if not isinstance(given, str) or not given.strip():
            raise TypeError("an empty target: pass the function itself or a target string 'FILE.py:NAME'")
        return given
    return target_of(fn)


def target_of(fn) -> str:
    """'FILE.py:NAME' for a module-level function or class (the worker process imports it there);
    'module:NAME' for a compiled one (a library's: mlx.core.fast:rms_norm)."""
    if not callable(fn):
        raise TypeError(f"it is a value of type {type(fn).__name__}, not a function or a class: pass the function itself "
                        "or a target string 'FILE.py:NAME'")
    fn = inspect.unwrap(fn)  # jax.jit and functools.wraps keep the original in __wrapped__
    name = getattr(fn, "__qualname__", "") or getattr(fn, "__name__", "")
    if getattr(fn, "__module__", None) == "builtins" or inspect.isbuiltin(fn) and not getattr(fn, "__module__", None):
        raise TypeError(f"{name} is a Python built-in, not a normalization: pass your own function")
    if not name or "<" in name or "." in name:
        raise TypeError(f"normdiff.check needs a module-level function or class (got {name or fn!r}): "
                        "it runs in a separate process, which imports it from its file")
    try:
        source = inspect.getsourcefile(fn)
    except TypeError:  # compiled: no source file
        source = None
    if source:
        return f"{source}:{name}"
    module = getattr(fn, "__module__", None)
    if not module or module == "__main__":
        raise TypeError(f"normdiff.check cannot tell where {name} comes from; give it as 'module:NAME'")
    return f"{module}:{name}"


@pytest.fixture
def normdiff() -> Checker:
    """Checks an implementation with `normdiff.check(fn, op=..., convention=...)`, fuzzes it with
    `normdiff.fuzz(fn, op=..., convention=..., max_examples=...)`."""
    return Checker()
