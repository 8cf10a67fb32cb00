"""A Triton kernel's host code in normdiff's Triton worker (implementations/kernel_host.py): CUDA
requests mean the CPU, in a Function's backward too, the device's figures are a named GPU's, and
an `empty` float tensor is NaN. Run in a
subprocess: the layer changes torch for the whole process it is installed in."""
import importlib.util
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch not installed")

SCRIPT = """
import torch
from normdiff.implementations import kernel_host
kernel_host.install()

class Twice(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        made = [torch.zeros(2, device="cuda"), x.new_empty(3, device="cuda:0"), x.to("cuda"), x.cuda(),
                torch.empty(2, device=torch.device("cuda"))]
        print("forward", {t.device.type for t in made}, bool(made[1].isnan().all()))
        return x * 2

    @staticmethod
    def backward(ctx, g):  # autograd turns torch function modes off here: a wrapper must work anyway
        with torch.cuda.device(g.device.index):
            locks = torch.empty(4, dtype=torch.int32, device="cuda")
            torch.cuda.synchronize()
        print("backward", torch.empty_like(g, device="cuda").isnan().all().item(), locks.dtype, locks.device.type)
        return g * 2

x = torch.ones(3, requires_grad=True)
print("grad", torch.autograd.grad(Twice.apply(x).sum(), x)[0].tolist())
print("still", torch.cuda.is_available(), x.is_cuda, x.to(torch.float16).dtype)
sms = torch.cuda.get_device_properties(x.device).multi_processor_count  # a grid sized by the device
print("device", sms, torch.cuda.get_device_capability(), "stand-in" in torch.cuda.get_device_name())
"""


def test_cuda_requests_mean_the_cpu_forward_and_backward_the_device_is_a_stand_in_and_empty_floats_are_nan():
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["forward {'cpu'} True", "backward True torch.int32 cpu",
                                        "grad [2.0, 2.0, 2.0]", "still False False torch.float16",
                                        "device 132 (9, 0) True"]
