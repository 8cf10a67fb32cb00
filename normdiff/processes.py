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
Elsewhere only the process-group kill applies. Pure: imports nothing from normdiff.
"""
from __future__ import annotations

import os
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
