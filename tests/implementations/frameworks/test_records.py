"""The framework records: found by listing their folder, exact bf16 both ways, and installable by the
extra each names (pyproject.toml) at the version constraints.txt pins."""
from __future__ import annotations

import tomllib
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from normdiff.implementations.frameworks import FRAMEWORKS, get_framework, to_numpy, user_frameworks

ROOT = Path(__file__).resolve().parents[3]


def test_every_file_in_the_folder_is_a_framework():
    files = {p.stem for p in (ROOT / "implementations" / "frameworks").glob("*.py")} - {"__init__", "record"}
    assert set(FRAMEWORKS) == files == {"numpy", "torch", "jax", "command"}
    assert list(FRAMEWORKS)[0] == "numpy"
    assert user_frameworks() == ("numpy", "jax", "torch")
    assert get_framework("command").worker == "command" and not get_framework("command").user_code
    with pytest.raises(ValueError, match="unknown framework 'mlx'"):
        get_framework("mlx")


def test_each_extra_exists_and_each_distribution_is_pinned():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    pinned = {line.split("==")[0] for line in (ROOT / "constraints.txt").read_text().splitlines()
              if "==" in line and not line.startswith("#")}
    for record in FRAMEWORKS.values():
        for module in record.modules + tuple(record.libraries):
            extra = record.extra_for(module)
            if record.extra or module in record.libraries:
                assert extra in extras, (record.name, extra)
        assert set(record.distributions) <= pinned, record.name


BF16 = np.array([1.0, -2.5, 3.0e38, 1e-38, 2.0 ** -130, 0.0, -0.0, np.inf, np.nan], dtype=np.float32).astype(
    ml_dtypes.bfloat16)


@pytest.mark.parametrize("name", ["torch", "jax"])
def test_bf16_crosses_exactly_both_ways(name):
    pytest.importorskip(name)
    record = FRAMEWORKS[name]
    back = to_numpy(record.from_numpy(BF16))
    assert back.dtype == ml_dtypes.bfloat16
    assert np.array_equal(back.view(np.uint16), BF16.view(np.uint16))  # every bit, NaN and -0 included


def test_numpy_arrays_and_plain_values_pass_through():
    assert to_numpy(BF16) is BF16 or np.array_equal(to_numpy(BF16).view(np.uint16), BF16.view(np.uint16))
    assert to_numpy([1.0, 2.0]).dtype == np.float64
