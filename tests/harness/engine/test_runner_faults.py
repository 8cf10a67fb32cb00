"""The runner under faults: a hang costs one time limit, not one per case; a stop (Ctrl-C, SIGTERM)
ends every worker and comes out as Interrupted with what had finished; and run_suite refuses bad
arguments before any work."""
import math
import os
import signal
import threading
import time

import pytest

from normdiff import interrupts
from normdiff.cases.model import Case
from normdiff.cases.suites import Suite
from normdiff.harness import api
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
