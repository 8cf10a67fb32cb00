"""Fixtures every test folder shares: the fixtures folder, and `small_report`, a small run with
every kind of row the report views must show (agreeing, disagreeing only in one regime, disagreeing
everywhere, raising, not installed, not implementing a pair, and two mutants: one caught, one
missed). It runs once per session (a few seconds: NumPy fixtures only)."""
import os
import signal
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"

# A job a non-interactive shell starts in the background (`make test &`) begins with SIGINT ignored,
# and Python then keeps it ignored: the tests that press Ctrl-C (a stop keeps what finished, a closed
# session leaves no process) would wait their hangs out instead. They are about Python's default
# KeyboardInterrupt, which a terminal's `make test` has: give it to the tests too.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# Set before any test module imports jax_own (which reads it at import): tests never write into the
# user's ~/.cache, and repeated local runs reuse compiled JAX programs (and tinygrad's kernels) from
# the ignored .pytest_cache.
os.environ.setdefault("NORMDIFF_JAX_CACHE", str(Path(__file__).parent.parent / ".pytest_cache" / "normdiff-jax"))
os.environ.setdefault("NORMDIFF_TINYGRAD_CACHE", str(Path(__file__).parent.parent / ".pytest_cache" / "normdiff-tinygrad"))

from normdiff.cases.model import Case  # noqa: E402
from normdiff.cases.suites import Suite  # noqa: E402
from normdiff.harness import api  # noqa: E402
from normdiff.harness.data.conventions import op_conventions  # noqa: E402
from normdiff.implementations.entry import Implementation  # noqa: E402


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    return FIXTURES


# The longest modules, first. `make test` hands whole modules to its xdist workers in collection
# order (loadscope, no reordering); a 200 s module collected last would leave the other core idle
# for its whole length. Scheduling only: measured serially on the 2-core machine, 2026-12-01
# (test_reliability 200 s, test_check_frameworks 153, test_check 112, test_mutants 98,
# test_check_thirdparty 51; every other module under 35 s), and the modules added on 2026-12-05 by a
# full run's --durations (test_identify about 110 s, test_model 90, the reliability modules 30-50 each);
# the corpus (about 340 s in all, in 8 classes of ~40 s that loadscope deals out one by one) before
# the short modules, which then fill the end evenly (it ran last before: one core idle at the end).
LONGEST_FIRST = ("tests/test_reliability.py", "tests/harness/commands/test_identify.py",
                 "tests/harness/commands/test_check_frameworks.py", "tests/harness/commands/test_check.py",
                 "tests/implementations/test_mutants.py", "tests/harness/commands/test_model.py",
                 "tests/test_corpus.py", "tests/test_reliability_inputs.py", "tests/test_reliability_output.py",
                 "tests/harness/commands/test_check_thirdparty.py", "tests/test_reliability_weak.py",
                 "tests/docs/test_notebook.py")


def pytest_collection_modifyitems(config, items):
    def rank(item):
        path = item.nodeid.split("::")[0]
        return LONGEST_FIRST.index(path) if path in LONGEST_FIRST else len(LONGEST_FIRST)
    items.sort(key=rank)  # stable: every module keeps its own order



CASES = (
    Case.of("rms_norm", "qwen3", "bfloat16", "4x128", regime="tiny_rms:1e-3", weight="trained"),
    Case.of("rms_norm", "qwen3", "float32", "4x128", weight="trained"),
    Case.of("l2_norm", "qwen3.5", "float16", "4x64"),
)
RMS = frozenset({("rms_norm", "qwen3")})


def _impls(fixtures_dir):
    entry = lambda attr: f"{fixtures_dir / 'misbehaving.py'}:{attr}"
    every = frozenset(op_conventions())
    return [
        Implementation("fx-correct", "user", "numpy", entry("correct"), every),
        Implementation("fx-doubles", "user", "numpy", entry("doubles"), every),
        Implementation("fx-eps_outside", "user", "numpy", entry("eps_outside"), every),
        Implementation("fx-raises", "user", "numpy", entry("raises"), every),
        Implementation("fx-gone", "user", "numpy", entry("correct"), every, requires=("no_such_module_xyz",)),
        Implementation("fx-rms-only", "user", "numpy", entry("correct"), RMS),
        Implementation("mut-caught", "mutant", "numpy", entry("eps_outside"), RMS),
        Implementation("mut-missed", "mutant", "numpy", entry("correct"), RMS),
    ]


@pytest.fixture(scope="session")
def small_report(fixtures_dir):
    """The report with every output kept (as `keep_outputs=True`)."""
    return api.run_suite(Suite("small", "report views test", CASES), _impls(fixtures_dir), timeout=30,
                         keep_outputs=True)
