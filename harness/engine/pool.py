"""The parent side of a worker process: start it, send a request, wait with a time limit, and turn a
death or a hang into a reply. A dead or hung worker is killed and started afresh on the next call,
so one bad implementation costs one outcome, never the run.

The code under test can reach the worker's pipes (worker.py says how far), so a reply is read as
untrusted bytes (wire.py): the whole exchange, sending the request included, has one deadline (the
call's limit, from --timeout), every read and write is non-blocking, a reply is refused at its
first wrong byte (its mark, its id), above its request's length limit, with bytes after it, or
when it does not decode to the form a worker gives; it is never unpickled. A malformed reply is an
`error` outcome that says so, and the worker is killed and restarted.

A worker runs in its own session (a Ctrl-C at the terminal reaches normdiff alone, which then ends
every worker) and dies with normdiff even when normdiff is SIGKILLed (normdiff/processes.py). Its
output goes to an anonymous temporary file, so no log is ever left behind; its temporary files go
to `tmp_dir`, the run's own folder, which the runner removes, and so does its HOME (`home_env`).
"""
from __future__ import annotations

import contextlib
import math
import os
import select
import signal
import site
import subprocess
import sys
import tempfile
import threading
import time

from normdiff import processes
from normdiff.files import CACHE_HOME_ENV, cache_home
from normdiff.harness.engine import wire
from normdiff.text import general

MIN_LOAD_TIMEOUT = 15.0  # importing torch + transformers takes 5-8 s on this project's 2-core machine
DEATH_CHECK = 0.25  # seconds between looks at whether a worker that has not replied is still alive
MALFORMED = "the code under test may have written into normdiff's pipe"


# Workers of several frameworks compute side by side on the machine's cores. By default an OpenMP
# runtime's idle threads spin for a while after each parallel region (torch's, MKL's), burning a core
# another worker was computing on: measured on this project's 2-core machine, the torch worker's 2036
# default-suite calls took 3.8 CPU-s for 1.9 s of wall time, 2.4 CPU-s with passive waiting. Only how
# idle threads wait changes: the thread counts, and so every kernel's split of its work, stay.
IDLE_THREADS_SLEEP = {"OMP_WAIT_POLICY": "PASSIVE", "KMP_BLOCKTIME": "0"}


# The per-user folders under HOME that programs write their caches, settings and data to, by the
# XDG variables that move them (a desktop session may set these to folders of the real HOME)
HOME_FOLDERS = {"XDG_CACHE_HOME": ".cache", "XDG_CONFIG_HOME": ".config", "XDG_DATA_HOME": ".local/share",
                "XDG_STATE_HOME": ".local/state"}


def home_env(tmp_dir: str) -> dict[str, str]:
    """What a worker's environment takes so that the code under test writes nothing into the
    user's HOME: HOME (and the XDG folders) in the run's temporary folder, so that what frameworks
    keep there by default (~/.keras, ~/.cache/huggingface, ~/.cache/torch, ~/.triton,
    ~/.nv/ComputeCache, matplotlib's font cache, onnxruntime's ~/.cache/Microsoft) goes away with
    the run. A variable the user set for one framework (HF_HOME, TORCH_HOME, KERAS_HOME,
    MPLCONFIGDIR, CUDA_CACHE_PATH, ...) is theirs and stays. Two things of the real HOME stay in
    reach: normdiff's own compile caches ($NORMDIFF_CACHE_HOME, else ~/.cache/normdiff: JAX's
    programs, inductor's; a repeat run loads them) and the user's site-packages (~/.local, by
    PYTHONUSERBASE), where a framework may be installed."""
    home = os.path.join(tmp_dir, "home")
    os.makedirs(home, exist_ok=True)
    env = {"HOME": home, **{name: os.path.join(home, sub) for name, sub in HOME_FOLDERS.items()}}
    env[CACHE_HOME_ENV] = cache_home()
    env["PYTHONUSERBASE"] = os.environ.get("PYTHONUSERBASE") or site.getuserbase()
    return env


# os.environ as it was before a LocalCluster of this process started (harness/engine/campaign.py):
# its nannies write theirs into os.environ (OMP_NUM_THREADS=1 and the like) while it runs, and a
# worker that a run in another thread starts meanwhile must not inherit them (one thread changes the
# order of torch's sums). Empty: os.environ is the environment.
_ENVIRON_KEPT: list[dict] = []
_ENVIRON_LOCK = threading.Lock()


def environment() -> dict[str, str]:
    """The environment a worker starts from: os.environ, or what it was before a LocalCluster of
    this process started, while that one runs."""
    with _ENVIRON_LOCK:
        return dict(_ENVIRON_KEPT[-1] if _ENVIRON_KEPT else os.environ)


@contextlib.contextmanager
def environment_kept(before: dict):
    """Workers started while the block runs start from `before` (campaign.py: a LocalCluster)."""
    with _ENVIRON_LOCK:
        _ENVIRON_KEPT.append(dict(before))
    try:
        yield
    finally:
        with _ENVIRON_LOCK:
            _ENVIRON_KEPT.pop()


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
        self.requests: int | None = None  # the request pipe's write end (non-blocking)
        self.replies: int | None = None  # the reply pipe's read end (non-blocking)
        self.last_id = ""  # the previous request's id: a second reply to it is named so
        self.log = tempfile.TemporaryFile(prefix=f"normdiff-{name}-", suffix=".log")  # unlinked at once
        self._lock = threading.RLock()  # the runner's thread calls; the main thread may close
        self.closed = False

    # ---- lifecycle -----------------------------------------------------------------------------

    def _start(self) -> None:
        to_child_r, to_child_w = os.pipe()
        to_parent_r, to_parent_w = os.pipe()
        env = dict(environment(), NORMDIFF_PARENT_PID=str(os.getpid()),
                   **{wire.FDS_ENV: f"{to_child_r},{to_parent_w}"})  # not in argv: the worker removes it
        for name, value in IDLE_THREADS_SLEEP.items():
            env.setdefault(name, value)  # a user's own setting wins
        if self.tmp_dir:
            env.update(TMPDIR=self.tmp_dir, TEMP=self.tmp_dir, TMP=self.tmp_dir, **home_env(self.tmp_dir))
        self.proc = subprocess.Popen(
            # -P: the current folder is not on its import path (python -m would put it first), so a
            # numpy.py or normdiff.py there is never imported in place of the real one; a user's
            # code puts its own folder on the path when it is loaded (implementations/loading.py)
            [sys.executable, "-P", "-m", "normdiff.harness.engine.worker"],
            pass_fds=(to_child_r, to_parent_w), stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log,
            # no preexec_fn: it forces a fork of this (multithreaded) process; the worker asks for
            # its parent-death signal itself, first thing (worker.main)
            env=env, start_new_session=True,
        )
        os.close(to_child_r)
        os.close(to_parent_w)
        os.set_blocking(to_child_w, False)
        os.set_blocking(to_parent_r, False)
        self.requests, self.replies = to_child_w, to_parent_r

    def _kill(self) -> None:
        with self._lock:
            if self.proc is None:
                return
            # its session and everything below it, whatever the code started; also when the worker
            # itself is dead already (its group lives on while any member does). Only while its
            # status is uncollected: until then its pid (and its group's id) cannot be another's
            if self.proc.returncode is None:
                processes.kill_tree(self.proc.pid)
            self.proc.wait()
            for fd in (self.requests, self.replies):
                try:
                    os.close(fd)
                except (OSError, TypeError):
                    pass
            self.requests = self.replies = None
            self.proc = None

    def kill(self) -> None:
        """End the process now (from any thread): a call waiting on it returns `crashed`."""
        with self._lock:
            self.closed = True
            if self.proc is not None and self.proc.returncode is None:  # a dead one's group too
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
        if self.proc is None or processes.exited(self.proc.pid):
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
        rid, size = wire.new_id(), wire.reply_limit(message)
        deadline = time.monotonic() + limit
        reader = wire.ReplyReader(rid, size, self.last_id)
        self.last_id = rid
        try:
            if not (self._send(wire.request_frame(rid, size, message), deadline) and
                    self._receive(reader, deadline)):
                self._kill()
                return ("timeout", self._late_note(message, limit, reader.received))
            return wire.check_reply(message[0], reader.value)
        except wire.Malformed as exc:
            self._kill()
            return ("error", f"the {self.name} worker's reply was malformed: {exc}; {MALFORMED} (the worker was "
                             "killed and restarted)")
        except (EOFError, OSError):
            return ("crashed", self._death_note())

    def _late_note(self, message: tuple, limit: float, received: int) -> str:
        if message[0] == "load":
            impl = message[1]
            what = impl.target.text if impl.target is not None else impl.entry
            return (f"importing {what} did not finish within {general(limit)} s (the load limit: --timeout, at "
                    f"least {general(MIN_LOAD_TIMEOUT)} s); the {self.name} worker was killed")
        partial = f" (only {received} bytes of a reply had come: {MALFORMED})" if received else ""
        return f"no reply within {general(limit)} s{partial}; the {self.name} worker was killed and restarted"

    def _send(self, data: bytes, deadline: float) -> bool:
        """Write the whole request by the deadline (False when it passes: a worker that reads
        nothing, or code under test that holds its pipe, never blocks the parent)."""
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(self._fd("requests"), view):]
            except BlockingIOError:
                if not self._wait(self._fd("requests"), select.POLLOUT, deadline):
                    return False
        return True

    def _receive(self, reader: wire.ReplyReader, deadline: float) -> bool:
        """Read the reply into `reader` by the deadline (False when it passes), then whatever more
        is already there, which makes it malformed."""
        while not reader.done:
            try:
                chunk = os.read(self._fd("replies"), 1 << 20)
            except BlockingIOError:
                if not self._wait(self._fd("replies"), select.POLLIN, deadline):
                    return False
                continue
            if not chunk:
                raise EOFError
            reader.feed(chunk)
        try:
            reader.feed(os.read(self._fd("replies"), 1 << 16))  # b"": the worker ended after replying
        except BlockingIOError:
            pass
        return True

    def _fd(self, which: str) -> int:
        fd = getattr(self, which)
        if fd is None or self.closed:  # killed from another thread (normdiff is stopping)
            raise EOFError
        return fd

    def _wait(self, fd: int, events: int, deadline: float) -> bool:
        """Until `fd` is ready (True) or the deadline passes (False); EOFError once the worker is
        dead and nothing more is there (a process the code left may hold the pipe open, so its end
        would never come)."""
        poller = select.poll()
        poller.register(fd, events)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if poller.poll(math.ceil(min(left, DEATH_CHECK) * 1000)):
                return True
            proc = self.proc
            if proc is None or processes.exited(proc.pid):  # (never collected before _kill)
                if poller.poll(0):
                    return True
                raise EOFError

    def _death_note(self) -> str:
        if self.closed:
            return "normdiff was stopping"
        proc = self.proc
        # its pipe ended: it is dying, or the code under test closed the pipe and lives on (waited
        # for without collecting it: _kill ends its group first)
        deadline = time.monotonic() + DEATH_CHECK * 4
        while proc is not None and not processes.exited(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        if proc is not None and not processes.exited(proc.pid):
            self._kill()
            return f"the {self.name} worker's reply pipe closed while it ran ({MALFORMED} or closed it); it was killed"
        self._kill()
        code = proc.returncode if proc is not None else None
        if code is not None and code < 0:
            how = f"was killed by {signal.Signals(-code).name}"
        elif code == 0:
            how = "exited with status 0 without replying (os._exit(0), or a library ending the process)"
        else:
            how = f"exited with status {code}"
        # a lost pipe: the worker's own line says which (the log holds earlier workers' lines too)
        tail = self._log_tail(last_line=code == wire.READ_FAILED)
        return f"the {self.name} worker process {how}" + (f"; its last output: {tail}" if tail else "")

    def _log_tail(self, limit: int = 300, last_line: bool = False) -> str:
        try:
            self.log.flush()
            size = os.fstat(self.log.fileno()).st_size
            text = os.pread(self.log.fileno(), 4 * limit, max(0, size - 4 * limit)).decode(errors="replace")
        except (OSError, ValueError):
            return ""
        if last_line:
            text = next((line for line in reversed(text.splitlines()) if line.strip()), "")
        return " ".join(text.split())[-limit:]
