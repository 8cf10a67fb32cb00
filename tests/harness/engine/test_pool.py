"""The parent side of a worker: what a worker process is started with, and what its pipes carry."""
import os
import site
import threading
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

from normdiff.harness.engine.pool import IDLE_THREADS_SLEEP, Worker


def _worker_env(tmp_path, name: str):
    worker = Worker("numpy", timeout=30, tmp_dir=str(tmp_path))
    try:
        reply = worker.call(("task", "os:getenv", {"key": name}))
    finally:
        worker.close()
    assert reply[0] == "ok", reply
    return reply[1]


def test_idle_threads_of_a_worker_sleep_instead_of_spinning(tmp_path):
    assert IDLE_THREADS_SLEEP["OMP_WAIT_POLICY"] == "PASSIVE"
    for name, value in IDLE_THREADS_SLEEP.items():
        assert _worker_env(tmp_path, name) == value


def test_a_users_own_thread_setting_wins(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    assert _worker_env(tmp_path, "OMP_WAIT_POLICY") == "ACTIVE"


# ---- the pipes, out of the code's way, and what comes through them checked -------------------------

HOSTILE = Path(__file__).parents[2] / "fixtures" / "hostile.py"
ARGS = {"x": np.ones((2, 8), np.float32), "weight": np.ones(8, np.float32), "eps": 1e-6}

TASKS = """
import fcntl, os, subprocess, sys

def pipes():
    found = []
    for fd in sorted(map(int, os.listdir("/proc/self/fd"))):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith("pipe:"):
                found.append([fd, bool(fcntl.fcntl(fd, fcntl.F_GETFD) & fcntl.FD_CLOEXEC)])
        except OSError:
            pass
    # close_fds=False: as os.system, os.exec* or a C library starting a program would
    child = subprocess.run(["ls", "/proc/self/fd"], capture_output=True, text=True, close_fds=False).stdout.split()
    return {"pipes": found, "env": os.environ.get("NORMDIFF_WORKER_FDS"), "argv": sys.argv[1:],
            "child": [int(fd) for fd in child]}
"""


def returned(worker, message, timeout=None, within=20.0):
    """The worker's answer to `message`, failing (not hanging) when it takes longer than `within`."""
    replies = []
    thread = threading.Thread(target=lambda: replies.append(worker.call(message, timeout)), daemon=True)
    thread.start()
    thread.join(within)
    assert replies, f"no answer within {within} s: the parent hangs"
    return replies[0]


@pytest.fixture
def worker(tmp_path):
    w = Worker("numpy", timeout=2, tmp_dir=str(tmp_path))
    yield w
    w.close()


def test_the_pipes_are_moved_high_close_on_exec_and_named_nowhere(worker, tmp_path):
    """The old worker took its pipes as fds 3-10 named in its argv, inheritable by any program the
    code started; now they are moved to random fds in the upper half of the fd table, close-on-exec,
    and their numbers are gone from argv and the environment."""
    tasks = tmp_path / "pipe_tasks.py"
    tasks.write_text(TASKS)
    reply = worker.call(("task", f"{tasks}:pipes", {}))
    assert reply[0] == "ok", reply
    found = reply[1]
    assert len(found["pipes"]) == 2, found
    for fd, cloexec in found["pipes"]:
        assert fd >= 64 and cloexec, found
    assert found["env"] is None and found["argv"] == []
    assert max(found["child"]) < 64, found  # a program the code starts inherits neither


def test_a_reply_with_junk_is_an_error_and_the_worker_is_restarted(worker):
    pid = worker.call(("task", "os:getpid", {}))[1]
    reply = returned(worker, ("task", f"{HOSTILE}:writes_junk", ARGS))  # the old parent read a 4 GB length
    assert reply[0] == "error", reply
    assert reply[1].startswith("the numpy worker's reply was malformed: it does not start with normdiff's mark")
    assert "the code under test may have written into normdiff's pipe" in reply[1]
    again = worker.call(("task", "os:getpid", {}))
    assert again[0] == "ok" and again[1] != pid


def test_the_time_limit_bounds_the_whole_reply(worker):
    """The start of a well-formed reply (the right id, found in the worker's memory) and then
    nothing: the old parent saw bytes, began to read and waited for the rest for ever; now the
    deadline covers the whole message."""
    start = time.monotonic()
    status, why = returned(worker, ("task", f"{HOSTILE}:writes_a_partial_reply", ARGS), timeout=1)
    assert time.monotonic() - start < 10
    assert status == "timeout" and why.startswith("no reply within 1 s (only 50 bytes of a reply had come"), why


def _tagged(tag: str) -> list[int]:
    found = []
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{name}/environ", "rb") as fh:
                if f"POOL_TEST_TAG={tag}".encode() not in fh.read():
                    continue
            with open(f"/proc/{name}/stat", "rb") as fh:
                if fh.read().rsplit(b")", 1)[1].split()[0] != b"Z":
                    found.append(int(name))
        except OSError:
            pass
    return found


def test_a_worker_that_dies_while_its_child_holds_the_pipe_is_a_crash_at_once(tmp_path, monkeypatch):
    """A process the code left holds the reply pipe open, so its end never comes: the parent sees
    the worker die instead of waiting out the limit (the old parent waited it out), and the child
    is killed with the worker's group, which a worker collected too early would have let escape."""
    tag = uuid.uuid4().hex
    monkeypatch.setenv("POOL_TEST_TAG", tag)
    worker = Worker("numpy", timeout=30, tmp_dir=str(tmp_path))
    try:
        start = time.monotonic()
        reply = worker.call(("task", f"{HOSTILE}:forks_then_exits", ARGS))
        assert reply[0] == "crashed" and "exited with status 0 without replying" in reply[1], reply
        assert time.monotonic() - start < 10
    finally:
        worker.close()
    deadline = time.monotonic() + 5
    while _tagged(tag) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _tagged(tag), "the child the code left outlived its worker"


def test_modules_in_the_current_folder_are_not_imported_by_a_worker(tmp_path, monkeypatch):
    """python -m put the current folder first on a worker's import path, so a normdiff.py or a
    numpy.py there replaced the real one in every worker (each crashed); -P keeps it off."""
    for name in ("normdiff.py", "numpy.py"):
        (tmp_path / name).write_text(f"raise ImportError('the {name} in the current folder')\n")
    monkeypatch.chdir(tmp_path)
    worker = Worker("numpy", timeout=30, tmp_dir=str(tmp_path))
    try:
        reply = worker.call(("task", "numpy:ones", {"shape": 2}))
    finally:
        worker.close()
    assert reply[0] == "ok" and reply[1].tolist() == [1.0, 1.0], reply


def test_the_code_under_test_gets_a_home_of_the_runs_own(tmp_path, monkeypatch):
    """HOME and the XDG folders point into the run's temporary folder (the old worker had the
    user's); normdiff's own compile caches, the user's site-packages and a folder the user gave one
    framework stay where they were."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "real-cache"))  # as a desktop session may set it
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("NORMDIFF_CACHE_HOME", raising=False)
    monkeypatch.delenv("PYTHONUSERBASE", raising=False)
    home = str(tmp_path / "home")
    assert _worker_env(tmp_path, "HOME") == home
    assert _worker_env(tmp_path, "XDG_CACHE_HOME") == f"{home}/.cache"
    assert _worker_env(tmp_path, "XDG_CONFIG_HOME") == f"{home}/.config"
    assert _worker_env(tmp_path, "NORMDIFF_CACHE_HOME") == os.path.join(os.path.expanduser("~"), ".cache", "normdiff")
    assert _worker_env(tmp_path, "PYTHONUSERBASE") == site.getuserbase()
    assert _worker_env(tmp_path, "HF_HOME") == str(tmp_path / "hf")
