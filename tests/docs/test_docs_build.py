"""The documentation site builds strictly: `sphinx-build -W --keep-going -n` turns every warning, a
broken cross-reference or a cell of the teaching notebook that raises (myst-nb executes it on every
build) into a failure. Built into pytest's tmp_path, never into the repository."""
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NEEDS = ("sphinx", "myst_nb", "furo")


@pytest.mark.slow
def test_the_docs_build_without_a_warning(tmp_path):
    missing = [m for m in NEEDS if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed: the docs extra (pip install -e '.[docs]'; make installs it)")
    done = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-n", "-b", "html",
                           "-d", str(tmp_path / "doctrees"), str(ROOT / "docs"), str(tmp_path / "html")],
                          capture_output=True, text=True, timeout=900, check=False)
    problems = [line for line in (done.stdout + done.stderr).splitlines() if "WARNING" in line or "ERROR" in line]
    assert done.returncode == 0, "\n".join(problems) or done.stderr[-4000:]
    assert (tmp_path / "html" / "index.html").exists() and (tmp_path / "html" / "teaching.html").exists()
