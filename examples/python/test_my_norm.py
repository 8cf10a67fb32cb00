"""normdiff's pytest fixture in a project's own tests (docs/quickstart-ci.md): installing normdiff
registers it. The second test fails, naming the bug."""
from my_norm import rms_norm, rms_norm_eps_outside


def test_rms_norm(normdiff):
    normdiff.check(rms_norm, op="rms_norm", convention="llama")


def test_rms_norm_eps_outside(normdiff):
    normdiff.check(rms_norm_eps_outside, op="rms_norm", convention="llama")
