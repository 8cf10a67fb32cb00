"""Triton kernels compiled and run on a CUDA (or ROCm) GPU: the same user code as the `triton`
framework's, without the interpreter, its tensors on the device. `normdiff check` runs a Triton
target here too, beside the interpreter's run, where a GPU is present, and shows the two side by side
(harness/commands/on_device.py); without one it says why it did not. Never detected from a file:
`triton` (the interpreter, any machine) is a Triton file's framework."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from normdiff.implementations.frameworks import torch as torch_framework
from normdiff.implementations.frameworks.record import Framework

# where a GPU driver shows itself without importing torch (NVIDIA's control device, AMD's kfd)
DRIVER_FILES = ("/dev/nvidiactl", "/dev/nvidia0", "/dev/kfd")


def missing() -> str | None:
    """Why no GPU can run a compiled kernel here, judged without importing torch (the worker's
    setup then asks torch itself)."""
    if any(Path(p).exists() for p in DRIVER_FILES) or shutil.which("nvidia-smi"):
        return None
    return "no GPU here: no NVIDIA or AMD driver (/dev/nvidiactl, /dev/kfd absent, no nvidia-smi)"


def setup() -> None:
    """Compiled, not interpreted, and every tensor on the GPU: torch's from_numpy, which the torch
    framework's leaves, upstream gradients and weights are made by, moves its tensor there, in this
    worker only (it runs nothing else)."""
    os.environ.pop("TRITON_INTERPRET", None)
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError(f"torch {torch.__version__} sees no GPU (torch.cuda.is_available() is False): "
                           "a CPU build, or no device visible to this process")
    on_the_cpu = torch_framework.from_numpy

    def on_the_gpu(array):
        """The same bits on the GPU, in the same strides (a padded or transposed layout stays one)."""
        tensor = on_the_cpu(array)
        moved = torch.empty_strided(tuple(tensor.shape), tuple(tensor.stride()), dtype=tensor.dtype, device="cuda")
        return moved.copy_(tensor)

    torch_framework.from_numpy = on_the_gpu


def _prepare_module(module, x):
    prepared = torch_framework.prepare_module(module, x)
    return prepared.cuda() if hasattr(prepared, "cuda") and hasattr(prepared, "parameters") else prepared


FRAMEWORK = Framework("triton_gpu", modules=("triton", "torch"), extra="triton", distributions=("triton", "torch"),
                      user_code=True, to_numpy=torch_framework.to_numpy,
                      from_numpy=lambda array: torch_framework.from_numpy(array),  # as setup leaves it
                      strides=True, setup=setup, missing=missing, prepare_module=_prepare_module,
                      weights=torch_framework.weights, set_weight=torch_framework.set_weight,
                      differentiate=torch_framework.differentiate)
