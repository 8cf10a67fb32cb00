import os
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    return FIXTURES


@pytest.fixture(autouse=True, scope="session")
def _jax_cache(tmp_path_factory):
    # tests never write into the user's cache directory
    os.environ.setdefault("NORMDIFF_JAX_CACHE", str(tmp_path_factory.mktemp("jax-cache")))
