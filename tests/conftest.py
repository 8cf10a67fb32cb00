import os
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"

# Set before any test module imports jax_own (which reads it at import): tests never write into the
# user's ~/.cache, and repeated local runs reuse compiled JAX programs from the ignored .pytest_cache.
os.environ.setdefault("NORMDIFF_JAX_CACHE", str(Path(__file__).parent.parent / ".pytest_cache" / "normdiff-jax"))


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    return FIXTURES
