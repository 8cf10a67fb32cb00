"""`check_json`: `normdiff check ... --json` run as a user runs it (a fresh process), its exit status
and its one JSON object."""
import json
import subprocess
import sys

import pytest


def _check(*args, timeout: float = 600):
    proc = subprocess.run([sys.executable, "-m", "normdiff.harness.commands.cli", "check", *args, "--json"],
                          capture_output=True, text=True, timeout=timeout)
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1, proc.stdout + proc.stderr  # exactly one JSON object
    return proc.returncode, json.loads(lines[0])


@pytest.fixture(scope="session")
def check_json():
    return _check
