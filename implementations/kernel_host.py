"""A Triton kernel's host code (the Python that allocates and launches), written for a GPU and run
on the CPU in normdiff's Triton worker (frameworks/triton.py): two things it meets there.

CUDA requests mean the CPU. Host code says where it runs: `torch.empty(M, device='cuda')` for the
statistics it saves (Triton's own LayerNorm tutorial, and the kernels copied from it),
`locks.cuda()`, `with torch.cuda.device(x.device.index)`, `torch.cuda.synchronize()`. On a CPU build
of torch each raises ("Torch not compiled with CUDA enabled") before a kernel runs. Here a tensor
asked for on a CUDA device is made on the CPU, and the device context, stream and synchronisation
calls do nothing: where a tensor lives changes no value a kernel computes. Host code that sizes its
grid by the device (`torch.cuda.get_device_properties(x.device).multi_processor_count`: the dw
partials of Tri Dao's LayerNorm in mamba_ssm, flash-attn and torchtitan) is answered as a named GPU
would answer, an H100 SXM (132 SMs, compute capability 9.0), so that the work is split as it is
there; the split decides how a float32 sum is grouped, never what is computed. Not pretended:
`torch.cuda.is_available()` and a tensor's `is_cuda` stay False, so code that asserts it is on a GPU
still says so (the check reports the assertion as why its cases could not run).

Uninitialized memory is NaN. `torch.empty` on a GPU hands back whatever the caching allocator held
last, so a kernel that reads memory it never wrote (a dw partial buffer summed whole when fewer rows
than its groups wrote to it) gives numbers that change from call to call, and often look right. Here
every floating tensor made by an `empty` factory is filled with NaN, so such a read is NaN, every
time, and the case disagrees where it reads it (PyTorch's own `fill_uninitialized_memory` does this
under deterministic mode). Integer buffers (locks, counters) are left as allocated: a lock full of
garbage would spin forever where a GPU's happens to hold zeros.
"""
from __future__ import annotations

import contextlib

_INSTALLED = False

# torch's functions and Tensor methods that take a `device` (the factories, the *_like and new_*
# ones), and the two that move a tensor to one (.to, .cuda). Replaced by name, not through a
# TorchFunctionMode: autograd runs a Function's backward with the modes off, and the backward is
# where a kernel's host code allocates its dw partials and locks.
FACTORIES = ("empty", "zeros", "ones", "full", "empty_like", "zeros_like", "ones_like", "full_like", "rand",
             "randn", "randint", "rand_like", "randn_like", "arange", "linspace", "eye", "tensor", "as_tensor",
             "empty_strided")
NEW = ("new_empty", "new_zeros", "new_ones", "new_full", "new_tensor", "new_empty_strided")
UNINITIALIZED = ("empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided")


def install() -> None:
    """CUDA requests on the CPU, and NaN for uninitialized floats, in this process (idempotent; the
    Triton worker only)."""
    global _INSTALLED
    if _INSTALLED:
        return
    import torch

    for owner, names in ((torch, FACTORIES), (torch.Tensor, NEW)):
        for name in names:
            if hasattr(owner, name):
                setattr(owner, name, _on_the_cpu(getattr(owner, name), poison=name in UNINITIALIZED))
    to = torch.Tensor.to
    torch.Tensor.to = lambda self, *args, **kwargs: to(self, *_cpu_positional(args), **_cpu_keyword(kwargs))
    torch.Tensor.cuda = lambda self, device=None, non_blocking=False, memory_format=None: self
    _device_calls(torch)
    _INSTALLED = True


def is_cuda(device) -> bool:
    """Whether a `device` argument names a CUDA device ("cuda", "cuda:1", torch.device, or a bare
    index, which torch reads as a CUDA device)."""
    import torch

    if device is None or isinstance(device, bool):
        return False
    if isinstance(device, int):
        return True
    if isinstance(device, (str, torch.device)):
        return torch.device(device).type == "cuda"
    return False


def _cpu_keyword(kwargs: dict) -> dict:
    return {**kwargs, "device": "cpu"} if is_cuda(kwargs.get("device")) else kwargs


def _cpu_positional(args: tuple) -> tuple:
    """Tensor.to's arguments with a CUDA device in first place made "cpu" (to(dtype) and to(tensor)
    are left as they are)."""
    import torch

    if args and not isinstance(args[0], (torch.dtype, torch.Tensor)) and is_cuda(args[0]):
        return ("cpu", *args[1:])
    return args


def _on_the_cpu(function, poison: bool):
    def call(*args, **kwargs):
        made = function(*args, **_cpu_keyword(kwargs))
        if poison and made.is_floating_point():
            made.fill_(float("nan"))
        return made

    call.__name__ = call.__qualname__ = getattr(function, "__name__", "call")
    call.__doc__ = getattr(function, "__doc__", None)
    return call


class _NoStream:
    """What torch.cuda.current_stream() gives here: a stream with nothing to wait for."""

    def synchronize(self) -> None:
        return None

    def wait_stream(self, other) -> None:
        return None


class StandInGPU:
    """What torch.cuda.get_device_properties answers here: an H100 SXM's figures, by name a stand-in."""

    name = "NVIDIA H100 80GB HBM3 (normdiff's stand-in: kernels run on the CPU, interpreted)"
    major, minor = 9, 0
    multi_processor_count = 132
    total_memory = 80 * 2 ** 30
    warp_size = 32
    max_threads_per_multi_processor = 2048
    shared_memory_per_block = 48 * 1024
    shared_memory_per_block_optin = 227 * 1024
    regs_per_multiprocessor = 65536
    L2_cache_size = 50 * 2 ** 20


def _device_calls(torch) -> None:
    """torch.cuda's device context, device index, stream and synchronisation calls: on the CPU there
    is one device and nothing runs asynchronously; what the device is: the stand-in GPU's figures."""
    cuda = torch.cuda
    cuda.get_device_properties = lambda device=None: StandInGPU()
    cuda.get_device_capability = lambda device=None: (StandInGPU.major, StandInGPU.minor)
    cuda.get_device_name = lambda device=None: StandInGPU.name
    cuda.device = lambda device=None: contextlib.nullcontext()
    cuda.synchronize = lambda device=None: None
    cuda.current_device = lambda: 0
    cuda.set_device = lambda device: None
    cuda.current_stream = lambda device=None: _NoStream()
    cuda.default_stream = lambda device=None: _NoStream()
