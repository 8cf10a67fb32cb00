"""The parent side of a worker: what a worker process is started with."""
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
