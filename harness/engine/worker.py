"""The worker process: runs implementations of one framework, one call at a time.

Started by `pool.Worker` as `python -m normdiff.harness.engine.worker READ_FD WRITE_FD`. Requests and
replies travel as pickled messages over two private pipes, so an implementation that prints to
stdout cannot corrupt the protocol (stdout is pointed at stderr, which the parent logs). Anything
an implementation does wrong comes back as a reply; only a hard crash (segfault, os._exit) or a hang
is left for the parent to notice, and it turns those into `crashed` / `timeout` outcomes.

Messages:
    ("load", Implementation)                       -> ("ok", None, seconds) | ("unavailable", reason)
    ("call", Implementation, op, Contract, CaseInputs) -> ("ok", ndarray, seconds)
                                                      | ("error", message) | ("unavailable", reason)
The worker ends when its request pipe closes (the parent kills it at the end of a run).
"""
from __future__ import annotations

import os
import sys
import time
import traceback
from multiprocessing.connection import Connection

from normdiff.implementations.frameworks import FRAMEWORKS, to_numpy
from normdiff.implementations.loading import load_entry

_adapters: dict[str, object] = {}


def _adapter(impl):
    if impl.name not in _adapters:
        FRAMEWORKS[impl.framework].setup()  # e.g. KERAS_BACKEND, before its first import
        entry = load_entry(impl.entry)
        _adapters[impl.name] = entry(**dict(impl.params)) if impl.params else entry
    return _adapters[impl.name]


def _describe(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""
    return f"{type(exc).__name__}: {exc}{where}"


def handle(message: tuple) -> tuple:
    kind = message[0]
    impl = message[1]
    start = time.perf_counter()
    try:
        adapter = _adapter(impl)
    except ImportError as exc:
        return ("unavailable", f"cannot import {impl.entry}: {_describe(exc)}")
    except Exception as exc:  # an error inside the module that defines the implementation
        return ("error", f"loading {impl.name} failed: {_describe(exc)}")
    if kind == "load":
        return ("ok", None, time.perf_counter() - start)
    _, _, op, contract, inputs = message
    try:
        out = to_numpy(adapter(op, contract, inputs))
    except Exception as exc:
        return ("error", _describe(exc))
    return ("ok", out, time.perf_counter() - start)


def serve(requests: Connection, replies: Connection) -> None:
    while True:
        try:
            message = requests.recv()
        except EOFError:
            return
        replies.send(handle(message))


def main(argv: list[str]) -> None:
    read_fd, write_fd = int(argv[0]), int(argv[1])
    os.dup2(2, 1)  # keep implementations' prints off the protocol pipes
    sys.stdout = sys.stderr
    serve(Connection(read_fd, writable=False), Connection(write_fd, readable=False))


if __name__ == "__main__":
    main(sys.argv[1:])
