"""A faithful layer over Triton's interpreter (`TRITON_INTERPRET=1`), so that a Triton kernel's
arithmetic on the CPU is the arithmetic the compiled kernel does on a GPU, or is refused.

Triton 3.9's interpreter runs `@triton.jit` kernels through NumPy, and measured here it differs from
the compiler in ways that would make normdiff judge the interpreter instead of the kernel
(CATALOGUE.md, "Triton's interpreter"):

  scalars     a Python float argument stays a Python float (`eps.to(tl.float32)` raises), where the
              compiler types it fp32: it is passed as an fp32 scalar (ints already are i32 / i64)
  bfloat16    held as its uint16 bits, and arithmetic, comparisons, clamps, reductions and scans run
              on the bits as integers (a bf16 product is garbage); fp32 -> bf16 casts truncate where
              the GPU rounds to nearest even. Here bf16 computes as the GPU does: each operand
              exactly in float32, the result rounded to nearest even (ml_dtypes), once per op
  fp8         fp32 -> fp8 casts round half up; here nearest even, saturating to the format's finite
              range as the NVIDIA backend's cvt.rn.satfinite does
  libdevice   `triton.language.extra.libdevice` calls reach extern_elementwise, which the
              interpreter does not have: each function is computed in float64 and rounded to its
              result type (correctly rounded, where libdevice allows itself an ulp or two); a symbol
              with no such equivalent is refused by name
  autotune    `@triton.autotune` benchmarks every config through the active driver, and the
              interpreter has none ("0 active drivers"): here an autotuned kernel runs in its first
              config that survives the kernel's own pruning, unbenchmarked. A GPU picks the fastest,
              which cannot be known here; the configs of a norm kernel differ in how its work is
              tiled (rows per program, a block of a row), so another config could change the
              order of a sum, within the float32 budget, not the formula
  driver      the interpreter has no active driver, so code that asks Triton for the device
              (`triton.runtime.driver.active.utils.get_device_properties(i)["multiprocessor_count"]`:
              fla sizes its dw partials so) fails or falls back to one SM: here a stand-in driver
              answers with the stand-in H100's figures (implementations/kernel_host.py), its backend
              "cpu" (so no library takes a CUDA-only path), and refuses to benchmark
  atomics     programs run one after another, so atomics are deterministic here (one legal order
              of a GPU's); bf16 atomics are refused by the interpreter ("Unsupported data type"):
              here add, max, min and exchange on bf16 run lane by lane, each result rounded to
              nearest even, as the GPU's bf16 atomicAdd rounds each addition
  bounds      the interpreter reads and writes host memory through raw addresses, unchecked: a
              kernel whose mask or row stride is wrong reads garbage or corrupts the worker's heap
              (a crash: `munmap_chunk(): invalid pointer`, measured on Triton's LayerNorm tutorial
              given padded rows). Here every load, store and atomic that a mask lets through must
              fall inside the memory of a tensor the launch was given (anywhere in its storage, as
              on a GPU, where a view's neighbours are readable); a store or atomic that does not
              is refused, naming the program, the pointer and how far it is from the nearest
              tensor; a float load reads NaN there (a GPU reads whatever lies there), so a row's
              last block loaded without its mask disagrees where it reads past the end

What it does not model, and need not: the order of a reduction inside tl.sum (NumPy sums
pairwise; a GPU by its warp tree: a float32 order difference normdiff's budgets already allow), the
approximate reciprocal of fast-math division, and what a race between programs would give (the
interpreter runs programs one after another, so atomics and races are deterministic here).

`install()` patches the interpreter in place: it runs in normdiff's Triton worker only
(frameworks/triton.py setup), after TRITON_INTERPRET=1 is set and before any kernel is defined.
"""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np

_INSTALLED = False


def install() -> None:
    """Patch Triton's interpreter (idempotent)."""
    global _INSTALLED
    if _INSTALLED:
        return
    from triton.runtime import interpreter

    _scalars(interpreter)
    _bfloat16(interpreter)
    _reductions(interpreter)
    _extern(interpreter)
    _autotune()
    _grid_as_tuple(interpreter.GridExecutor)
    _bounds(interpreter)
    _driver()
    _INSTALLED = True


# ---- scalars ------------------------------------------------------------------------------------

def _scalars(interpreter) -> None:
    import triton.language as tl

    implicit = interpreter._implicit_cvt

    def implicit_cvt(arg):
        if isinstance(arg, float):  # the compiler's type for a Python float argument
            handle = interpreter.TensorHandle(np.array([arg], dtype=np.float32), tl.float32)
            return tl.tensor(handle, tl.float32)
        return implicit(arg)

    interpreter._implicit_cvt = implicit_cvt


# ---- autotune ------------------------------------------------------------------------------------

def _autotune() -> None:
    """One config, so that the autotuner's own single-config path runs it without benchmarking."""
    from triton.runtime import autotuner

    pruned = autotuner.Autotuner.prune_configs

    def first_config(self, kwargs):
        return pruned(self, kwargs)[:1]

    autotuner.Autotuner.prune_configs = first_config


# ---- the driver ------------------------------------------------------------------------------------

class _StandInUtils:
    @staticmethod
    def get_device_properties(device=0) -> dict:
        from normdiff.implementations.kernel_host import StandInGPU

        return {"multiprocessor_count": StandInGPU.multi_processor_count, "max_shared_mem":
                StandInGPU.shared_memory_per_block_optin, "max_num_regs": StandInGPU.regs_per_multiprocessor,
                "warpSize": StandInGPU.warp_size, "name": StandInGPU.name}


class StandInDriver:
    """What `triton.runtime.driver.active` is in the Triton worker: the stand-in GPU's figures, a "cpu"
    target, the CPU as torch's device; no benchmarker (autotune runs one config unbenchmarked)."""

    utils = _StandInUtils()

    @staticmethod
    def is_active() -> bool:
        return True

    def get_current_target(self):
        from triton.backends.compiler import GPUTarget

        return GPUTarget("cpu", 0, 32)

    def get_active_torch_device(self):
        import torch

        return torch.device("cpu")

    def get_current_device(self) -> int:
        return 0

    def set_current_device(self, device) -> None:
        return None

    def get_current_stream(self, device=None) -> int:
        return 0

    def get_benchmarker(self):
        raise NotImplementedError("normdiff's Triton interpreter runs kernels unbenchmarked: there is no GPU to time")


def _driver() -> None:
    from triton.runtime import driver

    driver.set_active(StandInDriver())


# ---- bounds --------------------------------------------------------------------------------------

class OutOfBounds(IndexError):
    """A kernel's access outside every tensor its launch was given."""


_BUFFERS: list[tuple[int, int, str]] = []  # the launch's tensors: (first byte, past the last, name)


def _bounds(interpreter) -> None:
    import triton.language as tl

    executor, builder = interpreter.GridExecutor, interpreter.InterpreterBuilder
    init_args = executor._init_args_hst

    def init_args_hst(self, args_dev, kwargs):
        args_hst, kwargs_hst = init_args(self, args_dev, kwargs)
        named = list(zip(self.arg_names, args_hst)) + list(kwargs_hst.items())
        _BUFFERS[:] = [b for name, arg in named for b in _buffers(name, arg)]
        return args_hst, kwargs_hst

    executor._init_args_hst = init_args_hst
    load, store = builder.create_masked_load, builder.create_masked_store
    cas, rmw = builder.create_atomic_cas, builder.create_atomic_rmw

    def masked_load(self, ptrs, mask, other, cache_policy, is_volatile):
        outside = _outside(ptrs, mask)
        if outside is None:
            return load(self, ptrs, mask, other, cache_policy, is_volatile)
        return _load_outside(load, self, ptrs, mask, other, cache_policy, is_volatile, outside)

    def masked_store(self, ptrs, value, mask, cache_policy):
        _check(self, ptrs, mask, "store")
        return store(self, ptrs, value, mask, cache_policy)

    def atomic_cas(self, ptr, cmp, val, sem, scope):
        _check(self, ptr, None, "atomic")
        return cas(self, ptr, cmp, val, sem, scope)

    def atomic_rmw(self, op, ptr, val, mask, sem, scope):
        _check(self, ptr, mask, "atomic")
        if _is_bf16(val, tl):
            return _bf16_atomic(interpreter, op, ptr, val, mask)
        return rmw(self, op, ptr, val, mask, sem, scope)

    builder.create_masked_load, builder.create_masked_store = masked_load, masked_store
    builder.create_atomic_cas, builder.create_atomic_rmw = atomic_cas, atomic_rmw


def _bf16_atomic(interpreter, op, ptr, val, mask):
    """A bf16 atomic read-modify-write, lane by lane in order (lanes may share an address): each new
    value computed in float32 from the old one and rounded once to nearest even; the old values are
    returned, as an atomic returns them."""
    import ctypes

    import triton.language as tl
    from triton._C.libtriton import ir

    combine = {ir.ATOMIC_OP.FADD: np.add, ir.ATOMIC_OP.MAX: np.maximum, ir.ATOMIC_OP.MIN: np.minimum,
               ir.ATOMIC_OP.XCHG: lambda old, new: new}.get(op)
    if combine is None:
        raise NotImplementedError(f"a bf16 atomic {op} has no faithful equivalent in normdiff's Triton layer")
    addresses = np.broadcast_to(np.asarray(ptr.data, dtype=np.uint64), np.shape(val.data)).ravel()
    lanes = np.broadcast_to(np.asarray(mask.data, dtype=bool), addresses.shape).ravel()
    values = to_float32(np.asarray(val.data).ravel())
    old = np.zeros(addresses.shape, dtype=np.uint16)
    for i in np.flatnonzero(lanes):
        cell = ctypes.c_uint16.from_address(int(addresses[i]))
        old[i] = cell.value
        cell.value = int(to_bf16_bits(combine(to_float32(np.uint16(cell.value)), values[i])))
    return interpreter.TensorHandle(old.reshape(np.shape(val.data)), tl.bfloat16)


def _grid_as_tuple(executor) -> None:
    """A grid given as a list (`lambda meta: [cdiv(N, meta['BLOCK'])]`, as Triton's LayerNorm
    tutorial gives it): the compiled launcher takes any sequence, the interpreter only a tuple."""
    init = executor.__init__

    def __init__(self, fn, arg_names, grid, *args, **kwargs):
        if callable(grid):
            given = grid
            grid = lambda meta: tuple(given(meta))  # noqa: E731
        else:
            grid = tuple(grid)
        init(self, fn, arg_names, grid, *args, **kwargs)

    executor.__init__ = __init__


def _buffers(name: str, arg) -> list[tuple[int, int, str]]:
    """The storage a tensor argument lives in (a tuple's, each of its tensors')."""
    if isinstance(arg, tuple):
        return [b for i, a in enumerate(arg) for b in _buffers(f"{name}[{i}]", a)]
    if not hasattr(arg, "untyped_storage"):
        return []
    storage = arg.untyped_storage()
    return [(storage.data_ptr(), storage.data_ptr() + storage.nbytes(), name)]


def _outside(ptrs, mask) -> np.ndarray | None:
    """The lanes (shaped as the pointers) that the mask lets through and that fall outside every
    buffer of the launch; None when there are none."""
    if not _BUFFERS:
        return None
    addresses = np.asarray(ptrs.data, dtype=np.uint64)
    active = np.ones(addresses.shape, dtype=bool) if mask is None else \
        np.broadcast_to(np.asarray(mask.data, dtype=bool), addresses.shape)
    size = np.uint64(np.dtype(_element_numpy_dtype(ptrs)).itemsize)
    inside = np.zeros(addresses.shape, dtype=bool)
    for start, end, _ in _BUFFERS:
        inside |= (addresses >= np.uint64(start)) & (addresses + size <= np.uint64(end))
    outside = active & ~inside
    return outside if outside.any() else None


def _check(builder, ptrs, mask, what: str) -> None:
    """Refuse a store or an atomic outside every buffer of the launch, naming where."""
    outside = _outside(ptrs, mask)
    if outside is not None:
        raise OutOfBounds(_where(builder, ptrs, outside, what))


def _where(builder, ptrs, outside: np.ndarray, what: str) -> str:
    size = np.dtype(_element_numpy_dtype(ptrs)).itemsize
    bad = int(np.asarray(ptrs.data, dtype=np.uint64)[outside].ravel()[0])
    start, end, name = min(_BUFFERS, key=lambda b: min(abs(bad - b[0]), abs(bad - b[1])))
    if bad >= end:
        where = f"just past the end of {name}" if bad < end + size else f"{bad - end} bytes past the end of {name}"
    else:
        where = f"{start - bad} bytes before the start of {name}"
    return (f"program {tuple(builder.grid_idx)} would {what} {int(outside.sum())} element(s) outside every tensor the "
            f"kernel was given (the first {where}): on a GPU an illegal memory access or another tensor's data; "
            "check its masks and row strides")


BF16_NAN = np.uint16(0x7FC0)  # a quiet NaN as the interpreter holds bf16: its bits


def _load_outside(load, builder, ptrs, mask, other, cache_policy, is_volatile, outside):
    """A load with lanes outside every tensor: on a GPU they read whatever lies there (another
    tensor's data, or a fault); here a float lane reads NaN, so the output shows it every time and
    the case disagrees where it reads it (a row's last block loaded without its mask); an integer
    lane (an index, a lock) is refused, as no value of it is safe to go on with."""
    import triton.language as tl
    from triton.runtime import interpreter

    element = ptrs.get_element_ty()
    if element not in (tl.bfloat16, tl.float16, tl.float32, tl.float64):  # fp8 and integers: refused
        raise OutOfBounds(_where(builder, ptrs, outside, "load"))
    inside = interpreter.TensorHandle(np.asarray(mask.data, dtype=bool) & ~outside if mask is not None else ~outside,
                                      tl.int1)
    loaded = load(builder, ptrs, inside, other, cache_policy, is_volatile)
    data = np.array(loaded.data)
    data[np.broadcast_to(outside, data.shape)] = BF16_NAN if element == tl.bfloat16 else np.nan
    return interpreter.TensorHandle(data, loaded.dtype)


def _element_numpy_dtype(ptrs):
    from triton.runtime import interpreter

    return interpreter._get_np_dtype(ptrs.get_element_ty())


# ---- bfloat16 and the casts -----------------------------------------------------------------------

def to_float32(bits: np.ndarray) -> np.ndarray:
    """bf16 bits (uint16) as float32 values, exactly."""
    return (np.asarray(bits).astype(np.uint32) << np.uint32(16)).view(np.float32)


def to_bf16_bits(values) -> np.ndarray:
    """Values rounded once to bf16, nearest even (NaN kept), as the interpreter holds bf16: uint16."""
    return np.asarray(values, dtype=np.float32).astype(ml_dtypes.bfloat16).view(np.uint16)


def _is_bf16(handle, tl) -> bool:
    return not isinstance(handle.dtype, tl.pointer_type) and handle.dtype.scalar == tl.bfloat16


def _values(handle, tl) -> np.ndarray:
    return to_float32(handle.data) if _is_bf16(handle, tl) else handle.data


def _result(out: np.ndarray, tl_dtype, interpreter, tl):
    """A bf16 op's float32 result, rounded to bf16; a comparison's bools as they are."""
    if out.dtype == np.bool_:
        return interpreter.TensorHandle(out, tl_dtype)
    return interpreter.TensorHandle(to_bf16_bits(out), tl.bfloat16)


# fp8 formats Triton names, and the ml_dtypes type each is (the NVIDIA ones; FNUZ on AMD)
_FP8 = {"fp8e4nv": ml_dtypes.float8_e4m3fn, "fp8e5": ml_dtypes.float8_e5m2, "fp8e4b8": ml_dtypes.float8_e4m3fnuz,
        "fp8e5b16": ml_dtypes.float8_e5m2fnuz}


def _bfloat16(interpreter) -> None:
    import triton.language as tl

    builder = interpreter.InterpreterBuilder
    binary, unary, ternary, cast, fp_to_fp, fma = (builder.binary_op, builder.unary_op, builder.ternary_op,
                                                   builder.cast_impl, builder.create_fp_to_fp, builder.create_fma)

    def binary_op(self, lhs, rhs, op):
        if not (_is_bf16(lhs, tl) or _is_bf16(rhs, tl)) or op in _BITWISE:
            return binary(self, lhs, rhs, op)
        with np.errstate(all="ignore"):
            return _result(op(_values(lhs, tl), _values(rhs, tl)), lhs.dtype.scalar, interpreter, tl)

    def unary_op(self, arg, op):
        if not _is_bf16(arg, tl):
            return unary(self, arg, op)
        with np.errstate(all="ignore"):
            return _result(op(_values(arg, tl)), tl.bfloat16, interpreter, tl)

    def ternary_op(self, lhs, rhs, other, op):
        if op is np.where or not any(_is_bf16(h, tl) for h in (lhs, rhs, other)):
            return ternary(self, lhs, rhs, other, op)  # a select moves bits: right on any type
        return _result(op(_values(lhs, tl), _values(rhs, tl), _values(other, tl)), tl.bfloat16, interpreter, tl)

    def create_fma(self, x, y, z):
        if not _is_bf16(z, tl):
            return fma(self, x, y, z)
        exact = _values(x, tl).astype(np.float64) * _values(y, tl) + _values(z, tl)  # exact in float64
        return interpreter.TensorHandle(to_bf16_bits(exact.astype(np.float32)), tl.bfloat16)  # (a tie: rare)

    def cast_impl(self, src, dst_type):
        done = _cast(src, dst_type, interpreter, tl)  # (a TensorHandle's truth is its data's .all())
        return done if done is not None else cast(self, src, dst_type)

    def create_fp_to_fp(self, src, dst_type, rounding_mode):
        from triton._C.libtriton import ir

        if rounding_mode == ir.ROUNDING_MODE.RTZ:  # toward zero: the interpreter's own truncation
            return fp_to_fp(self, src, dst_type, rounding_mode)
        done = _cast(src, dst_type, interpreter, tl)
        return done if done is not None else fp_to_fp(self, src, dst_type, rounding_mode)

    builder.binary_op, builder.unary_op, builder.ternary_op = binary_op, unary_op, ternary_op
    builder.create_fma, builder.cast_impl, builder.create_fp_to_fp = create_fma, cast_impl, create_fp_to_fp


_BITWISE = (np.bitwise_and, np.bitwise_or, np.bitwise_xor, np.left_shift, np.right_shift)


def _cast(src, dst_type, interpreter, tl):
    """A cast to or from bf16, or to fp8, rounded to nearest even (fp8 saturating); None for a cast
    the interpreter already does right (between NumPy's own types, and widenings from fp8)."""
    src_ty, dst_ty = src.dtype.scalar, dst_type.scalar
    fp8 = _FP8.get(getattr(dst_ty, "name", ""))
    if src_ty == dst_ty or getattr(src_ty, "name", "") in _FP8:
        return None
    if not (src_ty == tl.bfloat16 or dst_ty == tl.bfloat16 or fp8 is not None):
        return None
    values = to_float32(src.data) if src_ty == tl.bfloat16 else src.data
    if dst_ty == tl.bfloat16:
        if src_ty.is_int():  # an integer to bf16: rounded once from its exact value
            exact = np.asarray(values, dtype=np.float64)
            return interpreter.TensorHandle(exact.astype(ml_dtypes.bfloat16).view(np.uint16), tl.bfloat16)
        return interpreter.TensorHandle(to_bf16_bits(values), tl.bfloat16)
    if fp8 is not None:
        info = ml_dtypes.finfo(fp8)
        clipped = np.clip(np.asarray(values, dtype=np.float32), float(info.min), float(info.max))  # satfinite
        return interpreter.TensorHandle(clipped.astype(fp8).view(np.uint8), dst_ty)
    # from bf16 to another type: its exact float32 value, then NumPy's cast (to a float: exact or
    # nearest even; to an integer: toward zero, as the GPU's cvt.rzi)
    return interpreter.TensorHandle(values.astype(interpreter._get_np_dtype(dst_ty)), dst_ty)


# ---- reductions and scans --------------------------------------------------------------------------

def _reductions(interpreter) -> None:
    import triton.language as tl

    reduce_ops, scan_ops = interpreter.ReduceOps, interpreter.ScanOps
    total, min_max, cumsum = reduce_ops.sum, reduce_ops.min_max, scan_ops.cumsum

    def sum_(self, input):
        if input.dtype.scalar != tl.bfloat16:
            return total(self, input)
        values = to_float32(input.handle.data)
        out = _tree_sum(values, self.axis, self.keep_dims)
        return self.to_tensor(to_bf16_bits(out), input.dtype)

    def min_max_(self, input, val_reduce_op, idx_reduce_op=None):
        value = input[0] if isinstance(input, tuple) else input
        if value.dtype.scalar != tl.bfloat16:
            return min_max(self, input, val_reduce_op, idx_reduce_op)
        as_float = self.to_tensor(to_float32(value.handle.data), tl.float32)
        out = min_max(self, as_float, val_reduce_op, idx_reduce_op)
        first = out[0] if isinstance(out, tuple) else out
        if val_reduce_op is None:
            return out
        rounded = self.to_tensor(to_bf16_bits(first.handle.data), value.dtype)  # exact: a bf16 value
        return (rounded, out[1]) if isinstance(out, tuple) else rounded

    def cumsum_(self, input):
        if input.dtype.scalar != tl.bfloat16:
            return cumsum(self, input)
        values = np.moveaxis(to_float32(input.handle.data), self.axis, 0)
        out, running = np.empty(values.shape, dtype=np.uint16), None
        for i in range(values.shape[0]):  # each partial sum rounded to bf16, as a bf16 scan adds
            running = values[i] if running is None else to_float32(to_bf16_bits(running + values[i]))
            out[i] = to_bf16_bits(running)
        return [self.to_tensor(np.moveaxis(out, 0, self.axis), input.dtype)]

    reduce_ops.sum, reduce_ops.min_max, scan_ops.cumsum = sum_, min_max_, cumsum_


def _tree_sum(values: np.ndarray, axis, keep_dims: bool) -> np.ndarray:
    """A bf16 sum as a GPU's reduction tree adds: pairwise, each partial sum rounded to bf16."""
    v = values.reshape(-1) if axis is None else np.moveaxis(values, axis, 0)
    while v.shape[0] > 1:
        if v.shape[0] % 2:
            v = np.concatenate([v, np.zeros_like(v[:1])])
        v = to_float32(to_bf16_bits(v[0::2] + v[1::2]))
    out = v[0]
    if keep_dims:
        out = np.expand_dims(out, 0 if axis is None else axis)
    return out


# ---- libdevice -----------------------------------------------------------------------------------

# libdevice's functions (and HIP's ocml), by base name, in float64: each result is rounded once to
# its result type (correctly rounded; libdevice allows itself 1-2 ulp on most of them)
_FUNCTIONS = {
    "rsqrt": lambda x: 1.0 / np.sqrt(x), "sqrt": np.sqrt, "exp": np.exp, "exp2": np.exp2, "exp10": lambda x: 10.0 ** x,
    "expm1": np.expm1, "log": np.log, "log2": np.log2, "log10": np.log10, "log1p": np.log1p, "tanh": np.tanh,
    "sin": np.sin, "cos": np.cos, "tan": np.tan, "sinh": np.sinh, "cosh": np.cosh, "asin": np.arcsin,
    "acos": np.arccos, "atan": np.arctan, "fabs": np.abs, "abs": np.abs, "floor": np.floor, "ceil": np.ceil,
    "trunc": np.trunc, "round": lambda x: np.sign(x) * np.floor(np.abs(x) + 0.5), "rint": np.rint,
    "nearbyint": np.rint, "erf": np.vectorize(math.erf, otypes=[np.float64]),
    "erfc": np.vectorize(math.erfc, otypes=[np.float64]), "pow": np.power, "fmin": np.fmin,
    "fmax": np.fmax, "fmod": np.fmod, "atan2": np.arctan2, "hypot": np.hypot, "div": np.divide,
    "fdividef": np.divide, "rcp": lambda x: 1.0 / x, "fma": lambda x, y, z: x * y + z, "copysign": np.copysign,
    "signbit": np.signbit, "isnan": np.isnan, "isinf": np.isinf, "finitef": np.isfinite, "isfinited": np.isfinite,
}


def base_name(symbol: str) -> str:
    """'__nv_rsqrtf' -> 'rsqrt', '__nv_fsqrt_rn' -> 'sqrt', '__ocml_exp_f32' -> 'exp', '__nv_fast_expf' -> 'exp'."""
    name = symbol
    for prefix in ("__nv_", "__ocml_"):
        name = name.removeprefix(prefix)
    for suffix in ("_f32", "_f64", "_rn", "_rz", "_ru", "_rd"):
        name = name.removesuffix(suffix)
    name = name.removeprefix("fast_")
    if name not in _FUNCTIONS and name.endswith("f") and name[:-1] in _FUNCTIONS:
        name = name[:-1]
    if name not in _FUNCTIONS and name.startswith("f") and name[1:] in _FUNCTIONS:
        name = name[1:]  # fsqrt_rn, frsqrt_rn, frcp_rn
    return name


class UnfaithfulExtern(NotImplementedError):
    """A libdevice function with no exact equivalent here: refused, never approximated silently."""


def _extern(interpreter) -> None:
    import triton.language as tl

    def create_extern_elementwise(self, libName, libPath, symbol, argList, retType, isPure):
        name = base_name(symbol)
        if name not in _FUNCTIONS:
            raise UnfaithfulExtern(f"libdevice's {symbol} has no equivalent in normdiff's Triton interpreter layer "
                                   f"(implementations/triton_interpreter.py): its result cannot be judged on CPU")
        args = [np.asarray(_values(a, tl), dtype=np.float64) if a.data.dtype.kind == "f" or _is_bf16(a, tl)
                else a.data for a in argList]
        with np.errstate(all="ignore"):
            out = np.asarray(_FUNCTIONS[name](*args))
        ret = retType.scalar if hasattr(retType, "scalar") else retType
        if out.dtype == np.bool_ or ret.is_int():
            return interpreter.TensorHandle(out.astype(interpreter._get_np_dtype(ret)), ret)
        if ret == tl.bfloat16:
            return interpreter.TensorHandle(to_bf16_bits(out.astype(np.float32)), ret)
        return interpreter.TensorHandle(out.astype(interpreter._get_np_dtype(ret)), ret)

    interpreter.InterpreterBuilder.create_extern_elementwise = create_extern_elementwise
    _libdevice(interpreter)


def _libdevice(interpreter) -> None:
    """Make the libdevice functions callable from an interpreted kernel: `extra.libdevice`'s are
    stubs the compiler swaps for the backend's (in the interpreter they return None), and the
    backends' (`extra.cuda.libdevice`, `extra.hip.libdevice`) need the semantic the compiler passes.
    Each becomes the backend function called with the interpreter's semantic, which reaches
    create_extern_elementwise above. Done before a user's module imports them by name."""
    import importlib

    import triton.language.core as core

    semantic = interpreter.interpreter_semantic
    backends = []
    for name in ("cuda", "hip"):
        try:
            backends.append(importlib.import_module(f"triton.language.extra.{name}.libdevice"))
        except ImportError:
            continue
    stub = importlib.import_module("triton.language.extra.libdevice")

    def bound(function):
        def call(*args, **kwargs):
            kwargs.pop("_semantic", None)
            return function(*args, _semantic=semantic, **kwargs)
        call.__name__ = call.__qualname__ = function.__name__
        return call

    for module in backends:
        for name, member in vars(module).copy().items():
            if core.is_builtin(member):
                setattr(module, name, bound(member))
    for name in [n for n, m in vars(stub).items() if callable(m) and not n.startswith("_")]:
        real = next((getattr(b, name) for b in backends if hasattr(b, name)), None)
        if real is not None:
            setattr(stub, name, real)
