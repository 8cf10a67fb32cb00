"""A small run with every kind of row the report views must show: agreeing, disagreeing only in one
regime, disagreeing everywhere, raising, not installed, not implementing a pair, and two mutants (one
caught, one missed). Runs once per session (a few seconds: NumPy fixtures only)."""
import pytest

from normdiff.cases.model import Case
from normdiff.cases.suites import Suite
from normdiff.harness import api
from normdiff.harness.contracts import pairs
from normdiff.harness.registry import Implementation

CASES = (
    Case("rms_norm", "qwen3", "bfloat16", 4, 128, regime="tiny_rms:1e-3", weights="trained"),
    Case("rms_norm", "qwen3", "float32", 4, 128, weights="trained"),
    Case("l2_norm", "qwen3.5", "float16", 4, 64),
)
RMS = frozenset({("rms_norm", "qwen3")})


def _impls(fixtures_dir):
    entry = lambda attr: f"{fixtures_dir / 'misbehaving.py'}:{attr}"
    every = frozenset(pairs())
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
