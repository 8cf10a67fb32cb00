"""Finding the user's code and its framework in the parent process, without importing it: what a
file imports at top level (never a lazy import inside a function), what a class derives from, which
framework a library module belongs to; a one-call probe only when the imports cannot decide."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap

import pytest

from normdiff.harness.commands.usercode import TargetError, detect_framework, user_implementation
from normdiff.implementations.target import locate


def _file(tmp_path, source: str, name: str = "mine.py") -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(source))
    return str(path)


def detect(target: str, op: str = "rms_norm") -> str:
    return detect_framework(locate(target), op)


@pytest.mark.parametrize("source, expected", [
    # a lazy import inside a helper says nothing about what the function takes
    ("import numpy as np\ndef _t():\n    import torch\n    return torch\ndef f(x, weight, eps):\n    return x\n", "numpy"),
    ("import torch\ndef f(x, weight, eps):\n    return x\n", "torch"),
    ("try:\n    import mlx.core as mx\nexcept ImportError:\n    mx = None\ndef f(x, weight, eps):\n    return x\n", "mlx"),
    ("from tinygrad import Tensor\ndef f(x, weight, eps):\n    return x\n", "tinygrad"),
    ("import os\nos.environ['KERAS_BACKEND'] = 'jax'\nimport keras\ndef f(x, weight, eps):\n    return x\n", "keras"),
])
def test_a_function_is_its_files_top_level_imports(tmp_path, source, expected):
    assert detect(f"{_file(tmp_path, source)}:f") == expected


@pytest.mark.parametrize("source, expected", [
    ("from torch import nn\nclass C(nn.Module):\n    pass\n", "torch"),
    ("import torch.nn\nclass C(torch.nn.Module):\n    pass\n", "torch"),
    ("from flax import nnx\nclass C(nnx.Module):\n    pass\n", "jax"),
    ("import mlx.nn as nn\nclass C(nn.Module):\n    pass\n", "mlx"),
    ("import keras\nclass C(keras.layers.Layer):\n    pass\n", "keras"),
    # a base defined in the file: the file's imports decide
    ("import torch\nclass Base:\n    pass\nclass C(Base):\n    pass\n", "torch"),
])
def test_a_class_is_its_bases_framework(tmp_path, source, expected):
    assert detect(f"{_file(tmp_path, source)}:C") == expected


@pytest.mark.parametrize("target, expected", [
    ("mlx.core.fast:rms_norm", "mlx"), ("keras.ops:rms_normalization", "keras"),
    ("keras.layers:RMSNormalization", "keras"), ("flax.nnx:RMSNorm", "jax"), ("tinygrad.nn:RMSNorm", "tinygrad"),
    ("torch.nn:RMSNorm", "torch"),
])
def test_a_library_module_is_its_frameworks_without_importing_it(target, expected):
    root = target.split(".")[0]
    if importlib.util.find_spec(root) is None:
        pytest.skip(f"{root} is not installed")
    code = ("import sys; from normdiff.harness.commands.usercode import detect_framework; from normdiff.implementations.target import locate; "
            f"print(detect_framework(locate({target!r}), 'rms_norm')); "
            "print(sorted({'torch', 'jax', 'mlx', 'keras', 'tinygrad', 'flax'} & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60).stdout.split("\n")
    assert out[0] == expected and out[1] == "[]", out


def test_a_library_module_file_is_read_for_its_imports():
    if importlib.util.find_spec("transformers") is None:
        pytest.skip("transformers is not installed")
    # found through the package's folders, not imported: LlamaRMSNorm derives from torch's nn.Module
    assert detect("transformers.models.llama.modeling_llama:LlamaRMSNorm") == "torch"


def test_an_onnx_file_is_onnxruntimes(tmp_path):
    path = tmp_path / "model.onnx"
    path.write_bytes(b"")
    assert detect(str(path)) == "onnxruntime"


def test_several_frameworks_at_top_level_are_settled_by_calling_it_once(tmp_path):
    for module in ("torch", "jax"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed")
    path = _file(tmp_path, """
        import jax.numpy as jnp
        import torch

        def f(x, weight, eps):
            xf = x.float()
            return weight * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
        """)
    assert detect(f"{path}:f") == "torch"


@pytest.mark.parametrize("target, says", [
    ("no_colon_here", "is not FILE.py:NAME, package.module:NAME or FILE.onnx"),
    ("mine.py:not-a-name", "is not FILE.py:NAME"),
    ("nope.py:f", "file not found: nope.py"),
    ("missing.onnx", "file not found: missing.onnx"),
    ("a_module_that_is_not_installed:f", "module 'a_module_that_is_not_installed' not found"),
])
def test_bad_targets_say_what_is_wrong(target, says):
    with pytest.raises(TargetError, match=says.replace("(", r"\(").replace(".", r"\.")):
        detect(target)


@pytest.mark.parametrize("on_path", [False, True], ids=["a-folder", "a-namespace-package-on-the-path"])
@pytest.mark.parametrize("target", ["a_folder:f", "a_folder"])
def test_a_target_that_is_a_folder_says_so(tmp_path, monkeypatch, target, on_path):
    (tmp_path / "a_folder").mkdir()
    if on_path:  # python -m puts the current folder on the path: a folder there is a namespace package, no module
        monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(TargetError, match=rf"^target '{target}': a_folder is a folder, not a Python file; give "
                                          r"FILE\.py:NAME \(a file in it\)"):
        detect(target)


def test_a_name_the_file_does_not_define_lists_what_it_does(tmp_path):
    path = _file(tmp_path, "import numpy as np\nfrom numpy import sqrt\ndef rms_norm(x, weight, eps):\n    return x\n"
                           "SCALE = 2\n")
    with pytest.raises(TargetError, match="defines no 'rms_nrom'; it defines: SCALE, rms_norm"):
        detect(f"{path}:rms_nrom")
    assert detect(f"{path}:sqrt") == "numpy"  # an imported name is a name it has


def test_the_implementation_carries_what_repro_needs(tmp_path):
    path = _file(tmp_path, "def f(x, weight, eps):\n    return x\n")
    impl = user_implementation(f"{path}:f", "rms_norm", "qwen3", call="f(x, weight, eps=eps)")
    assert impl.replay == ("--target", f"{path}:f", "--call", "f(x, weight, eps=eps)")
    forced = user_implementation("keras.ops:rms_normalization", "rms_norm", "olmo2", framework="keras",
                                 init="", weight_attr="")
    assert forced.name == "keras.ops:rms_normalization"
    assert forced.replay == ("--target", "keras.ops:rms_normalization", "--framework", "keras")


def test_the_probe_waits_for_no_thread_or_child_the_code_leaves(fixtures_dir):
    """Code that leaves a thread running at import (Python waits for it at exit) and forks a child
    (which holds the probe's output open): the probe answers as soon as it has, and what the code
    left is killed with it, also where no normdiff command adopts and kills it afterwards."""
    import os
    import time

    from normdiff import processes

    target = fixtures_dir / "hostile_modules" / "leaves_a_thread_at_import.py"
    start = time.monotonic()
    assert detect(f"{target}:rms_norm") == "numpy"  # its imports say mlx and tinygrad; the probe decides
    assert time.monotonic() - start < 30
    assert processes.descendants(os.getpid()) == []
