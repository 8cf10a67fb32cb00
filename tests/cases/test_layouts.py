"""Memory layouts: the same values laid out otherwise, part of a case's id but not of its seed."""
import dataclasses

import ml_dtypes
import numpy as np
import pytest

from normdiff.cases import layouts, suites
from normdiff.cases.model import Case
from normdiff.harness.data.errors import UsageError


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16, np.int64])
@pytest.mark.parametrize("name", list(layouts.LAYOUTS))
def test_a_layout_keeps_every_value_in_a_new_writable_buffer(name, dtype):
    array = np.arange(2 * 3 * 4).reshape(2, 3, 4).astype(dtype)
    if name == "broadcast":
        array = np.full((8,), 3, dtype)
    view = layouts.lay_out(array, name)
    shape = layouts.batched_shape(array.shape) if name == "batched" else array.shape  # a shape, not strides
    assert view.shape == shape and view.dtype == array.dtype and view.flags.writeable
    assert (view.astype(np.float64).ravel() == array.astype(np.float64).ravel()).all()
    if name != "contiguous":
        assert not np.shares_memory(view, array)


def test_each_layout_has_the_strides_it_names():
    x = np.zeros((8, 96), np.float32)
    strides = {name: tuple(s // 4 for s in layouts.lay_out(x, name).strides) for name in layouts.LAYOUTS}
    assert strides["contiguous"] == (96, 1)
    assert strides["transposed"] == (1, 8)
    assert strides["padded"] == (96 + layouts.PAD, 1)
    assert strides["strided"] == (192, 2)
    assert strides["offset"] == (96, 1) and layouts.lay_out(x, "offset").ctypes.data % 8 == 4
    assert layouts.lay_out(np.ones(96, np.float32), "broadcast").strides == (0,)


def test_batched_rows_are_a_batch_of_sequences_and_only_that_shape_is_read_back_as_rows():
    assert layouts.batched_shape((8, 96)) == (2, 4, 96) and layouts.batched_shape((67, 96)) == (1, 67, 96)
    assert layouts.batched_shape((96,)) == (2, 48)  # a row operand of one dimension (positions) too
    out = np.arange(8 * 96.0).reshape(2, 4, 96)
    assert layouts.as_rows(out, (8, 96), "batched").shape == (8, 96)
    assert layouts.as_rows(out.reshape(4, 2, 96), (8, 96), "batched").shape == (4, 2, 96)  # the code's own shape
    assert layouts.as_rows(out, (8, 96), "padded").shape == (2, 4, 96)
    assert not layouts.LAYOUTS["batched"].strides and layouts.LAYOUTS["padded"].strides


def test_memory_outside_the_view_is_nan_so_a_read_past_it_shows():
    view = layouts.lay_out(np.ones((2, 4), np.float32), "strided")
    raw = np.lib.stride_tricks.as_strided(view, view.shape, (view.strides[0], 4))  # read as if dense
    assert np.isnan(raw).any()


def test_the_layout_is_in_the_id_and_not_in_the_seed():
    plain = Case.of("rms_norm", "qwen3", "bf16", "8x64", weight="trained")
    laid = dataclasses.replace(plain, layout="transposed")
    assert laid.id == plain.id + "/layout=transposed" and Case.from_id(laid.id) == laid
    assert laid.seed == plain.seed
    assert all(np.array_equal(a, b) for a, b in zip(plain.inputs().arrays.values(), laid.inputs().arrays.values()))
    backward = Case.of("rms_norm", "qwen3", "bf16", "8x64", weight="ones", dy="normal", layout="broadcast")
    assert backward.id.endswith("/w=ones/layout=broadcast/dy=normal/out=dx") and Case.from_id(backward.id) == backward


def test_bad_layouts_are_usage_errors_that_name_the_fix():
    with pytest.raises(UsageError, match="unknown layout 'sideways'.*transposed"):
        Case.of("rms_norm", "qwen3", "bf16", "8x64", layout="sideways")
    with pytest.raises(UsageError, match="constant.*weight 'trained'"):
        Case.of("rms_norm", "qwen3", "bf16", "8x64", weight="trained", layout="broadcast")
    with pytest.raises(UsageError, match="takes no weight"):
        Case.of("l2_norm", "qwen3.5", "bf16", "8x64", layout="broadcast")
    with pytest.raises(UsageError, match="unknown layout"):
        Case.from_id("rms_norm@qwen3/bf16/8x64/normal/w=ones/layout=diagonal")
    with pytest.raises(UsageError, match="batched.*quantizing op returns scales shaped otherwise"):
        Case.from_id("rms_norm_quant@vllm-fp8/bf16/8x1024/normal/w=trained/layout=batched")


def test_a_suite_group_lists_layouts_and_asks_for_batch_invariance():
    group = dict(ops=["rms_norm"], conventions=["qwen3"], dtypes=["float32"], shapes=["4x64"], regimes=["normal"],
                 layouts=["contiguous", "padded"], batch_invariance=True)
    cases = suites.expand(group)
    assert [c.layout for c in cases] == ["contiguous", "padded"] and all(c.batch_check for c in cases)
    assert not any(c.batch_check for c in suites.expand({**group, "batch_invariance": False}))
    with pytest.raises(suites.SuiteError, match="'batch_invariance' must be true or false"):
        suites.expand({**group, "batch_invariance": "yes"})
    with pytest.raises(suites.SuiteError, match="unknown layout"):
        suites.expand({**group, "layouts": ["diagonal"]})


@pytest.mark.parametrize("suite", ["default", "kernel"])
def test_a_suite_has_a_contiguous_twin_for_every_layout_case(suite):
    cases = suites.load(suite).cases
    ids = {c.id for c in cases}
    laid = [c for c in cases if c.layout != "contiguous"]
    assert laid and all(dataclasses.replace(c, layout="contiguous").id in ids for c in laid)
    if suite == "default":  # a batch of sequences is the kernel suite's (for user code)
        assert {c.layout for c in laid} == set(layouts.LAYOUTS) - {"contiguous", "batched"}
        assert any(c.batch_check for c in cases)
    else:
        assert "batched" in {c.layout for c in laid}
