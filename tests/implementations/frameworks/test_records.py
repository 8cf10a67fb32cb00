"""The framework records: found by listing their folder, exact bf16 both ways, and installable by the
extra each names (pyproject.toml) at the version constraints.txt pins."""
from __future__ import annotations

import os
import importlib.util
import subprocess
import sys
import tomllib
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from normdiff.implementations.frameworks import FRAMEWORKS, get_framework, to_numpy, user_frameworks

ROOT = Path(__file__).resolve().parents[3]


def test_every_file_in_the_folder_is_a_framework():
    files = {p.stem for p in (ROOT / "implementations" / "frameworks").glob("*.py")} - {"__init__", "record"}
    assert set(FRAMEWORKS) == files == {"numpy", "torch", "jax", "mlx", "keras", "tinygrad", "onnxruntime", "command",
                                        "triton", "triton_gpu"}
    assert list(FRAMEWORKS)[0] == "numpy"
    assert user_frameworks() == ("numpy", "jax", "keras", "mlx", "onnxruntime", "tinygrad", "torch", "triton",
                                "triton_gpu")
    assert get_framework("command").worker == "command" and not get_framework("command").user_code
    with pytest.raises(ValueError, match="unknown framework 'tensorflow'"):
        get_framework("tensorflow")


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


def _runs_here(name: str) -> None:
    record = FRAMEWORKS[name]
    for module in record.modules:  # looked up, not imported
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed (pip install 'normdiff[{record.extra}]')")
    if record.missing():
        pytest.skip(record.missing())


ROUND_TRIP = """
import sys
import ml_dtypes
import numpy as np
from normdiff.implementations.frameworks import FRAMEWORKS, to_numpy

record = FRAMEWORKS[sys.argv[1]]
record.setup()
BF16 = np.array([1.0, -2.5, 3.0e38, 1e-38, 2.0 ** -130, 0.0, -0.0, np.inf, np.nan], dtype=np.float32)
for dtype in (ml_dtypes.bfloat16, np.float16, np.float32):
    with np.errstate(over="ignore"):  # 3e38 is inf in float16
        array = BF16.astype(dtype)
    there = record.from_numpy(array)
    assert not isinstance(there, np.ndarray), type(there)  # the framework's own array (keras': its backend's)
    back = to_numpy(there)
    assert back.dtype == array.dtype and back.shape == array.shape, (back.dtype, back.shape)
    bits = f"u{array.dtype.itemsize}"
    assert np.array_equal(back.view(bits), array.view(bits)), (dtype, back, array)  # every bit: NaN, inf, -0
print("ok")
"""


@pytest.mark.parametrize("name", ["torch", "jax", "mlx", "keras", "tinygrad"])
def test_arrays_cross_exactly_both_ways(name):
    # in a process of its own, as a worker runs each framework (several native runtimes in one
    # process are not something normdiff ever does: MLX aborted in this one once torch, JAX and
    # the test suite's other imports were loaded)
    _runs_here(name)
    proc = subprocess.run([sys.executable, "-c", ROUND_TRIP, name], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stdout + proc.stderr


def test_onnxruntime_feeds_and_returns_bf16_bits_through_io_binding():
    _runs_here("onnxruntime")
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "identity",
                              [helper.make_tensor_value_info("x", TensorProto.BFLOAT16, [len(BF16)])],
                              [helper.make_tensor_value_info("y", TensorProto.BFLOAT16, [len(BF16)])])
    record = FRAMEWORKS["onnxruntime"]
    session = record.load_graph(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    back = record.run_graph(session, {"x": BF16})
    assert back.dtype == ml_dtypes.bfloat16
    assert np.array_equal(back.view(np.uint16), BF16.view(np.uint16))


def test_numpy_arrays_and_plain_values_pass_through():
    assert to_numpy(BF16) is BF16 or np.array_equal(to_numpy(BF16).view(np.uint16), BF16.view(np.uint16))
    assert to_numpy([1.0, 2.0]).dtype == np.float64


def test_tinygrads_kernel_cache_is_a_file_per_compiler_and_can_be_turned_off(monkeypatch, tmp_path):
    from normdiff.implementations.frameworks import tinygrad

    for name in ("CACHELEVEL", "CACHEDB", "CC"):  # (set first: monkeypatch restores what setup() writes)
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    monkeypatch.setenv(tinygrad.CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(tinygrad, "_compiler", lambda: "cc")
    tinygrad.setup()
    assert os.environ["CACHEDB"].startswith(str(tmp_path)) and "CACHELEVEL" not in os.environ
    monkeypatch.setenv("CC", "gcc")  # another compiler: another file
    other = tinygrad._cache_file("gcc")
    assert other != os.environ["CACHEDB"]
    monkeypatch.delenv("CACHEDB")
    monkeypatch.setenv(tinygrad.CACHE_ENV, "")  # no cache
    tinygrad.setup()
    assert os.environ["CACHELEVEL"] == "0" and "CACHEDB" not in os.environ
