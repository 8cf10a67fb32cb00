"""Memory layouts: the same values, laid out in memory another way.

A kernel handed a raw pointer reads memory, not values: one that assumes its input is contiguous
reads garbage from a transposed view, a slice of a wider tensor or a stride-0 weight (FlagGems #1068
and #1082: strides ignored, errors above 1000 %). A case's layout is how its arrays are laid out when
an implementation receives them; their values, and so the oracle, the seed and the budget, do not
change. `contiguous` is the default and no part of a case id; any other is `layout=NAME`.

Which arrays a layout moves: the row operands (x, the gate, the residual, positions) and a backward
call's upstream gradients for every layout but `broadcast`, which lays out the per-case operands (the
weight, the bias) as one value with stride 0 and leaves x as it is (a broadcast weight is only the
same values when the weight is constant: a case with it needs w=ones or w=zeros).

The functions that lay arrays out need only NumPy and this module's constants: a repro script
(harness/commands/repro.py) carries their source. A layout is made in NumPy, inside the worker, after the arrays crossed the pipe (pickling makes
arrays contiguous), and reaches the implementation through its framework's from_numpy, which keeps
NumPy's strides where the framework has strides (NumPy, PyTorch; the framework record's `strides`).
Frameworks whose arrays have no strides (JAX, MLX, keras, onnxruntime, tinygrad, a command's files)
copy whatever they are given into their own layout, so a layout case would only repeat the contiguous
one there: they do not run it (the report says `unsupported`, and why).

`batched` is no stride: the rows arrive as a batch of sequences, rank 3, as a model's layers get
them ((batch, seq, hidden)), and what comes back in that shape is read as rows. Code that takes
`x.shape[0]` for the number of rows (FlagGems #5392: its LayerNorm backward, M = shape[0] and
N = numel / M, wrong gradients and out-of-bounds writes for rank 3) is wrong there alone. Any
framework's user code can be given it; a registered implementation is checked on rows.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from normdiff.harness.data.errors import UsageError
from normdiff.harness.data.names import unknown

ROWS, PER_CASE = "rows", "case"  # which operands a layout lays out
PAD = 64  # the extra elements a padded row carries: a slice of a wider tensor (qkv[..., :width])


@dataclass(frozen=True)
class Layout:
    name: str
    what: str  # one line, for `normdiff list layouts` and the docs
    moves: str = ROWS  # ROWS: the row operands and upstream gradients; PER_CASE: the weight and bias
    strides: bool = True  # it is made of strides (only frameworks with strides can be given it)


LAYOUTS = {layout.name: layout for layout in (
    Layout("contiguous", "row-major and densely packed: what NumPy and torch make by default"),
    Layout("transposed", "column-major, every stride reversed: x.T.contiguous().T, a transposed matmul's output"),
    Layout("padded", f"rows at a pitch of width + {PAD} elements: a slice of a wider tensor, qkv[..., :width]"),
    Layout("strided", "every second element of a buffer twice as wide: x[..., ::2], last stride 2"),
    Layout("offset", "contiguous, but one element into its buffer: x.flatten()[1:], misaligned"),
    Layout("broadcast", "the weight (and bias) as one value with stride 0: weight.expand(width); x contiguous",
           PER_CASE),
    Layout("batched", "the rows as a batch of sequences, rank 3: x.reshape(2, rows / 2, width) (1, rows, width "
           "for an odd count), contiguous; the output is read back as rows", strides=False),
)}
DEFAULT = "contiguous"
PER_CASE_LAYOUTS = tuple(name for name, layout in LAYOUTS.items() if layout.moves == PER_CASE)
CONSTANT_WEIGHTS = ("ones", "zeros")  # the weight regimes a stride-0 weight can hold


def get_layout(name: str) -> Layout:
    if name not in LAYOUTS:
        raise UsageError(unknown("layout", name, LAYOUTS))
    return LAYOUTS[name]


def check_case_layout(name: str, per_case: dict[str, str], quantizes: bool = False) -> None:
    """Raise UsageError for an unknown layout, a broadcast one whose per-case operands are not
    constant, or a batch of sequences for an op whose results are not all shaped like x (a
    quantizer's scales); `per_case` is {operand: its regime} of the case's per-case operands."""
    layout = get_layout(name)
    if not layout.strides and quantizes:
        raise UsageError(f"layout={name} gives x as a batch of sequences and reads results shaped like x back as "
                         "rows; a quantizing op returns scales shaped otherwise: use another layout")
    if layout.moves != PER_CASE:
        return
    if not per_case:
        raise UsageError("layout=broadcast lays out the weight with stride 0, and this op takes no weight")
    varying = {k: v for k, v in per_case.items() if v not in CONSTANT_WEIGHTS}
    if varying:
        shown = ", ".join(f"{k} {v!r}" for k, v in varying.items())
        raise UsageError(f"layout=broadcast holds one value with stride 0, so its operands must be constant "
                         f"({', '.join(CONSTANT_WEIGHTS)}); got {shown}")


def batched_shape(shape: tuple) -> tuple:
    """A row operand's shape as a batch of sequences: (2, rows / 2, ...), or (1, rows, ...) for an odd
    number of rows (a row operand of one dimension, RoPE's positions, too: (2, rows / 2))."""
    if not shape:
        return tuple(shape)
    rows = shape[0]
    return (2, rows // 2, *shape[1:]) if rows % 2 == 0 else (1, rows, *shape[1:])


def as_rows(out, shape: tuple, name: str):
    """A batched call's output (or a gradient of a row operand) read back in the case's shape: only
    an array of exactly the batched shape is (any other shape is the code's, and judged as it is)."""
    if name == "batched" and tuple(np.shape(out)) == batched_shape(shape) != tuple(shape):
        return np.reshape(out, shape)
    return out


def lay_out(array: np.ndarray, name: str) -> np.ndarray:
    """A writable view with `array`'s values in layout `name` (a new buffer: never a view of `array`)."""
    if name == "contiguous":
        return array
    if name == "batched":
        return np.array(array).reshape(batched_shape(array.shape))
    if name == "transposed":
        return np.asfortranarray(array) if array.ndim > 1 else array
    if name == "padded":
        if array.ndim < 2:
            return array
        row = int(np.prod(array.shape[1:]))
        buffer = _poisoned((array.shape[0], row + PAD), array.dtype)
        view = np.lib.stride_tricks.as_strided(buffer, array.shape, _row_strides(array, row + PAD), writeable=True)
    elif name == "strided":
        buffer = _poisoned(array.shape[:-1] + (2 * array.shape[-1],), array.dtype)
        view = buffer[..., ::2]
    elif name == "offset":
        buffer = _poisoned(array.size + 1, array.dtype)
        view = buffer[1:].reshape(array.shape)
    elif name == "broadcast":
        buffer = np.empty(1, array.dtype)
        view = np.lib.stride_tricks.as_strided(buffer, array.shape, (0,) * array.ndim, writeable=True)
        buffer[0] = array.reshape(-1)[0] if array.size else 0
        return view
    else:  # a case's layout was checked when it was made (and this runs in repro scripts too)
        raise ValueError(f"unknown layout {name!r}")
    view[...] = array
    return view


def _poisoned(shape, dtype) -> np.ndarray:
    """A buffer whose elements outside the view are NaN (integers: their minimum), so code that reads
    past the view reads something no correct result holds, the same on every run."""
    dtype = np.dtype(dtype)
    fill = np.iinfo(dtype).min if dtype.kind in "iu" else np.nan
    return np.full(shape, fill, dtype)


def _row_strides(array: np.ndarray, pitch: int) -> tuple[int, ...]:
    """Strides of a row-major array whose rows are `pitch` elements apart."""
    inner = np.empty(array.shape[1:], array.dtype).strides
    return (pitch * array.itemsize, *inner)


def lay_out_arrays(arrays: dict[str, np.ndarray], name: str, per_case: set[str]) -> dict[str, np.ndarray]:
    """Each array in layout `name`: the per-case operands (named in `per_case`) for a broadcast
    layout, the others for every other layout."""
    moves_per_case = name in PER_CASE_LAYOUTS
    return {k: lay_out(v, name) if (k in per_case) == moves_per_case else v for k, v in arrays.items()}


def strides_text(array: np.ndarray) -> str:
    """An array's strides in elements, as a report shows them: '(1, 8)'."""
    return str(tuple(s // array.itemsize for s in array.strides))
