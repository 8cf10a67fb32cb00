"""The faithful layer over Triton's interpreter (implementations/triton_interpreter.py): each fix
against what the GPU computes (torch's CPU arithmetic rounds bf16 the same way: each operation in
float32, then to nearest even). Every test here fails on the bare interpreter: a bf16 product is
garbage there, an fp32 -> bf16 store truncates, a Python float is no fp32 scalar, libdevice returns
None, a bf16 sum adds bit patterns, an autotuned kernel finds no driver to benchmark with, a bf16
atomic is refused, a grid given as a list is refused, an access past every tensor reads or corrupts
the host's memory, and there is no driver to ask for the device."""
import importlib.util
import os

import numpy as np
import pytest

pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is None,
                                reason="triton not installed (pip install 'normdiff[triton]')")

if importlib.util.find_spec("triton") is not None:
    os.environ["TRITON_INTERPRET"] = "1"  # before any kernel below is decorated
    from normdiff.implementations import triton_interpreter

    triton_interpreter.install()
    import ml_dtypes
    import torch
    import triton
    import triton.language as tl
    from triton.language.extra import libdevice

    @triton.jit
    def _multiply(a_ptr, b_ptr, out_ptr, N: tl.constexpr):
        i = tl.arange(0, N)
        tl.store(out_ptr + i, tl.load(a_ptr + i) * tl.load(b_ptr + i))

    @triton.jit
    def _store(a_ptr, out_ptr, n, N: tl.constexpr):
        i = tl.arange(0, N)
        mask = i < n  # a row narrower than the block: the masked elements are 0 (a handle's .all() is False)
        tl.store(out_ptr + i, tl.load(a_ptr + i, mask=mask, other=0.0).to(out_ptr.dtype.element_ty), mask=mask)

    @triton.jit
    def _rsqrt_eps(a_ptr, out_ptr, eps, N: tl.constexpr):
        i = tl.arange(0, N)
        tl.store(out_ptr + i, libdevice.rsqrt(tl.load(a_ptr + i) + eps.to(tl.float32)))

    @triton.jit
    def _reduce(a_ptr, out_ptr, N: tl.constexpr):
        i = tl.arange(0, N)
        a = tl.load(a_ptr + i)
        tl.store(out_ptr, tl.sum(a, 0))
        tl.store(out_ptr + 1, tl.max(a, 0))
        tl.store(out_ptr + 2, tl.min(a, 0))

    @triton.autotune(configs=[triton.Config({"BLOCK": 64}), triton.Config({"BLOCK": 128})], key=["n"])
    @triton.jit
    def _autotuned_copy(a_ptr, out_ptr, n, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(out_ptr + i, tl.load(a_ptr + i, mask=i < n) * 2, mask=i < n)

    @triton.jit
    def _copy_rows(a_ptr, out_ptr, stride, n, BLOCK: tl.constexpr, MASK_LOAD: tl.constexpr,
                   MASK_STORE: tl.constexpr):
        i = tl.arange(0, BLOCK)
        row = tl.program_id(0)
        loaded = tl.load(a_ptr + row * stride + i, mask=(i < n) if MASK_LOAD else (i < BLOCK))
        tl.store(out_ptr + row * BLOCK + i, loaded, mask=(i < n) if MASK_STORE else (i < BLOCK))

    @triton.jit
    def _row_sums_in_place(a_ptr, n, BLOCK: tl.constexpr):  # one tensor: any address past it is outside
        i = tl.arange(0, BLOCK)
        row = tl.program_id(0)
        tl.store(a_ptr + row * n, tl.sum(tl.load(a_ptr + row * n + i).to(tl.float32), 0))  # the load unmasked

    @triton.jit
    def _accumulate(a_ptr, out_ptr, N: tl.constexpr):
        i = tl.arange(0, N)
        tl.atomic_add(out_ptr + i % 4, tl.load(a_ptr + i))  # four lanes on each address

    @triton.jit
    def _unknown_extern(a_ptr, out_ptr, N: tl.constexpr):
        i = tl.arange(0, N)
        tl.store(out_ptr + i, libdevice.j0(tl.load(a_ptr + i)))

N = 256


def _bf16(values):
    return torch.tensor(np.asarray(values, dtype=np.float32)).bfloat16()


def test_bf16_arithmetic_rounds_each_product_once_to_nearest_even():
    g = np.random.default_rng(0)
    a, b = _bf16(g.standard_normal(N)), _bf16(g.standard_normal(N))
    out = torch.empty(N, dtype=torch.bfloat16)
    _multiply[(1,)](a, b, out, N=N)
    assert torch.equal(out, a * b)  # torch's bf16 product: float32, then nearest even


@pytest.mark.parametrize("dtype", ["bfloat16", "float8_e4m3fn", "float8_e5m2"])
def test_a_float32_store_to_a_narrow_type_rounds_to_nearest_even_and_fp8_saturates(dtype):
    g = np.random.default_rng(1)
    values = np.concatenate([[1 + 2 ** -8, 1000.0, -1000.0, 1e6], g.standard_normal(N - 4) * 8]).astype(np.float32)
    out = torch.zeros(N, dtype=getattr(torch, dtype))
    _store[(1,)](torch.tensor(values), out, N - 1, N=N)
    values[-1] = 0.0  # (not stored)
    fmt = getattr(ml_dtypes, dtype)
    info = ml_dtypes.finfo(fmt)
    want = np.clip(values, float(info.min), float(info.max)).astype(fmt)  # satfinite for fp8; bf16 has the range
    got = out.view(torch.uint8 if dtype != "bfloat16" else torch.int16).numpy().view(fmt)
    assert np.array_equal(got.astype(np.float32), want.astype(np.float32))


def test_a_python_float_is_an_fp32_scalar_and_libdevice_is_reached():
    x = torch.linspace(0.5, 4.0, N)
    out = torch.empty(N)
    _rsqrt_eps[(1,)](x, out, 1e-6, N=N)
    summed = (x.numpy() + np.float32(1e-6)).astype(np.float64)  # the kernel's fp32 sum
    assert np.array_equal(out.numpy(), (1.0 / np.sqrt(summed)).astype(np.float32))  # then rounded once


def test_bf16_reductions_add_in_bf16_and_compare_values_not_bits():
    g = np.random.default_rng(2)
    a = _bf16(g.standard_normal(N))
    out = torch.empty(3, dtype=torch.bfloat16)
    _reduce[(1,)](a, out, N=N)
    exact = a.double().sum().item()
    assert abs(out[0].item() - exact) <= 8 * 2 ** -8 * a.double().abs().sum().item() / 8  # a bf16 sum, not bits
    assert out[1].item() == a.max().item() and out[2].item() == a.min().item()  # negatives too


def test_a_libdevice_function_without_an_equivalent_is_refused_by_name():
    with pytest.raises(Exception, match="j0"):
        _unknown_extern[(1,)](torch.ones(N), torch.empty(N), N=N)


def test_libdevice_symbols_map_to_their_base_functions():
    assert [triton_interpreter.base_name(s) for s in ("__nv_rsqrtf", "__nv_fsqrt_rn", "__nv_fast_expf",
                                                      "__ocml_exp_f32", "__nv_powf", "__nv_tanhf")] == \
        ["rsqrt", "sqrt", "exp", "exp", "pow", "tanh"]


def test_an_autotuned_kernel_runs_in_its_first_config_without_a_driver_to_benchmark_with():
    x = torch.arange(200, dtype=torch.float32)
    out = torch.zeros(200)
    _autotuned_copy[lambda meta: (triton.cdiv(200, meta["BLOCK"]),)](x, out, 200)
    assert torch.equal(out, 2 * x) and _autotuned_copy.best_config.kwargs == {"BLOCK": 64}


def test_a_masked_access_stays_inside_its_tensors_and_one_past_them_is_refused_or_reads_nan():
    a = torch.arange(6 * 200, dtype=torch.float32).reshape(6, 200)[:, :100]  # rows at a pitch of 200
    out = torch.zeros(6, 128)
    _copy_rows[[6]](a, out, a.stride(0), 100, BLOCK=128, MASK_LOAD=True, MASK_STORE=True)  # a grid as a list
    assert torch.equal(out[:, :100], a)
    # unmasked, each row reads 28 of its neighbours in a's storage (readable on a GPU too): in bounds
    _copy_rows[(6,)](a, out, a.stride(0), 100, BLOCK=128, MASK_LOAD=False, MASK_STORE=False)
    assert torch.equal(out[:, 100:], a.as_strided((6, 28), (200, 1), 100)) and not out.isnan().any()
    # a contiguous x: the last row's unmasked block reads past its end, NaN there (garbage on a GPU);
    # the other rows read the next row's first 28, inside x
    x = torch.ones(6, 100, dtype=torch.bfloat16)
    _row_sums_in_place[(6,)](x, 100, BLOCK=128)
    assert x[5, 0].isnan() and x[:5, 0].tolist() == [128.0] * 5
    # and a store past the end of out is refused, by program and tensor (rows at a pitch of 128 in 600)
    with pytest.raises(Exception, match=r"program \(4, 0, 0\) would store 40 element\(s\) outside every tensor.*"
                                        r"the first just past the end of out_ptr"):
        _copy_rows[(6,)](x, out[:, :100].contiguous(), 100, 100, BLOCK=128, MASK_LOAD=True, MASK_STORE=False)


def test_a_bf16_atomic_add_rounds_each_addition_to_nearest_even_lane_by_lane():
    a = torch.linspace(0.1, 3.3, 64, dtype=torch.bfloat16)
    out = torch.zeros(4, dtype=torch.bfloat16)
    _accumulate[(1,)](a, out, N=64)
    want = torch.zeros(4, dtype=torch.bfloat16)
    for j in range(64):  # one legal order of the GPU's, each sum rounded to bf16
        want[j % 4] = want[j % 4] + a[j]
    assert torch.equal(out, want) and not torch.equal(want, a.float().reshape(16, 4).sum(0).bfloat16())


def test_code_that_asks_tritons_driver_for_the_device_gets_the_stand_in_gpu():
    active = triton.runtime.driver.active  # the bare interpreter: "0 active drivers"
    assert active.utils.get_device_properties(0)["multiprocessor_count"] == 132
    assert active.get_current_target().backend == "cpu" and str(active.get_active_torch_device()) == "cpu"
