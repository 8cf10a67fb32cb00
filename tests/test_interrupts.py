"""normdiff/interrupts.py: within `handled()`, SIGINT, SIGTERM and SIGHUP raise Interrupted (so every
`finally` runs), with the exit status a shell gives; the handlers are put back after."""
import os
import signal
import threading
import time

import pytest

from normdiff import interrupts
from normdiff.interrupts import Interrupted, as_interrupted

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="POSIX signals")


def raise_in_block(signum):
    ran_finally = []
    with pytest.raises(Interrupted) as err:
        with interrupts.handled():
            try:
                os.kill(os.getpid(), signum)
                time.sleep(5)  # the handler raises at once; the sleep is interrupted
                pytest.fail("no Interrupted raised")
            finally:
                ran_finally.append(True)
    assert ran_finally == [True]
    return err.value


@pytest.mark.parametrize("signum, name, code", [(signal.SIGTERM, "SIGTERM", 143), (signal.SIGHUP, "SIGHUP", 129),
                                                 (signal.SIGINT, "SIGINT", 130)])
def test_each_signal_raises_interrupted_with_its_exit_status(signum, name, code):
    stop = raise_in_block(signum)
    assert stop.signum == signum
    assert stop.name == name
    assert stop.exit_code == code
    assert stop.partial is None
    assert isinstance(stop, KeyboardInterrupt)  # code that catches Ctrl-C catches all three


def test_handlers_are_restored_after_the_block():
    before = {s: signal.getsignal(s) for s in interrupts.SIGNALS}
    with interrupts.handled():
        assert all(signal.getsignal(s) is interrupts._raise for s in interrupts.SIGNALS)
    assert {s: signal.getsignal(s) for s in interrupts.SIGNALS} == before


def test_handlers_are_restored_after_an_interrupt_and_after_an_error():
    before = {s: signal.getsignal(s) for s in interrupts.SIGNALS}
    raise_in_block(signal.SIGTERM)
    assert {s: signal.getsignal(s) for s in interrupts.SIGNALS} == before
    with pytest.raises(ValueError):
        with interrupts.handled():
            raise ValueError("x")
    assert {s: signal.getsignal(s) for s in interrupts.SIGNALS} == before


def test_a_callers_own_handler_is_restored():
    seen = []
    previous = signal.signal(signal.SIGHUP, lambda s, f: seen.append(s))
    try:
        raise_in_block(signal.SIGHUP)
        os.kill(os.getpid(), signal.SIGHUP)
        time.sleep(0.05)
        assert seen == [signal.SIGHUP]
    finally:
        signal.signal(signal.SIGHUP, previous)


def test_outside_the_main_thread_handled_installs_nothing():
    before = {s: signal.getsignal(s) for s in interrupts.SIGNALS}
    errors = []

    def body():
        try:
            with interrupts.handled():
                pass
        except BaseException as exc:  # signal.signal in a thread raises ValueError
            errors.append(exc)

    t = threading.Thread(target=body)
    t.start()
    t.join()
    assert errors == []
    assert {s: signal.getsignal(s) for s in interrupts.SIGNALS} == before


def test_as_interrupted():
    plain = as_interrupted(KeyboardInterrupt())
    assert isinstance(plain, Interrupted)
    assert plain.signum == signal.SIGINT and plain.exit_code == 130 and plain.name == "SIGINT"
    stop = Interrupted(signal.SIGTERM, partial="x")
    assert as_interrupted(stop) is stop and stop.partial == "x"
