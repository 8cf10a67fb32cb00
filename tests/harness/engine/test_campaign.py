"""harness/engine/campaign.py: a run sharded over a Dask cluster gives the local run's results (the
CLI's `run --dask local`, in a fresh process, as a user runs it: same results.csv, crashes still
outcomes, no process left behind, a Ctrl-C at the terminal stops it at once); shards are whole
calls; resources decide where a shard may run, and one that no worker offers is reported, never
waited for; a bad address is a usage error. The in-process tests use a cluster of threads here."""
from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from normdiff.cases.model import Case
from normdiff.cases.suites import Suite, load
from normdiff.harness.data.conventions import op_conventions
from normdiff.harness.data.errors import UsageError
from normdiff.harness.engine import campaign
from normdiff.implementations.entry import Implementation
from normdiff.interrupts import Interrupted

distributed = pytest.importorskip("distributed")

TESTS = Path(__file__).resolve().parents[2]
HOSTILE = TESTS / "fixtures" / "hostile.py"


def _helpers(name: str):
    """Another test module's helpers, under a name of their own (not collected twice)."""
    spec = importlib.util.spec_from_file_location(f"_campaign_{name}", TESTS / f"{name}.py")
    module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)  # its dataclasses look it up
    spec.loader.exec_module(module)
    return module


reliability = _helpers("test_reliability")  # TAG, _tagged: the live processes whose environment carries a tag
process_helpers = _helpers("test_processes")  # wait_until_gone


def fixture_impl(fixtures_dir, name="fx-correct", attr="correct", **kw):
    return Implementation(name, "user", "numpy", f"{fixtures_dir / 'misbehaving.py'}:{attr}",
                          frozenset(op_conventions()), **kw)


@contextlib.contextmanager
def threads_cluster(folder: Path, **kw):
    """A one-thread cluster inside this process (nothing to start), its files in `folder`."""
    import dask

    with dask.config.set({"temporary-directory": str(folder)}), distributed.LocalCluster(
            n_workers=1, threads_per_worker=1, processes=False, dashboard_address="127.0.0.1:0",
            silence_logs=logging.ERROR, **kw) as cluster:
        yield cluster


@pytest.fixture
def client(tmp_path):
    with threads_cluster(tmp_path) as cluster, distributed.Client(cluster) as c:
        yield c


# ---- the plan ------------------------------------------------------------------------------------


def test_one_shard_per_framework_worker_over_every_call():
    suite = load("smoke")
    impls = [Implementation(n, "own", fw, "m:f", frozenset(op_conventions()))
             for n, fw in (("a", "numpy"), ("b", "torch"), ("c", "numpy"))]
    gpu = Implementation("g", "own", "torch", "m:f", frozenset(op_conventions()), resources=(("GPU", 1),))
    shards = campaign.plan_shards(suite, impls + [gpu], slots=2)
    assert [[i.name for i in s.impls] for s in shards] == [["a", "c"], ["b"], ["g"]]
    assert all(s.suite == suite for s in shards)  # every call, in the suite's order
    assert [s.resources for s in shards] == [{}, {}, {"GPU": 1}]


def test_with_fewer_slots_than_frameworks_they_share_shards_of_about_equal_work():
    suite = load("smoke")
    every = frozenset(op_conventions())
    impls = [Implementation(f"t{i}", "own", "torch", "m:f", every) for i in range(4)]
    impls += [Implementation("n", "own", "numpy", "m:f", every), Implementation("j", "own", "jax", "m:f", every)]
    impls += [Implementation("g", "own", "mlx", "m:f", every, resources=(("GPU", 1),))]
    shards = campaign.plan_shards(suite, impls, slots=2)
    assert [sorted(i.name for i in s.impls) for s in shards] == [["t0", "t1", "t2", "t3"], ["j", "n"], ["g"]]
    assert all(s.suite == suite for s in shards)


def test_with_more_slots_the_calls_split_but_never_a_call_or_a_batch():
    suite = load("smoke")
    shards = campaign.plan_shards(suite, [fixture_impl(Path("."))], slots=3)
    assert len(shards) == 3
    ids = [c.id for s in shards for c in s.suite.cases]
    assert sorted(ids) == sorted(c.id for c in suite.cases)  # each case once
    where = {c.id: i for i, s in enumerate(shards) for c in s.suite.cases}
    for c in suite.cases:  # a backward call's gradients, a fused add's two results: one shard
        assert where[c.id] == where[next(d for d in suite.cases if d.call_id == c.call_id).id]
        same_batch = [d for d in suite.cases if (d.op, d.convention, d.contract, d.dtype, d.num_heads, d.width)
                      == (c.op, c.convention, c.contract, c.dtype, c.num_heads, c.width) and d.layout == c.layout]
        assert {where[d.id] for d in same_batch} == {where[c.id]}
    for s in shards:
        order = [suite.cases.index(c) for c in s.suite.cases]
        assert order == sorted(order)


# ---- map_shards: any function --------------------------------------------------------------------


def _twice(x):
    if x < 0:
        raise ValueError("negative")
    return 2 * x


def test_map_shards_returns_results_in_order_and_a_failure_as_a_shard_error(client):
    seen = []
    results = campaign.map_shards(_twice, [3, -1, 5], client, on_result=lambda i, r: seen.append(i))
    assert results[0] == 6 and results[2] == 10
    assert isinstance(results[1], campaign.ShardError) and results[1].outcome == "crashed"
    assert "ValueError: negative" in results[1].reason
    assert sorted(seen) == [0, 1, 2]


def _slow(x):
    time.sleep(x)
    return x


def test_map_shards_stopped_keeps_what_finished(client):
    def stop(index, result):
        raise KeyboardInterrupt  # as Ctrl-C would, after the first result

    with pytest.raises(Interrupted) as err:
        campaign.map_shards(_slow, [0, 1.5], client, on_result=stop)
    assert err.value.partial == [0, None]


# ---- resources -----------------------------------------------------------------------------------


CASES = (Case.of("rms_norm", "qwen3", "float32", "4x128", weight="trained"),
         Case.of("l2_norm", "qwen3.5", "float16", "4x64"))


@pytest.mark.parametrize("offers", [{}, {"FAKE_ACCEL": 1}], ids=["not-offered", "offered"])
def test_a_shard_runs_only_where_its_resources_are(fixtures_dir, tmp_path, offers):
    needs = fixture_impl(fixtures_dir, "fx-needs", resources=(("FAKE_ACCEL", 1),))
    plain = fixture_impl(fixtures_dir)
    with threads_cluster(tmp_path, resources=offers) as cluster, distributed.Client(cluster) as client:
        start = time.monotonic()
        data = campaign.run_sharded(Suite("res", "", CASES), [plain, needs], client, timeout=20)
    assert time.monotonic() - start < 30  # never waits for a worker that will not come
    got = {(o.case.id, o.impl.name): o.measurement for o in data.outcomes}
    assert len(got) == len(data.outcomes) == data.planned == 4
    assert {got[c.id, "fx-correct"].outcome for c in CASES} <= {"identical", "agree"}
    needs_got = [got[c.id, "fx-needs"] for c in CASES]
    if offers:
        assert {m.outcome for m in needs_got} <= {"identical", "agree"}
    else:
        for m in needs_got:
            assert m.outcome == "unavailable"
            assert "FAKE_ACCEL=1" in m.detail and '--resources "FAKE_ACCEL=1"' in m.detail, m.detail


def test_without_dask_installed_the_error_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed raises ImportError
    with pytest.raises(UsageError, match=r"pip install 'normdiff\[dask\]'"):
        campaign.run_sharded(Suite("s", "", CASES), [fixture_impl(Path("."))], "local")


def test_resources_are_checked_pairs():
    assert fixture_impl(Path("."), resources={"GPU": 1}).resources == (("GPU", 1),)
    with pytest.raises(UsageError, match="resources must be"):
        fixture_impl(Path("."), resources=(("GPU", 0),))


def test_a_local_cluster_leaves_this_process_as_it_was():
    """Its nannies write OMP_NUM_THREADS=1 (and more) into this process's environment and their
    workers', and spawning the workers starts multiprocessing's resource tracker here: all put back,
    and what a shard starts sees our environment."""
    from normdiff import processes

    environ = dict(os.environ)
    show = "import os; print(os.environ.get('OMP_NUM_THREADS'), os.environ.get('PYTHONHASHSEED'))"
    with campaign.connect("local", n_workers=1) as c:
        assert campaign.threads(c) == 1
        assert dict(os.environ) == environ
        [seen] = campaign.map_shards(subprocess.check_output, [[sys.executable, "-c", show]], c)
        assert seen.decode().split() == [str(environ.get("OMP_NUM_THREADS")), str(environ.get("PYTHONHASHSEED"))]
        scratch = [p for p in Path(tempfile.gettempdir()).iterdir() if p.name.startswith(campaign.SCRATCH_PREFIX)
                   and p.name.split("-")[2] == str(os.getpid())]
        assert scratch  # the workers' files go there
    assert dict(os.environ) == environ
    assert not any(p.exists() for p in scratch)
    assert process_helpers.wait_until_gone(processes.descendants(os.getpid())) == []


# ---- the command line ----------------------------------------------------------------------------


def _normdiff(argv, cwd, env, timeout=300):
    return subprocess.run([sys.executable, "-m", "normdiff.harness.commands.cli", *argv], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def _results(folder: Path):
    import pandas as pd

    return pd.read_csv(folder / "results.csv", low_memory=False).drop(columns=["seconds"])  # the timing


@pytest.mark.slow
def test_dask_local_gives_the_local_results_and_leaves_no_process(tmp_path):
    """The smoke suite through numpy, torch, a user function that crashes its worker and one that
    leaves a helper process: the same results.csv (but for timings), crashes still outcomes, and
    no process and no temporary file left once normdiff has exited."""
    tag = uuid.uuid4().hex
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = dict(os.environ, TMPDIR=str(tmp), **{reliability.TAG: tag})
    argv = ["run", "--suite", "smoke", "-i", "numpy", "-i", "torch", "-q",
            "--with", f"{HOSTILE}:exits_quietly", "--op", "rms_norm", "--convention", "qwen3",
            "--with", f"{HOSTILE}:leaves_a_child", "--op", "rms_norm", "--convention", "qwen3"]
    local = _normdiff(argv + ["--out", str(tmp_path / "local")], TESTS.parent, env)
    sharded = _normdiff(argv + ["--out", str(tmp_path / "dask"), "--dask", "local"], TESTS.parent, env)
    assert local.returncode == sharded.returncode == 1, sharded.stderr  # exits_quietly crashed
    assert "Traceback" not in sharded.stderr, sharded.stderr
    a, b = _results(tmp_path / "local"), _results(tmp_path / "dask")
    crashing = b[(b.implementation == "exits_quietly") & (b.outcome != "unsupported")]
    assert len(crashing) and set(crashing.outcome) == {"crashed"}
    assert crashing.detail.str.contains("exited with status 0 without replying").all()
    assert a.equals(b)
    deadline = time.monotonic() + 5
    while reliability._tagged(tag) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not reliability._tagged(tag), "a process outlived normdiff run --dask local"
    assert not list(tmp.iterdir()), f"left in TMPDIR: {list(tmp.iterdir())}"


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


# serial: beside other tests on 2 cores, a Ctrl-C while a Dask worker is still starting reached
# it with the terminal's group (its traceback showed) or the run took over 60 s to stop: a gap of
# --dask local under load, recorded in the closing note of 2026-12-01, not hidden by a longer wait
@pytest.mark.slow
@pytest.mark.serial
def test_ctrl_c_at_the_terminal_stops_a_dask_local_run_at_once_and_leaves_nothing(tmp_path):
    """The whole foreground process group gets SIGINT, as from a terminal, while a shard hangs in a
    call: normdiff stops within seconds (not the hang's 60 s), in one line, without a traceback
    from a Dask worker, and no process or temporary file is left."""
    tag = uuid.uuid4().hex
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = dict(os.environ, TMPDIR=str(tmp), **{reliability.TAG: tag})
    argv = [sys.executable, "-m", "normdiff.harness.commands.cli", "run", "--suite", "smoke", "-i", "numpy",
            "--with", f"{HOSTILE}:hangs", "--op", "rms_norm", "--convention", "qwen3", "--out",
            str(tmp_path / "out"), "--dask", "local"]
    proc = subprocess.Popen(argv, cwd=TESTS.parent, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    deadline = time.monotonic() + 120
    while (not any("hostile.py" in _cmdline(p) or "engine.worker" in _cmdline(p) for p in reliability._tagged(tag))
           and time.monotonic() < deadline):
        time.sleep(0.2)
    time.sleep(3)  # numpy's shard finishes; the other hangs inside its call
    os.killpg(proc.pid, signal.SIGINT)
    start = time.monotonic()
    _, stderr = proc.communicate(timeout=60)
    assert time.monotonic() - start < 30
    assert proc.returncode == 130, stderr
    assert "normdiff: stopped by SIGINT" in stderr and "Traceback" not in stderr, stderr
    deadline = time.monotonic() + 5
    while reliability._tagged(tag) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not reliability._tagged(tag), "a process outlived a stopped normdiff run --dask local"
    assert not list(tmp.iterdir()), f"left in TMPDIR: {list(tmp.iterdir())}"


def test_a_bad_address_exits_2_naming_it_before_any_work(tmp_path):
    proc = _normdiff(["run", "--suite", "smoke", "-i", "numpy", "--out", str(tmp_path / "out"), "--dask", "nonsense"],
                     TESTS.parent, dict(os.environ), timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "Dask scheduler at nonsense" in proc.stderr and "missing port" in proc.stderr, proc.stderr
    assert "dask scheduler" in proc.stderr and "--dask local" in proc.stderr  # the fix
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()


def test_an_address_nobody_answers_is_a_usage_error_within_the_connect_timeout(monkeypatch):
    monkeypatch.setattr(campaign, "CONNECT_TIMEOUT", 1.0)
    start = time.monotonic()
    with pytest.raises(UsageError, match=r"cannot connect to a Dask scheduler at tcp://127\.0\.0\.1:1 .*Timed out"):
        campaign.run_sharded(Suite("s", "", CASES), [fixture_impl(Path("."))], "tcp://127.0.0.1:1")
    assert time.monotonic() - start < 10
