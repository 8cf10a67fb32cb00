"""Making sure no process normdiff starts outlives it.

Three mechanisms, because each closes a hole the others leave:
  * every worker and command starts in its own session (`start_new_session=True`): a Ctrl-C at the
    terminal reaches normdiff alone, and killing the session's process group kills whatever the
    code started in it;
  * `die_with_parent` (Linux PR_SET_PDEATHSIG; a worker calls it first thing, a command gets it
    before exec): a worker is killed by the kernel when normdiff dies, even by SIGKILL, which no
    handler sees;
  * `become_subreaper` (Linux PR_SET_CHILD_SUBREAPER): a process that escapes its group (setsid, a
    daemonizing double fork) is re-parented to the nearest subreaper instead of init, so
    `kill_descendants` still finds it in /proc.
Elsewhere only the process-group kill applies. `forked` computes one function in a forked child
(the report's page beside its other files), under the same rules: it dies with normdiff and never
outlives the block that started it. Pure: imports nothing from normdiff.
"""
from __future__ import annotations

import contextlib
import os
import pickle
import signal
import sys

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36


def _load_prctl():
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _load_prctl()


def die_with_parent() -> None:
    """For `preexec_fn`: be SIGKILLed when the process (thread) that started us dies."""
    if _PRCTL is not None:
        _PRCTL(PR_SET_PDEATHSIG, signal.SIGKILL)


def child_setup():
    """The `preexec_fn` for a child normdiff starts, or None where there is nothing to set."""
    return die_with_parent if _PRCTL is not None else None


def become_subreaper() -> bool:
    """Adopt our orphaned descendants (Linux); whether it took effect."""
    return _PRCTL is not None and _PRCTL(PR_SET_CHILD_SUBREAPER, 1) == 0


def _parents() -> dict[int, int]:
    """pid -> parent pid of every process in /proc (empty where there is no /proc)."""
    found = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return found
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue  # it ended while we looked
        # the command name is in parentheses and may hold spaces or ')': split after the last ')'
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) > 1 and fields[0] != b"Z":  # a zombie is dead already; its parent reaps it
            found[int(name)] = int(fields[1])
    return found


def descendants(pid: int) -> list[int]:
    """Every live process below `pid` in the process tree (children first)."""
    children: dict[int, list[int]] = {}
    for child, parent in _parents().items():
        children.setdefault(parent, []).append(child)
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def kill_tree(pid: int, include_self: bool = True) -> None:
    """SIGKILL `pid`'s process group (when it leads one), `pid` and every descendant we can see.
    Descendants are listed before anything is killed: once a parent dies its children move to a
    subreaper or init and are no longer below it. `pid` may have ended already (a zombie its Popen
    has not waited for): its group lives on while any member does, and is killed all the same."""
    below = descendants(pid)
    if include_self:
        try:
            if os.getpgid(pid) == pid:
                os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        _kill(pid)
    for child in below:
        _kill(child)
    _reap(below)  # `pid` itself is left to its Popen, which waits for its status


def kill_descendants() -> None:
    """Kill everything below this process, twice: a process forking while we kill is caught by the
    second pass."""
    for _ in range(2):
        below = descendants(os.getpid())
        if not below:
            break
        for child in below:
            _kill(child)
        _reap(below)


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _reap(pids: list[int]) -> None:
    """Collect those of `pids` that are our children (adopted orphans included), so none stays a
    zombie. Only these: waiting for any child would take the status a Popen is waiting for."""
    for pid in pids:
        try:
            os.waitpid(pid, 0)  # SIGKILLed: it ends at once
        except ChildProcessError:
            pass  # not ours: its own parent reaps it


def exited(pid: int) -> bool:
    """Whether our child `pid` has ended, without collecting its status: it stays a zombie, so its
    process group, and whatever the code left in it, can still be killed by its id (`kill_tree`);
    once collected, a forked child it left is out of reach."""
    if not hasattr(os, "waitid"):
        return not alive(pid)
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True  # collected already


def alive(pid: int) -> bool:
    """Whether process `pid` exists (someone else's counts: it is not ours to judge)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_orphaned(folder: str, prefix: str, suffix: str = "") -> None:
    """Remove the entries PREFIX<pid>-...SUFFIX in `folder` whose process is gone: what a SIGKILLed
    normdiff left (no handler runs on SIGKILL). A live process's entries are never touched."""
    import shutil

    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        if not (name.startswith(prefix) and name.endswith(suffix)):
            continue
        pid = name[len(prefix):].partition("-")[0]
        if pid.isdigit() and not alive(int(pid)):
            shutil.rmtree(os.path.join(folder, name), ignore_errors=True)


# frameworks that start native thread pools when imported or first used (JAX warns at every fork)
THREAD_POOLS = ("jax", "torch", "tensorflow", "mlx", "onnxruntime", "tinygrad")


@contextlib.contextmanager
def forked(fn, *args):
    """Compute fn(*args) in a forked child while the caller goes on (the report's page and its plots
    beside the CSV files: two cores instead of one). Yields `result()`, which waits for the child
    and returns what fn returned, or raises what it raised.

    Only on Linux, only while no other Python thread runs, and only where no framework that keeps
    native thread pools is loaded (JAX, PyTorch, ...: the Python API may run in such a process; the
    CLI never loads one): a fork copies the calling thread alone, and a lock another thread held
    stays held in the child forever. Elsewhere fn runs in the caller, at `result()`.

    The child takes the default action for SIGINT, SIGTERM and SIGHUP (it dies; the parent says what
    happened), dies with the parent, writes nothing but its result to a pipe, and never outlives
    the block: leaving it early (an exception, Ctrl-C) kills and reaps it."""
    import threading

    if not (sys.platform.startswith("linux") and hasattr(os, "fork")) or threading.active_count() > 1 \
            or any(name in sys.modules for name in THREAD_POOLS):
        yield lambda: fn(*args)
        return
    parent = os.getpid()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into the caller's code
        _child(fn, args, read_end, write_end, parent)
    os.close(write_end)
    running = True

    def result():
        nonlocal running
        with os.fdopen(read_end, "rb") as pipe:  # read to the end first: the child may fill the pipe
            payload = pipe.read()
        _, status = os.waitpid(pid, 0)
        running = False
        if not payload:
            raise RuntimeError(f"the forked child computing {getattr(fn, '__name__', fn)} ended without a "
                               f"result (wait status {status})")
        ok, value = pickle.loads(payload)
        if ok:
            return value
        raise value

    try:
        yield result
    finally:
        if running:
            _kill(pid)
            os.waitpid(pid, 0)
            try:
                os.close(read_end)
            except OSError:
                pass  # result() had opened and closed it


def _child(fn, args, read_end: int, write_end: int, parent: int) -> None:
    status = 1
    try:
        os.close(read_end)
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, signal.SIG_DFL)
        die_with_parent()
        if os.getppid() != parent:  # the parent died before the line above took effect
            return
        try:
            payload = pickle.dumps((True, fn(*args)), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:
            try:
                payload = pickle.dumps((False, exc), protocol=pickle.HIGHEST_PROTOCOL)
            except Exception:  # an exception that cannot be pickled: its text
                payload = pickle.dumps((False, RuntimeError(f"{type(exc).__name__}: {exc}")))
        with os.fdopen(write_end, "wb") as pipe:
            pipe.write(payload)
        status = 0
    finally:
        os._exit(status)  # no atexit handlers, no flushing the parent's copied buffers
