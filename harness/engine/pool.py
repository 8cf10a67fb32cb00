"""The parent side of a worker process: start it, send a request, wait with a time limit, and turn a
death or a hang into a reply. A dead or hung worker is killed and started afresh on the next call,
so one bad implementation costs one outcome, never the run.

A worker runs in its own session (a Ctrl-C at the terminal reaches normdiff alone, which then ends
every worker) and dies with normdiff even when normdiff is SIGKILLed (normdiff/processes.py). Its
output goes to an anonymous temporary file, so no log is ever left behind; its temporary files go
to `tmp_dir`, the run's own folder, which the runner removes.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
from multiprocessing.connection import Connection

from normdiff import processes
from normdiff.text import general

MIN_LOAD_TIMEOUT = 15.0  # importing torch + transformers takes 5-8 s on this project's 2-core machine


# Workers of several frameworks compute side by side on the machine's cores. By default an OpenMP
# runtime's idle threads spin for a while after each parallel region (torch's, MKL's), burning a core
# another worker was computing on: measured on this project's 2-core machine, the torch worker's 2036
# default-suite calls took 3.8 CPU-s for 1.9 s of wall time, 2.4 CPU-s with passive waiting. Only how
# idle threads wait changes: the thread counts, and so every kernel's split of its work, stay.
IDLE_THREADS_SLEEP = {"OMP_WAIT_POLICY": "PASSIVE", "KMP_BLOCKTIME": "0"}


def load_timeout_for(timeout: float) -> float:
    """The limit on starting a worker and importing an implementation: --timeout, but never so
    short that a heavy framework's import cannot finish."""
    return max(timeout, MIN_LOAD_TIMEOUT)


class Worker:
    def __init__(self, name: str, timeout: float = 60.0, load_timeout: float | None = None,
                 tmp_dir: str | None = None):
        self.name = name
        self.timeout = timeout
        self.load_timeout = load_timeout_for(timeout) if load_timeout is None else load_timeout
        self.tmp_dir = tmp_dir
        self.proc: subprocess.Popen | None = None
        self.log = tempfile.TemporaryFile(prefix=f"normdiff-{name}-", suffix=".log")  # unlinked at once
        self._lock = threading.RLock()  # the runner's thread calls; the main thread may close
        self.closed = False

    # ---- lifecycle -----------------------------------------------------------------------------

    def _start(self) -> None:
        to_child_r, to_child_w = os.pipe()
        to_parent_r, to_parent_w = os.pipe()
        env = dict(os.environ, NORMDIFF_PARENT_PID=str(os.getpid()))
        for name, value in IDLE_THREADS_SLEEP.items():
            env.setdefault(name, value)  # a user's own setting wins
        if self.tmp_dir:
            env.update(TMPDIR=self.tmp_dir, TEMP=self.tmp_dir, TMP=self.tmp_dir)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "normdiff.harness.engine.worker", str(to_child_r), str(to_parent_w)],
            pass_fds=(to_child_r, to_parent_w), stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log,
            # no preexec_fn: it forces a fork of this (multithreaded) process; the worker asks for
            # its parent-death signal itself, first thing (worker.main)
            env=env, start_new_session=True,
        )
        os.close(to_child_r)
        os.close(to_parent_w)
        self.requests = Connection(to_child_w, readable=False)
        self.replies = Connection(to_parent_r, writable=False)

    def _kill(self) -> None:
        with self._lock:
            if self.proc is None:
                return
            # its session and everything below it, whatever the code started; also when the worker
            # itself is dead already (its group lives on while any member does)
            processes.kill_tree(self.proc.pid)
            self.proc.wait()
            self.requests.close()
            self.replies.close()
            self.proc = None

    def kill(self) -> None:
        """End the process now (from any thread): a call waiting on it returns `crashed`."""
        with self._lock:
            self.closed = True
            if self.proc is not None and self.proc.poll() is None:
                processes.kill_tree(self.proc.pid)

    def close(self) -> None:
        # killed rather than asked to stop: a worker keeps nothing worth flushing (JAX writes its
        # compile cache when it compiles), and tearing down torch or transformers gracefully takes
        # 0.2-1 s per process
        with self._lock:
            self.closed = True
            self._kill()
            self.log.close()

    # ---- calls ---------------------------------------------------------------------------------

    def call(self, message: tuple, timeout: float | None = None) -> tuple:
        """Send one request; the reply, or ("crashed", why) / ("timeout", why)."""
        if self.closed:
            return ("crashed", "normdiff was stopping")
        if self.proc is None or self.proc.poll() is not None:
            self._kill()
            with self._lock:
                if self.closed:
                    return ("crashed", "normdiff was stopping")
                self._start()
            if message[0] == "call":
                # a fresh worker imports its framework and the implementation first, under the load
                # limit: the per-call limit is for the call itself, not for Python starting up
                reply = self._exchange(("load", message[1]), self.load_timeout)
                if reply[0] != "ok":
                    return reply
        return self._exchange(message, timeout or (self.load_timeout if message[0] == "load" else self.timeout))

    def _exchange(self, message: tuple, limit: float) -> tuple:
        try:
            self.requests.send(message)
            if not self.replies.poll(limit):
                self._kill()
                if message[0] == "load":
                    impl = message[1]
                    what = impl.target.text if impl.target is not None else impl.entry
                    return ("timeout", f"importing {what} did not finish within {general(limit)} s (the load "
                                       f"limit: --timeout, at least {general(MIN_LOAD_TIMEOUT)} s); the {self.name} "
                                       "worker was killed")
                return ("timeout", f"no reply within {general(limit)} s; the {self.name} worker was "
                                   "killed and restarted")
            return self.replies.recv()
        except (EOFError, OSError, BrokenPipeError):
            return ("crashed", self._death_note())

    def _death_note(self) -> str:
        if self.closed:
            return "normdiff was stopping"
        code = self.proc.wait() if self.proc else None
        self._kill()
        if code is not None and code < 0:
            how = f"was killed by {signal.Signals(-code).name}"
        elif code == 0:
            how = "exited with status 0 without replying (os._exit(0), or a library ending the process)"
        else:
            how = f"exited with status {code}"
        tail = self._log_tail()
        return f"the {self.name} worker process {how}" + (f"; its last output: {tail}" if tail else "")

    def _log_tail(self, limit: int = 300) -> str:
        try:
            self.log.flush()
            size = os.fstat(self.log.fileno()).st_size
            text = os.pread(self.log.fileno(), 4 * limit, max(0, size - 4 * limit)).decode(errors="replace")
        except (OSError, ValueError):
            return ""
        return " ".join(text.split())[-limit:]
