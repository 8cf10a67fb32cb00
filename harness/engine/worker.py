"""The worker process: runs implementations of one framework, one call at a time.

Started by `pool.Worker` as `python -P -m normdiff.harness.engine.worker` (-P: the current folder
is not on the import path, so a `numpy.py` or `normdiff.py` there is never imported in place of the
real one; a user's code puts its own folder on the path as it is loaded, implementations/loading.py).
Requests and replies travel over two private pipes (harness/engine/wire.py: a request is pickled,
the worker trusts its parent; a reply is a framed, bounded message, never unpickled), so an
implementation that prints to stdout cannot corrupt the protocol (stdout is pointed at stderr,
which the parent logs). Anything an implementation does wrong comes back as a reply; only a hard
crash (segfault, os._exit) or a hang is left for the parent to notice, and it turns those into
`crashed` / `timeout` outcomes.

The pipes are out of the code's way, not out of its reach. Their numbers come in
$NORMDIFF_WORKER_FDS, removed from the environment at once; each is moved to an unpredictable number
high in the fd table (F_DUPFD_CLOEXEC at a random start in the upper half of RLIMIT_NOFILE), close-
on-exec so that no program the code starts inherits it, and the original closed. Code in this
process can still find them (/proc/self/fd lists every fd, and the request's id is in this
process's memory): it can write junk or a forged reply, read a request, close a pipe. The parent is
built so that none of it reaches beyond that call (pool.py, wire.py): a reply must carry the id of
the request it answers, is refused above a length derived from the request's arrays, is read
against a deadline `--timeout` sets for the whole message, and is never unpickled. The worst such
code gets is an `error`, `crashed` or `timeout` outcome for the calls of its own worker, which is
then killed and restarted; a user's code runs in a worker of its own (implementations/entry.py).

Messages:
    ("load", Implementation)                       -> ("ok", takes, seconds, sees) | ("unavailable", reason)
        takes: the names its call binds, sees: the contract's knobs it reads (None: its adapter does not say)
    ("call", Implementation, op, Contract, CaseInputs) -> ("ok", ndarray, seconds)
                                                      | ("error", message) | ("unavailable", reason)
    ("backward", Implementation, op, Contract, CaseInputs, dy)
                                      -> ("ok", {operand: ndarray}, seconds) | ("error", ...) | ...
    ("task", "package.module:function", kwargs)    -> ("ok", its return value, seconds) | ("error", message)
        one whole job in this process (normdiff model runs an HF model here), with the same guards
The worker ends when its request pipe closes (the parent kills it at the end of a run), and with
status wire.READ_FAILED, saying why on stderr, when a pipe gives something that is no request or
takes no reply.

The worker is a subreaper: whatever processes the code leaves running stay below it (a daemonized
grandchild too), and the parent ends them all with the worker. Not after each call: frameworks keep
helper processes across calls (tinygrad's compile pool hangs when they vanish). Each call checks what it was given back: a
non-array (a tuple, a list, None, a generator) and an input changed in place are errors that say so;
the inputs are unpickled afresh for each call, so no other implementation sees a changed one.
"""
from __future__ import annotations

import fcntl
import os
import resource
import secrets
import sys
import sysconfig
import time
import traceback
from pathlib import Path

from dataclasses import replace

import numpy as np

from normdiff import processes
from normdiff.cases import layouts
from normdiff.harness.data.ops import CASE, OPS
from normdiff.harness.engine import wire
from normdiff.implementations.call_checks import changed_inputs
from normdiff.implementations.frameworks import to_numpy
from normdiff.implementations.loading import load_entry, make_adapter
from normdiff.text import clipped

_adapters: dict[str, object] = {}


def _adapter(impl, pass_: str = "forward"):
    key = (impl.name, pass_)
    if key not in _adapters:
        _adapters[key] = make_adapter(impl, pass_)
    return _adapters[key]


def _describe(exc: BaseException) -> str:
    """The error as a user reads it, with where it happened in *their* code (or the library it
    calls): the innermost frame outside normdiff's own modules; none when normdiff raised it (a
    binding message says what to do, and a path into normdiff would only mislead)."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not _own(f.filename)]
    where = f" (at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
    # raised inside a library (torch.cuda's "not compiled with CUDA") from the user's own file: the
    # line of theirs that called it is the one to read
    theirs = [f for f in frames if not _installed(f.filename)]
    if theirs and theirs[-1] is not frames[-1]:
        where += f", called from {theirs[-1].filename}:{theirs[-1].lineno}"
    return f"{type(exc).__name__}: {exc}{where + ')' if where else ''}"


_PACKAGE = Path(__file__).resolve().parents[2]  # normdiff's root: its modules' folders are below it
_OWN = tuple(str(_PACKAGE / folder) + os.sep for folder in ("harness", "implementations", "cases", "reports",
                                                            "normdiff", "strategies"))


def _own(filename: str) -> bool:
    return os.path.abspath(filename).startswith(_OWN)


_INSTALLED = tuple({os.path.join(sysconfig.get_paths()[k], "") for k in ("purelib", "platlib", "stdlib", "platstdlib")})


def _installed(filename: str) -> bool:
    """A frame of an installed library or of Python itself, not of the user's own files."""
    return os.path.abspath(filename).startswith(_INSTALLED) or filename.startswith("<")


def _exited(exc: BaseException) -> str:
    """What to say of code that tried to end the process instead of returning."""
    if isinstance(exc, SystemExit):
        return (f"called sys.exit({exc.code!r}) (or exit()): an implementation must return its output, "
                "not end the process")
    return f"raised {_describe(exc)}"


def run_task(entry: str, kwargs: dict) -> tuple:
    start = time.perf_counter()
    try:
        value = load_entry(entry)(**kwargs)
    except Exception as exc:
        return ("error", _describe(exc))
    except BaseException as exc:
        return ("error", f"it {_exited(exc)}")
    return ("ok", value, time.perf_counter() - start)


def handle(message: tuple) -> tuple:
    kind = message[0]
    if kind == "task":
        return run_task(*message[1:])
    impl = message[1]
    pass_ = "backward" if kind == "backward" or (kind == "load" and not impl.entry) else "forward"
    start = time.perf_counter()
    try:
        adapter = _adapter(impl, pass_)
    except ImportError as exc:
        return ("unavailable", f"cannot import {impl.entry_for(pass_)}: {_describe(exc)}")
    except Exception as exc:  # an error inside the module that defines the implementation
        return ("error", f"loading {impl.name} failed: {_describe(exc)}")
    except BaseException as exc:  # sys.exit at import: the worker lives on to say so
        return ("error", f"loading {impl.name} failed: it {_exited(exc)}")
    if kind == "load":  # what it takes (the names its call binds: eps or not) and what it reads of the
        # contract (its knobs: runner.call_key), where its adapter says
        takes, sees = getattr(adapter, "takes", None), getattr(adapter, "sees", None)
        return ("ok", sorted(takes) if takes is not None else None, time.perf_counter() - start,
                tuple(sees) if sees is not None else None)
    _, _, op, contract, inputs, *upstream = message
    shapes = {name: array.shape for name, array in inputs.arrays.items()}  # the case's, before a layout
    inputs, upstream = _laid_out(op, inputs, upstream)
    args = (op, contract, inputs, *upstream)
    given = _upstream_arrays(upstream[0]) if upstream else {}  # dy (and a fused add's dresidual_out)
    before = {name: array.copy() for name, array in {**inputs.arrays, **given}.items()}
    try:
        value = adapter(*args)
    except Exception as exc:
        return ("error", _describe(exc))
    except BaseException as exc:
        return ("error", f"it {_exited(exc)}")
    seconds = time.perf_counter() - start
    after = {**inputs.arrays, **given}
    # a write into an input is a failure, but the call returned: its output is judged as well
    wrote = changed_inputs(before, after)
    if upstream:
        wanted = list(OPS[op].gradients.values())
        problem = gradients_problem(value, wanted)
        if problem:
            return ("error", problem)
        grads = {}
        for name in wanted:
            out = _readable(value[name], f"the gradient of {name}")
            if isinstance(out, str):
                return ("error", out)
            out = layouts.as_rows(out, shapes[name], inputs.layout)
            if out.size > inputs.arrays[name].size:
                return ("error", f"wrong-shaped gradient of {name} {out.shape}; expected {inputs.arrays[name].shape}")
            grads[name] = out
        return ("ok", grads, seconds, wrote) if wrote else ("ok", grads, seconds)
    # an op this process was not told about (a test's throwaway record) has one result, y
    results = OPS[op].results if op in OPS else ("y",)
    problem = results_problem(value, results) if len(results) > 1 else output_problem(value)
    if problem:
        return ("error", problem)
    values = OPS[op].by_result(value) if len(results) > 1 else {"y": value}
    x = inputs.arrays.get("x")
    outs = {}
    for name in results:
        out = _readable(values[name], "" if len(results) == 1 else name)
        if isinstance(out, str):
            return ("error", out)
        out = layouts.as_rows(out, shapes["x"], inputs.layout) if "x" in shapes else out
        if x is not None and out.size > x.size:  # refused here, before gigabytes cross the pipe
            what = "output" if len(results) == 1 else f"{name}"
            return ("error", f"wrong-shaped {what} {out.shape}; expected {x.shape} (the shape of x)")
        outs[name] = out
    value = outs if len(results) > 1 else outs["y"]
    return ("ok", value, seconds, wrote) if wrote else ("ok", value, seconds)


def _laid_out(op: str, inputs, upstream: list):
    """The inputs (and a backward call's upstream gradients) in the case's memory layout, made here
    because pickling made them contiguous (cases/layouts.py)."""
    if inputs.layout == layouts.DEFAULT:
        return inputs, upstream
    per_case = {o.name for o in OPS[op].operands if o.per == CASE} if op in OPS else set()
    inputs = replace(inputs, arrays=layouts.lay_out_arrays(inputs.arrays, inputs.layout, per_case))
    if upstream:
        dy = upstream[0]
        grads = dy if isinstance(dy, dict) else {"y": dy}
        grads = layouts.lay_out_arrays(grads, inputs.layout, set())
        upstream = [grads if isinstance(dy, dict) else grads["y"], *upstream[1:]]
    return inputs, upstream


def _upstream_arrays(upstream) -> dict:
    """The upstream gradients a backward call is given, by the name its inputs check uses."""
    if isinstance(upstream, dict):
        return {("dy" if name == "y" else f"d{name}"): g for name, g in upstream.items()}
    return {"dy": upstream}


def results_problem(value, results: tuple) -> str | None:
    """What is wrong with a multi-result forward's value: a tuple (or list) of its results in order,
    or a dict of them by name."""
    wanted = ", ".join(results)
    if isinstance(value, dict):
        missing = [r for r in results if value.get(r) is None]
        return f"returned a dict without {', '.join(missing)}: return ({wanted})" if missing else None
    if isinstance(value, (tuple, list)):
        return None if len(value) == len(results) else \
            f"returned {len(value)} values; this op returns {len(results)}: ({wanted})"
    if value is None:
        return f"returned None: return ({wanted})"
    return f"returned one {type(value).__name__}; this op returns {len(results)} values: ({wanted})"


def _readable(value, what: str):
    """The value as a NumPy array, or what is wrong with it (a string). A masked array's masked
    elements are not values (the data under them is whatever was there): one that masks any is
    refused; one that masks none is its data."""
    if isinstance(value, np.ma.MaskedArray):
        masked = int(np.ma.count_masked(value))
        if masked:
            return (f"returned a masked array{' (' + what + ')' if what else ''} with {masked} of {value.size} "
                    "elements masked: a masked element holds no value to judge; return a plain array "
                    "(np.ma.filled(y, value) where the masked elements have one)")
        value = np.ma.getdata(value)
    try:
        out = to_numpy(value)
    except Exception as exc:  # a tensor NumPy cannot hold (a meta device, a sparse layout, ...)
        return (f"returned a {type(value).__name__} normdiff cannot read as an array{' (' + what + ')' if what else ''}: "
                f"{_describe(exc)}")
    if out.dtype == object:
        return f"returned a {type(value).__name__}, which is not an array of numbers{' (' + what + ')' if what else ''}"
    return out


def gradients_problem(value, wanted: list[str]) -> str | None:
    """What is wrong with a backward adapter's value: it must be a dict of the gradients of the
    operands `wanted` (the op record's; the user adapter turns a user's tuple into one)."""
    if not isinstance(value, dict):
        return f"a backward returned a {type(value).__name__}; expected the gradients of {', '.join(wanted)}"
    missing = [name for name in wanted if name not in value or value[name] is None]
    if missing:
        return f"the backward returned no gradient of {', '.join(missing)} (it gave {', '.join(value) or 'none'})"
    return None


def output_problem(value) -> str | None:
    """What is wrong with a returned value that is no array at all, in the words that fix it."""
    if value is None:
        return ("returned None: return the output array (code that writes its result into an argument must "
                "also return it)")
    if isinstance(value, tuple):
        return f"returned a tuple of {len(value)}: return the output only"
    if isinstance(value, list):
        return (f"returned a list of {len(value)}, not an array: return the array itself (np.asarray or the "
                "framework's tensor)")
    if isinstance(value, dict):
        keys = ", ".join(repr(k) for k in list(value)[:5])
        return f"returned a dict (keys {keys}): return the output array only"
    if hasattr(value, "__next__") or type(value).__name__ in ("generator", "coroutine"):
        return f"returned a {type(value).__name__}: return the array itself (is there a `yield`?)"
    if isinstance(value, (int, float, complex, str, bytes)):
        return f"returned a {type(value).__name__}, not an array shaped like x"
    return None


MAX_TEXT = 20_000  # the characters of a message (an error's, a reason's) sent back (results.csv holds them); the
# rest is counted. Each place a person reads one shows at most normdiff.text.SHOWN of them


def serve(read_fd: int, write_fd: int) -> None:
    while True:
        try:
            request = wire.read_request(read_fd)
        except Exception as exc:  # noqa: BLE001 - whatever the pipe gave, the stream has lost its place
            _pipe_lost("read a request", exc)
        if request is None:
            return
        rid, limit, message = request
        buffers = framed(rid, handle(message), limit)
        try:
            _write_all(write_fd, buffers)
        except OSError as exc:
            _pipe_lost("write its reply", exc)


def framed(rid: str, reply: tuple, limit: int) -> list:
    """The reply's frame; an error reply in its place when the reply holds what the protocol does
    not carry or would take more than `limit` bytes (refused here, before it crosses the pipe)."""
    try:
        buffers = wire.encode(rid, _clipped(reply))
    except wire.Unsendable as exc:
        return wire.encode(rid, ("error", f"the worker cannot send back {exc}: return an array of numbers"))
    size = wire.frame_size(buffers) - wire.HEADER.size
    if size > limit:
        return wire.encode(rid, ("error", f"its reply would take {size} bytes, more than the {limit} a reply to "
                                          "this call may take"))
    return buffers


def _clipped(reply: tuple) -> tuple:
    if reply[0] != "ok" and isinstance(reply[1], str):
        return (reply[0], clipped(reply[1], MAX_TEXT), *reply[2:])
    return reply


def _write_all(fd: int, buffers: list) -> None:
    for buffer in buffers:
        view = memoryview(buffer).cast("B")
        while view:
            try:
                view = view[os.write(fd, view):]
            except BlockingIOError:  # the code under test made it non-blocking
                os.set_blocking(fd, True)
            except InterruptedError:
                pass


def _pipe_lost(what: str, exc: BaseException) -> None:
    try:
        os.write(2, (f"normdiff worker: could not {what} ({type(exc).__name__}: {exc}); the code under test may "
                     "have read from, written into or closed normdiff's pipe\n").encode(errors="replace"))
    except OSError:
        pass
    os._exit(wire.READ_FAILED)


def protocol_fds() -> tuple[int, int]:
    """The request and reply pipes, named by $NORMDIFF_WORKER_FDS (removed here), each moved out of
    the way (the module docstring says what that does and does not prevent)."""
    read_fd, write_fd = (int(fd) for fd in os.environ.pop(wire.FDS_ENV).split(","))
    return _moved_high(read_fd), _moved_high(write_fd)


def _moved_high(fd: int) -> int:
    """`fd` duplicated to a close-on-exec fd at a random number in the upper half of the fd table
    (at most 65536: a higher one costs the table's memory), the original closed."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    top = min(soft if soft != resource.RLIM_INFINITY else 1 << 16, 1 << 16)
    low = max(64, top // 2)
    moved = None
    if top - low > 1:
        try:
            moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, low + secrets.randbelow(top - low))
        except OSError:  # every fd above the start taken
            moved = None
    if moved is None:
        moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
    os.close(fd)
    return moved


def main(argv: list[str]) -> None:
    processes.die_with_parent()
    if os.getppid() != int(os.environ.get("NORMDIFF_PARENT_PID", os.getppid())):
        return  # the parent died before we asked to die with it
    read_fd, write_fd = protocol_fds()
    os.dup2(2, 1)  # keep implementations' prints off the protocol pipes
    sys.stdout = sys.stderr
    processes.become_subreaper()
    serve(read_fd, write_fd)


if __name__ == "__main__":
    main(sys.argv[1:])
