"""The parent side of a worker process: start it, send a request, wait with a time limit, and turn a
death or a hang into a reply. A dead or hung worker is killed and started afresh on the next call,
so one bad implementation costs one outcome, never the run.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from multiprocessing.connection import Connection


class Worker:
    def __init__(self, name: str, timeout: float = 60.0, load_timeout: float = 300.0):
        self.name = name
        self.timeout = timeout
        self.load_timeout = load_timeout
        self.proc: subprocess.Popen | None = None
        self.log = tempfile.NamedTemporaryFile(prefix=f"normdiff-{name}-", suffix=".log", delete=False)

    # ---- lifecycle -----------------------------------------------------------------------------

    def _start(self) -> None:
        to_child_r, to_child_w = os.pipe()
        to_parent_r, to_parent_w = os.pipe()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "normdiff.harness.engine.worker", str(to_child_r), str(to_parent_w)],
            pass_fds=(to_child_r, to_parent_w), stdin=subprocess.DEVNULL,
            stdout=self.log, stderr=self.log,
        )
        os.close(to_child_r)
        os.close(to_parent_w)
        self.requests = Connection(to_child_w, readable=False)
        self.replies = Connection(to_parent_r, writable=False)

    def _kill(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            self.requests.close()
            self.replies.close()
            self.proc = None

    def close(self) -> None:
        # killed rather than asked to stop: a worker keeps nothing worth flushing (JAX writes its
        # compile cache when it compiles), and tearing down torch or transformers gracefully takes
        # 0.2-1 s per process
        self._kill()
        self.log.close()
        os.unlink(self.log.name)

    # ---- calls ---------------------------------------------------------------------------------

    def call(self, message: tuple, timeout: float | None = None) -> tuple:
        """Send one request; the reply, or ("crashed", why) / ("timeout", why)."""
        if self.proc is None or self.proc.poll() is not None:
            self._kill()
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
                return ("timeout", f"no reply within {limit:g} s; the {self.name} worker was "
                                   "killed and restarted")
            return self.replies.recv()
        except (EOFError, OSError, BrokenPipeError):
            return ("crashed", self._death_note())

    def _death_note(self) -> str:
        code = self.proc.wait() if self.proc else None
        self._kill()
        if code is not None and code < 0:
            how = f"killed by {signal.Signals(-code).name}"
        else:
            how = f"exited with status {code}"
        tail = self._log_tail()
        return f"the {self.name} worker process {how}" + (f"; its last output: {tail}" if tail else "")

    def _log_tail(self, limit: int = 300) -> str:
        self.log.flush()
        with open(self.log.name, "rb") as fh:
            fh.seek(max(0, os.path.getsize(self.log.name) - limit))
            text = fh.read().decode(errors="replace")
        return " ".join(text.split())[-limit:]
