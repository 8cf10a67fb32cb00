"""normdiff/processes.py: descendants are found in /proc, and killing a tree leaves nothing running:
not a grandchild in another session (setsid), nor a daemonized one below a subreaper."""
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from normdiff import processes

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")

ROOT = Path(__file__).resolve().parent.parent


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie is dead: it only waits for its parent, or init, to reap it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2:].split()[0] != b"Z"


def wait_until_gone(pids, seconds=5.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        left = [p for p in pids if alive(p)]
        if not left:
            return []
        time.sleep(0.02)
    return [p for p in pids if alive(p)]


def start(script: str, **kw) -> tuple[subprocess.Popen, list[int]]:
    """Run `script` in a Python child; it prints the pids it started on its first line."""
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(script)], stdout=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, text=True, cwd=ROOT, **kw)
    line = proc.stdout.readline()
    assert line.strip(), f"the child printed nothing (status {proc.poll()})"
    return proc, [int(p) for p in line.split()]


def cleanup(proc, pids):
    for pid in pids + [proc.pid]:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    proc.wait()
    proc.stdout.close()


SPAWNS_A_SLEEP = """
    import subprocess, sys, time
    p = subprocess.Popen(["sleep", "60"])
    print(p.pid, flush=True)
    time.sleep(60)
"""


def test_descendants_finds_a_child_and_its_grandchild():
    proc, [grandchild] = start(SPAWNS_A_SLEEP)
    try:
        mine = processes.descendants(os.getpid())
        assert proc.pid in mine and grandchild in mine
        assert mine.index(proc.pid) < mine.index(grandchild)  # children first
        assert processes.descendants(proc.pid) == [grandchild]
        assert processes.descendants(grandchild) == []
    finally:
        cleanup(proc, [grandchild])


def test_descendants_of_a_process_that_is_gone_is_empty():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    assert processes.descendants(proc.pid) == []


def test_descendants_skips_zombies():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 5
    while alive(proc.pid) and time.monotonic() < deadline:  # exited but not reaped: a zombie
        time.sleep(0.02)
    try:
        assert proc.pid not in processes.descendants(os.getpid())
    finally:
        proc.wait()


ESCAPES_BY_SETSID = """
    import subprocess, sys, time
    own = subprocess.Popen(["sleep", "60"])
    away = subprocess.Popen(["sleep", "60"], start_new_session=True)
    print(own.pid, away.pid, flush=True)
    time.sleep(60)
"""


@pytest.mark.parametrize("own_session", [True, False], ids=["own-session", "parents-group"])
def test_kill_tree_kills_the_whole_tree_a_setsid_grandchild_too(own_session):
    proc, grandchildren = start(ESCAPES_BY_SETSID, start_new_session=own_session)
    try:
        assert os.getsid(grandchildren[1]) == grandchildren[1]  # really in a session of its own
        processes.kill_tree(proc.pid)
        assert proc.wait(timeout=5) == -signal.SIGKILL
        assert wait_until_gone([proc.pid] + grandchildren) == []
    finally:
        cleanup(proc, grandchildren)
    assert alive(os.getpid())  # the parents-group case: our own group was not killed


def test_kill_tree_without_itself_spares_the_process():
    proc, [grandchild] = start(SPAWNS_A_SLEEP, start_new_session=True)
    try:
        processes.kill_tree(proc.pid, include_self=False)
        assert wait_until_gone([grandchild]) == []
        assert proc.poll() is None and alive(proc.pid)
    finally:
        cleanup(proc, [grandchild])


def test_kill_tree_of_a_process_that_is_gone_does_not_raise():
    proc = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    proc.wait()
    processes.kill_tree(proc.pid)


SUBREAPER_KILLS_A_DAEMON = """
    import os, sys, time
    from normdiff import processes

    if not processes.become_subreaper():
        print(-1, flush=True)
        sys.exit(0)
    r, w = os.pipe()
    middle = os.fork()
    if middle == 0:  # daemonize: a new session, a second fork, and the middle process exits at once
        os.setsid()
        daemon = os.fork()
        if daemon == 0:
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            time.sleep(60)
            os._exit(0)
        os.write(w, str(daemon).encode())
        os._exit(0)
    os.close(w)
    daemon = int(os.read(r, 64))
    os.waitpid(middle, 0)
    print(daemon, flush=True)
    with open(f"/proc/{daemon}/stat", "rb") as fh:
        stat = fh.read()
    parent = int(stat[stat.rfind(b")") + 2:].split()[1])
    below = processes.descendants(os.getpid())
    processes.kill_descendants()
    try:
        os.kill(daemon, 0)
        after = "alive"
    except ProcessLookupError:
        after = "gone"  # killed, and reaped by us (its adoptive parent): not even a zombie
    print(parent == os.getpid(), daemon in below, after, processes.descendants(os.getpid()), flush=True)
"""


def test_kill_descendants_below_a_subreaper_kills_a_daemonized_grandchild():
    proc, [daemon] = start(SUBREAPER_KILLS_A_DAEMON)
    try:
        if daemon == -1:
            pytest.skip("PR_SET_CHILD_SUBREAPER is not available here")
        out, _ = proc.communicate(timeout=20)
        assert proc.returncode == 0
        assert out.split() == ["True", "True", "gone", "[]"], out  # adopted, found, killed, nothing left
        assert not alive(daemon)
    finally:
        if proc.returncode is None:
            cleanup(proc, [daemon])
        elif daemon > 0 and alive(daemon):
            os.kill(daemon, signal.SIGKILL)


def test_become_subreaper_takes_effect_in_a_child():
    script = ("from normdiff import processes; import ctypes, sys; print(processes.become_subreaper())")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=20)
    assert out.stdout.strip() == ("True" if processes._PRCTL is not None else "False"), out.stderr


def test_die_with_parent_kills_a_child_when_its_parent_is_killed():
    """PDEATHSIG: the parent (a Python process) is SIGKILLed, which no handler sees; the grandchild
    that asked to die with it goes too."""
    if processes.child_setup() is None:
        pytest.skip("no prctl here")
    script = """
        import subprocess, sys, time
        from normdiff import processes
        p = subprocess.Popen([sys.executable, "-c",
                              "from normdiff import processes; import time; processes.die_with_parent(); "
                              "print('ready', flush=True); time.sleep(60)"], stdout=subprocess.PIPE, text=True)
        p.stdout.readline()
        print(p.pid, flush=True)
        time.sleep(60)
    """
    proc, [grandchild] = start(script)
    try:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=5)
        assert wait_until_gone([grandchild]) == []
    finally:
        cleanup(proc, [grandchild])


# ---- forked: a computation in a forked child --------------------------------------------------------
# Run in a fresh interpreter: pytest-xdist's own threads make forked() compute in the caller.

FORKED = """
    import os, sys, threading, time
    from normdiff import processes

    def pid_and(value):
        return os.getpid(), value

    def fails():
        raise ValueError("no page today")

    def sleeps():
        time.sleep(60)
"""


def run_script(body: str) -> list[str]:
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(FORKED) + textwrap.dedent(body)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


def test_forked_computes_in_another_process_and_returns_its_result():
    child, value, caller = run_script("""
        with processes.forked(pid_and, "page") as result:
            pid, value = result()
        print(pid, value, os.getpid())
    """)
    assert value == "page"
    assert child != caller


def test_forked_raises_what_the_child_raised():
    (said,) = run_script("""
        try:
            with processes.forked(fails) as result:
                result()
        except ValueError as exc:
            print(str(exc).replace(" ", "_"))
    """)
    assert said == "no_page_today"


def test_forked_computes_in_the_caller_while_another_thread_runs():
    # a fork copies the calling thread only: a lock the other thread holds would stay held forever
    child, caller = run_script("""
        stop = threading.Event()
        threading.Thread(target=stop.wait).start()
        with processes.forked(pid_and, 0) as result:
            pid, _ = result()
        stop.set()
        print(pid, os.getpid())
    """)
    assert child == caller


def test_forked_computes_in_the_caller_where_a_framework_with_thread_pools_is_loaded():
    # JAX or PyTorch keep native threads no Python check sees (JAX warns at every fork)
    child, caller = run_script("""
        sys.modules["jax"] = type(sys)("jax")  # as if the user's process had imported it
        with processes.forked(pid_and, 0) as result:
            pid, _ = result()
        print(pid, os.getpid())
    """)
    assert child == caller


def test_leaving_the_block_early_kills_the_child():
    pid, left = run_script("""
        try:
            with processes.forked(sleeps) as result:
                (pid,) = processes.descendants(os.getpid())
                raise KeyboardInterrupt
        except KeyboardInterrupt:
            print(pid, len(processes.descendants(os.getpid())))
    """)
    assert left == "0"
    assert not alive(int(pid))


def test_a_forked_child_dies_with_its_parent():
    proc, pids = start("""
        import os, time
        from normdiff import processes
        with processes.forked(time.sleep, 60) as result:
            print(*processes.descendants(os.getpid()), flush=True)
            result()
    """)
    try:
        assert len(pids) == 1
        proc.kill()  # SIGKILL: no handler, no finally
        assert wait_until_gone(pids) == []
    finally:
        cleanup(proc, pids)
