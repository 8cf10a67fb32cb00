"""`workers_left()`: the processes still below this one after a short grace (worker processes are
reaped asynchronously), for the tests that promise none outlives a run or a session."""
import os
import time

import pytest

from normdiff import processes


def _workers_left(seconds: float = 3.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while True:
        left = processes.descendants(os.getpid())
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


@pytest.fixture
def workers_left():
    return _workers_left
