"""The runner under faults: a hang costs one time limit, not one per case; a stop (Ctrl-C, SIGTERM)
ends every worker and comes out as Interrupted with what had finished; and run_suite refuses bad
arguments before any work."""
import math
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from normdiff import interrupts
from normdiff import strategies as nds
from normdiff.cases.model import Case
from normdiff.cases.suites import Suite
from normdiff.harness import api
from normdiff.harness.commands import check, identify, usercode
from normdiff.harness.data.conventions import op_conventions
from normdiff.harness.data.errors import UsageError
from normdiff.harness.engine import runner
from normdiff.implementations.entry import Implementation
from normdiff.interrupts import Interrupted

CASES = (
    Case.of("rms_norm", "qwen3", "float32", "4x128", weight="trained"),
    Case.of("rms_norm", "qwen3", "bfloat16", "4x128", weight="trained"),
    Case.of("l2_norm", "qwen3.5", "float16", "4x64"),
    Case.of("rms_norm", "qwen3", "float16", "2x64", weight="trained"),
)
SUITE = Suite("faults", "", CASES)


def fixture_impl(fixtures_dir, attr):
    return Implementation(f"fx-{attr}", "user", "numpy", f"{fixtures_dir / 'misbehaving.py'}:{attr}",
                          frozenset(op_conventions()))


def by_case(data, name):
    return {o.case.id: o.measurement for o in data.outcomes if o.impl.name == name}




# ---- a hang --------------------------------------------------------------------------------------


def test_after_a_hang_the_implementations_other_calls_are_skipped(fixtures_dir, workers_left):
    start = time.perf_counter()
    data = runner.run(SUITE, [fixture_impl(fixtures_dir, "hangs")], timeout=1.5)
    seconds = time.perf_counter() - start
    got = by_case(data, "fx-hangs")
    assert list(got) == [c.id for c in CASES]  # one outcome per case, in the suite's order
    assert {m.outcome for m in got.values()} == {"timeout"}
    first, *others = [got[c.id] for c in CASES]
    assert "no reply within 1.5 s" in first.detail
    for m in others:
        assert m.detail.startswith("not run: the previous call hung on"), m.detail
        assert CASES[0].id in m.detail and "--keep-calling" in m.detail
    assert seconds < 1.5 * 2 + 15, seconds  # one time limit, not one per case
    assert data.planned == len(CASES) and len(data.outcomes) == len(CASES)
    assert workers_left() == []


def test_keep_calling_makes_every_call(fixtures_dir, workers_left):
    suite = Suite("two", "", CASES[:2])
    data = runner.run(suite, [fixture_impl(fixtures_dir, "hangs")], timeout=1.5, keep_calling=True)
    got = by_case(data, "fx-hangs")
    assert len(got) == 2
    for m in got.values():
        assert m.outcome == "timeout" and "no reply within 1.5 s" in m.detail, m.detail
    assert workers_left() == []


def test_a_hang_does_not_skip_another_implementation(fixtures_dir):
    suite = Suite("two", "", CASES[:2])
    data = runner.run(suite, [fixture_impl(fixtures_dir, "hangs"), fixture_impl(fixtures_dir, "correct")],
                      timeout=1.5)
    assert {m.outcome for m in by_case(data, "fx-correct").values()} <= {"identical", "agree"}
    assert len(by_case(data, "fx-hangs")) == 2


# ---- a stop --------------------------------------------------------------------------------------


def interrupt_once_correct_is_done(signum, correct_outcomes):
    """A progress callback that sends `signum` to this process, from another thread, once the
    correct implementation's outcomes are all in (the hanging one never finishes)."""
    sent = []

    def progress(finished, total):
        if finished >= correct_outcomes and not sent:
            timer = threading.Timer(0.3, os.kill, (os.getpid(), signum))
            timer.daemon = True
            timer.start()
            sent.append(timer)

    return progress, sent


@pytest.mark.parametrize("signum, handled", [(signal.SIGINT, True), (signal.SIGTERM, True),
                                             (signal.SIGINT, False)],
                         ids=["sigint-handled", "sigterm-handled", "plain-keyboardinterrupt"])
def test_a_stop_ends_every_worker_and_keeps_what_finished(fixtures_dir, signum, handled, workers_left):
    impls = [fixture_impl(fixtures_dir, "correct"), fixture_impl(fixtures_dir, "hangs")]
    progress, sent = interrupt_once_correct_is_done(signum, len(CASES))
    start = time.perf_counter()
    with pytest.raises(Interrupted) as err:
        if handled:
            with interrupts.handled():
                runner.run(SUITE, impls, timeout=30, progress=progress)
        else:
            runner.run(SUITE, impls, timeout=30, progress=progress)
    seconds = time.perf_counter() - start
    for timer in sent:
        timer.join()
    assert sent, "the correct implementation's outcomes never came in"
    stop = err.value
    assert stop.signum == signum and stop.exit_code == 128 + signum
    assert seconds < 20, seconds  # stopped, not waited out to the 30 s limit
    partial = stop.partial
    assert isinstance(partial, runner.RunData)
    correct = by_case(partial, "fx-correct")
    assert set(correct) == {c.id for c in CASES}
    assert {m.outcome for m in correct.values()} <= {"identical", "agree"}
    assert by_case(partial, "fx-hangs") == {}  # its call was cut short: nothing is made up for it
    assert partial.planned == 2 * len(CASES)
    assert partial.seconds > 0
    assert workers_left() == []


def test_engine_marks_a_stopped_run_incomplete(fixtures_dir, workers_left):
    from normdiff.harness.engine import api as engine

    impls = [fixture_impl(fixtures_dir, "correct"), fixture_impl(fixtures_dir, "hangs")]
    progress, sent = interrupt_once_correct_is_done(signal.SIGTERM, len(CASES))
    with pytest.raises(Interrupted) as err:
        with interrupts.handled():
            engine.run(SUITE, impls, timeout=30, progress=progress)
    for timer in sent:
        timer.join()
    tables = err.value.partial
    assert tables is not None
    assert tables.meta["incomplete"] == f"stopped by SIGTERM after {len(CASES)} of {2 * len(CASES)} outcomes"
    assert set(tables.results["implementation"]) == {"fx-correct"}
    assert workers_left() == []


# ---- run_suite's arguments, checked before any work -------------------------------------------------


@pytest.fixture
def nothing_runs(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the engine was called")

    monkeypatch.setattr(api.engine, "run", refuse)
    monkeypatch.setattr(runner, "run", refuse)


@pytest.fixture
def correct(fixtures_dir):
    return fixture_impl(fixtures_dir, "correct")


@pytest.mark.parametrize("implementations, words", [
    ([], "select"),
    (["numpy"], "select(['numpy'])"),
    ("numpy", "list of Implementation"),
    ([42], "not an Implementation"),
], ids=["empty", "names", "a-string", "not-an-entry"])
def test_run_suite_refuses_bad_implementations(nothing_runs, implementations, words):
    with pytest.raises(UsageError) as err:
        api.run_suite(SUITE, implementations)
    assert words in str(err.value)


def test_run_suite_refuses_an_implementation_given_twice(nothing_runs, correct):
    with pytest.raises(UsageError, match="twice") as err:
        api.run_suite(SUITE, [correct, correct])
    assert "fx-correct" in str(err.value)


@pytest.mark.parametrize("timeout", ["5", float("nan"), 0, -1, math.inf, True, None, 1e10, 1e300],
                         ids=["str", "nan", "zero", "negative", "inf", "bool", "none", "1e10", "1e300"])
def test_run_suite_refuses_a_bad_timeout(nothing_runs, correct, timeout):
    with pytest.raises(UsageError, match="number of seconds"):
        api.run_suite(SUITE, [correct], timeout=timeout)


def test_run_suite_refuses_a_bad_keep_outputs(nothing_runs, correct):
    with pytest.raises(UsageError, match="keep_outputs must be True, False or 'worst'"):
        api.run_suite(SUITE, [correct], keep_outputs="x")


def test_run_suite_refuses_a_suite_that_is_no_suite(nothing_runs, correct):
    with pytest.raises(UsageError, match="suite must be"):
        api.run_suite(42, [correct])


def test_check_timeout_accepts_positive_numbers():
    assert api.check_timeout(5) == 5.0 and isinstance(api.check_timeout(5), float)
    assert api.check_timeout(0.25) == 0.25


# ---- every argument of the Python API, checked at the door ---------------------------------------------


def _user(op="rms_norm", convention="qwen3", **how):
    from normdiff.harness.commands import usercode

    return usercode.user_implementation(str(FIXTURES / "hostile.py") + ":correct", op, convention, **how)


FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
# (what is called, the argument as given, the words of the refusal: the argument, what it got, what it takes)
MISUSE = [
    ("select", lambda: api.select(3), "select takes a list of implementation names, e.g. select(['numpy', 'torch']); "
                                      "got 3"),
    ("select-full", lambda: api.select(full="yes"), "full must be True or False; got 'yes' (str)"),
    ("progress", lambda: api.run_suite(SUITE, progress="yes"),
     "progress must be None or a function, called as progress(finished, total); got 'yes' (str)"),
    ("progress-true", lambda: api.run_suite(SUITE, progress=True), "progress must be None or a function"),
    ("dask", lambda: api.run_suite(SUITE, dask=1),
     "dask must be None, 'local' or a scheduler address such as 'tcp://HOST:8786'; got 1"),
    ("dask-empty", lambda: api.run_suite(SUITE, dask=" "), "dask must be None, 'local'"),
    ("keep-calling", lambda: api.run_suite(SUITE, keep_calling="yes"), "keep_calling must be True or False; got 'yes'"),
    ("diagnose", lambda: api.run_suite(SUITE, diagnose=1), "diagnose must be True or False; got 1 (int)"),
    ("keep-outputs-1", lambda: api.run_suite(SUITE, keep_outputs=1), "keep_outputs must be True, False or 'worst'; "
                                                                     "got 1"),
    ("passes", lambda: api.run_suite(SUITE, passes="fwd"), "passes must be one of 'forward', 'backward', 'both'; "
                                                           "got 'fwd'"),
    ("suite-empty", lambda: api.run_suite(""), "suite is empty: give a suite name (normdiff list suites) or a path"),
    ("suite-bytes", lambda: api.run_suite(b"smoke"), "suite must be a suite name, a path to a .toml file or a Suite; "
                                                     "got b'smoke' (bytes)"),
    ("check-impl", lambda: check.check("my_norm.py:f"), "impl must be an Implementation, e.g. "
                                                        "usercode.user_implementation("),
    ("check-registry-impl", lambda: check.check(api.select(["numpy"])[0]),
     "check judges an implementation of one op under one convention; numpy implements"),
    ("check-eps", lambda: check.check(_user(), eps=float("nan")), "eps must be a finite number above 0, e.g. 1e-6; "
                                                                  "got nan"),
    ("check-dtypes", lambda: check.check(_user(), dtypes=3), "dtypes must be a name or a list of names (strings); "
                                                             "got 3 (int)"),
    ("check-keep-calling", lambda: check.check(_user(), keep_calling=1), "keep_calling must be True or False"),
    ("identify-keep-calling", lambda: identify.identify(_user(), keep_calling="yes"), "keep_calling must be True or "
                                                                                       "False; got 'yes' (str)"),
    ("user-op", lambda: _user(op=3), "op must be an op name (a string), e.g. 'l2_norm'; got 3 (int)"),
    ("user-framework", lambda: _user(framework="pytorch"), "unknown framework 'pytorch'; known: jax, keras, mlx, "
                                                           "numpy, onnxruntime, tinygrad, torch, triton, triton_gpu; did you mean 'torch'?"),
    ("user-call", lambda: _user(call=3), "call must be a string (a template such as 'f(x, weight, eps=eps)', or '' "
                                         "for none); got 3 (int)"),
    ("user-target", lambda: usercode.user_implementation(None, "rms_norm", "qwen3"),
     "target must be FILE.py:NAME, package.module:NAME or FILE.onnx (a string or a pathlib.Path); got None"),
    ("strategies-op", lambda: nds.cases(op=3), "op must be a name or a list of names (strings); got 3 (int)"),
    ("strategies-eps", lambda: nds.cases(eps=["x"]), "eps must be a finite number above 0, e.g. 1e-6; got 'x'"),
    ("strategies-pairs", lambda: nds.cases(pairs=[3]), "pairs holds (op, convention) pairs or 'op@convention' strings; "
                                                       "got 3"),
    ("strategies-sample", lambda: nds.samples("x"), "max_sample must be a whole number >= 0; got 'x'"),
]


@pytest.mark.parametrize("call, says", [pytest.param(c, s, id=i) for i, c, s in MISUSE])
def test_the_python_api_refuses_a_wrong_argument_at_the_door(nothing_runs, call, says):
    with pytest.raises(UsageError) as err:
        call()
    assert says in str(err.value), str(err.value)


def test_names_paths_and_bools_are_taken_as_the_cli_takes_them(nothing_runs, tmp_path):
    assert [i.name for i in api.select(["NumPy", "numpy"])] == ["numpy"]
    impl = _user(op="RMS_norm", convention="Qwen-3", framework="NumPy")
    assert impl.op_conventions == frozenset({("rms_norm", "qwen3")}) and impl.framework == "numpy"
    assert api.check_suite(Path(__file__).resolve().parents[3] / "cases" / "suites" / "smoke.toml").name == "smoke"
    assert api.check_suite("Smoke").name == "smoke"
    assert nds.allowed_pairs("RMS_norm", "Qwen3") == (("rms_norm", "qwen3"),)
    with pytest.raises(AssertionError, match="the engine was called"):  # every argument passed the door
        api.run_suite(Path(__file__).resolve().parents[3] / "cases" / "suites" / "smoke.toml", [impl],
                      keep_outputs="worst", keep_calling=True, progress=lambda done, total: None, passes="forward")


# ---- two runs in two threads --------------------------------------------------------------------------


def _table(report):
    from normdiff.harness.engine.columns import C

    columns = [C.case_id, C.implementation, C.outcome, C.max_ulp, C.rel_l2, C.detail]
    return report.results[columns].sort_values(columns[:2]).reset_index(drop=True)


def test_two_runs_in_two_threads_give_what_each_gives_alone(fixtures_dir, workers_left):
    """Each run's workers, temporary folder, results and GIL switch interval are its own: the second
    run starts while the first runs, and the first ends while the second still runs (each one's
    progress callback holds it until the other has got that far), the order in which a run that
    restores what it found would leave the first one's interval behind."""
    import sys

    from normdiff.cases.suites import Suite as _Suite

    first = (Suite("first", "", CASES[:2]), [fixture_impl(fixtures_dir, "correct"), fixture_impl(fixtures_dir,
                                                                                               "eps_outside")])
    second = (_Suite("second", "", (CASES[2], Case.of("rms_norm", "qwen3", "bfloat16", "4x128", weight="trained",
                                                      sample=1))),
              [fixture_impl(fixtures_dir, "doubles"), *api.select(["numpy"])])
    alone = [_table(api.run_suite(*run, timeout=30)) for run in (first, second)]
    interval = sys.getswitchinterval()
    first_runs, second_runs, first_done = threading.Event(), threading.Event(), threading.Event()
    got, failed = {}, []

    def hold_first(done, total):
        first_runs.set()
        second_runs.wait(60)

    def hold_second(done, total):
        second_runs.set()
        first_done.wait(60)

    def run(name, args, progress, then=None):
        try:
            got[name] = _table(api.run_suite(*args, timeout=30, progress=progress))
        except BaseException as exc:  # noqa: BLE001 - said below, on the test's thread
            failed.append(exc)
        finally:
            if then is not None:
                then.set()

    threads = [threading.Thread(target=run, args=("first", first, hold_first, first_done))]
    threads[0].start()
    assert first_runs.wait(60)
    threads.append(threading.Thread(target=run, args=("second", second, hold_second)))
    threads[1].start()
    for t in threads:
        t.join(120)
    assert not failed, failed
    assert got["first"].equals(alone[0]) and got["second"].equals(alone[1])
    assert sys.getswitchinterval() == interval
    assert workers_left() == []


def test_a_second_dask_run_in_another_thread_is_refused(correct):
    from normdiff.harness.engine import campaign

    assert campaign._IN_USE.acquire(blocking=False)  # a Dask run of another thread is under way
    try:
        with pytest.raises(UsageError, match="another run of this process \\(in another thread\\) is using Dask"):
            api.run_suite(SUITE, [correct], dask="local")
    finally:
        campaign._IN_USE.release()


def test_what_a_local_clusters_nannies_write_into_the_environment_reaches_no_other_runs_worker(monkeypatch):
    from normdiff.harness.engine import campaign, pool

    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    with campaign._environment_kept():
        os.environ["OMP_NUM_THREADS"] = "1"  # as a nanny does when it starts a Dask worker
        os.environ["__DASK_PARENT_PID"] = "1"
        assert pool.environment()["OMP_NUM_THREADS"] == "4" and "__DASK_PARENT_PID" not in pool.environment()
    assert os.environ["OMP_NUM_THREADS"] == "4" and pool.environment()["OMP_NUM_THREADS"] == "4"
