"""Ctrl-C, SIGTERM and SIGHUP as one exception, so that every `finally` runs on the way out.

Python turns SIGINT into KeyboardInterrupt but lets SIGTERM and SIGHUP end the process on the spot:
no worker killed, no temporary file removed, nothing computed written. With `handled()` all three
raise `Interrupted` in the main thread. The engine catches it, ends its workers and re-raises it
with what it had computed (`partial`), so the command line can write that, marked incomplete, and
exit 128 + the signal's number (130 for Ctrl-C), as a shell does. Pure: imports nothing from
normdiff.
"""
from __future__ import annotations

import contextlib
import signal
import threading

SIGNALS = tuple(s for s in (getattr(signal, n, None) for n in ("SIGINT", "SIGTERM", "SIGHUP")) if s is not None)


class Interrupted(KeyboardInterrupt):
    """The run was stopped by a signal; `partial` holds what was computed (set on the way out)."""

    def __init__(self, signum: int = signal.SIGINT, partial=None):
        super().__init__(signum)
        self.signum = signum
        self.partial = partial

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def as_interrupted(exc: KeyboardInterrupt) -> Interrupted:
    """A plain KeyboardInterrupt (raised before the handlers were installed) as an Interrupted."""
    return exc if isinstance(exc, Interrupted) else Interrupted(signal.SIGINT)


def _raise(signum, frame):
    raise Interrupted(signum)


@contextlib.contextmanager
def handled():
    """Within the block, SIGINT, SIGTERM and SIGHUP raise Interrupted (main thread only: elsewhere
    Python cannot install handlers, and the caller keeps its own)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, _raise) for s in SIGNALS}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
