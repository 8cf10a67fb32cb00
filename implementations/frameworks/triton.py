"""Triton: code that launches `@triton.jit` kernels on torch tensors (a function, an
autograd.Function such as Liger's, a module), run on the CPU by Triton's interpreter
(TRITON_INTERPRET=1) under normdiff's faithful layer (implementations/triton_interpreter.py), in a
worker of its own: the variable must be set before Triton decorates a kernel, and the layer patches
the interpreter for the whole process. Its arrays are torch's (CPU tensors in, tensors out), and its
backward is torch's autograd, which runs a Function's own backward kernels."""
from __future__ import annotations

import os

from normdiff.implementations.frameworks import torch as torch_framework
from normdiff.implementations.frameworks.record import Framework

INTERPRET = "TRITON_INTERPRET"


def setup() -> None:
    """The interpreter, with the faithful layer installed, before any kernel is defined (a user's
    module decorates its kernels when it is imported, and keeps the stub libdevice functions it
    imports by name)."""
    os.environ[INTERPRET] = "1"
    from normdiff.implementations import kernel_host, triton_interpreter

    triton_interpreter.install()
    kernel_host.install()  # its host code: device="cuda" means the CPU, uninitialized floats are NaN


FRAMEWORK = Framework("triton", modules=("triton", "torch"), extra="triton", distributions=("triton", "torch"),
                      libraries={"liger_kernel": "triton"}, user_code=True,
                      # a file that imports triton launches kernels (its torch is only their arrays)
                      detect=("triton", "liger_kernel"),
                      to_numpy=torch_framework.to_numpy, from_numpy=torch_framework.from_numpy, strides=True,
                      setup=setup, module_types=(), prepare_module=torch_framework.prepare_module,
                      weights=torch_framework.weights, set_weight=torch_framework.set_weight,
                      differentiate=torch_framework.differentiate)
