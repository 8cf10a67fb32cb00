"""The worker's checks of what an implementation gave back: a value that is no array is named in the
words that fix it, and an input written in place is caught bit for bit (NaN payloads and -0 too)."""
import textwrap

import numpy as np
import pytest

from normdiff.cases.model import Case
from normdiff.harness.data.conventions import op_conventions
from normdiff.harness.engine import wire, worker
from normdiff.harness.engine.worker import changed_inputs, output_problem
from normdiff.implementations.entry import Implementation


# ---- output_problem ----------------------------------------------------------------------------


def gen():
    yield np.zeros(3)


@pytest.mark.parametrize("value, words", [
    (None, "returned None"),
    ((np.zeros(2), np.zeros(2)), "tuple of 2"),
    ([1.0, 2.0], "list"),
    ({"y": np.zeros(2)}, "dict"),
    (gen(), "generator"),
    (iter([np.zeros(2)]), "return the array itself"),
    (3, "not an array"),
    (2.5, "not an array"),
    ("hello", "not an array"),
    (b"raw", "not an array"),
], ids=["none", "tuple", "list", "dict", "generator", "iterator", "int", "float", "str", "bytes"])
def test_values_that_are_no_array_are_named(value, words):
    problem = output_problem(value)
    assert problem is not None and words in problem, problem


def test_the_messages_say_what_to_return():
    assert "return the output array" in output_problem(None)
    assert "return the output only" in output_problem((1, 2))
    assert "list of 3" in output_problem([1, 2, 3])
    assert "'y'" in output_problem({"y": 1})
    assert "yield" in output_problem(gen())
    assert output_problem(3).startswith("returned a int")


@pytest.mark.parametrize("value", [np.zeros((2, 3), np.float32), np.float32(1.0), np.array(1.0),
                                   np.zeros((0, 4), np.float16)], ids=["array", "numpy-scalar", "0-d", "empty"])
def test_arrays_are_no_problem(value):
    assert output_problem(value) is None


def test_a_masked_array_is_refused_where_it_masks_an_element():
    """A masked element is no value (the data under it is whatever was there); with none masked,
    every element is one, and the array is its data."""
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    masked = np.ma.masked_array(data, mask=[[True, False, False], [False, False, True]])
    assert worker._readable(masked, "") == (
        "returned a masked array with 2 of 6 elements masked: a masked element holds no value to judge; return a "
        "plain array (np.ma.filled(y, value) where the masked elements have one)")
    assert worker._readable(masked, "the gradient of weight").startswith(
        "returned a masked array (the gradient of weight) with 2 of 6 elements masked")
    whole = worker._readable(np.ma.masked_array(data), "")
    assert type(whole) is np.ndarray and np.array_equal(whole, data)


# ---- changed_inputs ----------------------------------------------------------------------------


def snapshot(arrays):
    return {k: v.copy() for k, v in arrays.items()}


def test_unchanged_inputs_are_fine():
    arrays = {"x": np.arange(12, dtype=np.float32).reshape(3, 4), "positions": np.arange(3, dtype=np.int64)}
    assert changed_inputs(snapshot(arrays), arrays) is None


def test_one_changed_element_is_found():
    arrays = {"x": np.arange(12, dtype=np.float32).reshape(3, 4), "weight": np.ones(4, np.float32)}
    before = snapshot(arrays)
    arrays["weight"][2] = 1.5
    problem = changed_inputs(before, arrays)
    assert "'weight'" in problem and "1 of 4 elements changed" in problem and "in place" in problem


def test_counts_every_changed_element():
    arrays = {"x": np.ones((3, 4), np.float32)}
    before = snapshot(arrays)
    arrays["x"] *= 2
    assert "12 of 12 elements changed" in changed_inputs(before, arrays)


def test_nans_that_stay_the_same_are_unchanged():
    x = np.array([1.0, np.nan, -np.inf, 0.0], np.float32)
    arrays = {"x": x}
    assert changed_inputs(snapshot(arrays), arrays) is None  # NaN != NaN must not count as a change


def test_a_nan_with_another_payload_is_a_change():
    x = np.array([1.0, np.nan, 3.0], np.float32)
    arrays = {"x": x}
    before = snapshot(arrays)
    bits = x.view(np.uint32)
    bits[1] = bits[1] | 1  # still a NaN, another payload
    assert np.isnan(x[1])
    assert "1 of 3 elements changed" in changed_inputs(before, arrays)


def test_minus_zero_and_zero_differ():
    arrays = {"x": np.zeros(4, np.float32)}
    before = snapshot(arrays)
    arrays["x"][3] = -0.0
    assert arrays["x"][3] == 0.0  # equal by value
    assert "1 of 4 elements changed" in changed_inputs(before, arrays)


def test_low_precision_and_bfloat16_inputs_are_compared_bitwise():
    import ml_dtypes

    x = np.array([1.0, 2.0, 0.0], ml_dtypes.bfloat16)
    arrays = {"x": x}
    before = snapshot(arrays)
    assert changed_inputs(before, arrays) is None
    arrays["x"][2] = -0.0
    assert "1 of 3 elements changed" in changed_inputs(before, arrays)


def test_zero_size_inputs():
    arrays = {"x": np.zeros((0, 8), np.float32), "w": np.zeros(0, np.float16)}
    assert changed_inputs(snapshot(arrays), arrays) is None


def test_a_shape_or_dtype_change_is_named():
    x = np.zeros((2, 4), np.float32)
    before = {"x": x.copy()}
    problem = changed_inputs(before, {"x": x.reshape(8)})
    assert "'x'" in problem and "(8,)" in problem
    problem = changed_inputs(before, {"x": x.astype(np.float64)})
    assert "float64" in problem
    problem = changed_inputs({"x": np.zeros(0, np.float32)}, {"x": np.zeros(1, np.float32)})
    assert "float32(1,)" in problem


@pytest.mark.parametrize("make", [lambda: np.array(1e-6, np.float32),
                                  lambda: np.asfortranarray(np.ones((3, 4), np.float32))],
                         ids=["0-d", "fortran-order"])
def test_unusual_layouts_are_compared_too(make):
    arrays = {"eps": make()}
    before = {"eps": arrays["eps"].copy(order="K")}
    assert changed_inputs(before, arrays) is None
    arrays["eps"].flat[0] = 1e-5
    assert "1 of" in changed_inputs(before, arrays)


# ---- handle, in this process -------------------------------------------------------------------

ADAPTERS = """
import sys
import numpy as np
from normdiff.implementations import numpy_own

def good(op, contract, inputs):
    return numpy_own.run(op, contract, inputs)

def pair(op, contract, inputs):
    return numpy_own.run(op, contract, inputs), inputs.arrays["x"]

def writes_x(op, contract, inputs):
    out = numpy_own.run(op, contract, inputs)
    inputs.arrays["x"][0, 0] = 7
    return out

def exits(op, contract, inputs):
    sys.exit(4)

def raises(op, contract, inputs):
    raise RuntimeError("deliberate")

def objects(op, contract, inputs):
    return np.array([object(), object()], dtype=object)
"""

CASE = Case.of("rms_norm", "qwen3", "float32", "4x128", weight="trained")


@pytest.fixture(scope="module")
def module(tmp_path_factory):
    path = tmp_path_factory.mktemp("adapters") / "worker_adapters.py"
    path.write_text(textwrap.dedent(ADAPTERS))
    return path


def impl(entry, name):
    return Implementation(f"wt-{name}", "user", "numpy", entry, frozenset(op_conventions()))


def call(module, attr):
    i = impl(f"{module}:{attr}", attr)
    return worker.handle(("call", i, CASE.op, CASE.contract, CASE.inputs()))


def test_handle_returns_the_output(module):
    reply = call(module, "good")
    assert reply[0] == "ok" and isinstance(reply[1], np.ndarray) and reply[1].shape == (4, 128)


@pytest.mark.parametrize("attr, words", [
    ("pair", "tuple of 2"),
    ("exits", "called sys.exit(4)"),
    ("raises", "RuntimeError: deliberate"),
    ("objects", "not an array of numbers"),
])
def test_handle_names_what_went_wrong(module, attr, words):
    reply = call(module, attr)
    assert reply[0] == "error" and words in reply[1], reply


def test_a_write_into_an_input_is_named_and_the_output_still_returned(module):
    """A call that wrote into its input is a failure (engine/runner.py makes its rows errors), but it
    returned: its output comes back to be judged too, with the write named."""
    reply = call(module, "writes_x")
    assert reply[0] == "ok" and reply[1].shape == (4, 128)
    assert "modified its input 'x' in place (1 of 512 elements changed)" in reply[3]


def test_handle_load(module, tmp_path):
    assert worker.handle(("load", impl(f"{module}:good", "load-good")))[0] == "ok"
    missing = worker.handle(("load", impl("no_such_module_for_worker_test:f", "load-missing")))
    assert missing[0] == "unavailable" and "cannot import" in missing[1]
    broken = tmp_path / "broken_at_import.py"
    broken.write_text("raise ValueError('at import')\n")
    reply = worker.handle(("load", impl(f"{broken}:f", "load-broken")))
    assert reply[0] == "error" and "loading wt-load-broken failed" in reply[1] and "at import" in reply[1]
    exiting = tmp_path / "exits_at_import_wt.py"
    exiting.write_text("import sys\nsys.exit(2)\n")
    reply = worker.handle(("load", impl(f"{exiting}:f", "load-exits")))
    assert reply[0] == "error" and "sys.exit(2)" in reply[1]


@pytest.mark.parametrize("dtype", [np.float16, np.float64, np.complex128, np.bool_])
def test_a_change_is_found_at_every_element_width(dtype):
    # widths with an unsigned twin (1, 2, 8 bytes) and one without (16: compared byte by byte)
    arrays = {"x": np.zeros((2, 3), dtype)}
    before = snapshot(arrays)
    assert changed_inputs(before, arrays) is None
    arrays["x"][1, 2] = 1
    assert "1 of 6 elements changed" in changed_inputs(before, arrays)


def _said(tmp_path, source: str, name: str) -> tuple:
    """What the worker says of the error raised by calling `name` of a user's file holding `source`."""
    from normdiff.harness.engine import worker
    user = tmp_path / "user_code.py"
    user.write_text(source)
    namespace = {}
    exec(compile(source, str(user), "exec"), namespace)
    try:
        namespace[name]()
    except Exception as exc:  # noqa: BLE001  (whatever it raised)
        return worker._describe(exc), user
    raise AssertionError("it raised nothing")


def test_an_error_points_at_the_users_code_never_at_normdiffs(tmp_path):
    from normdiff.harness.engine import worker
    said, user = _said(tmp_path, "def boom():\n    raise ValueError('bad shape')\n", "boom")
    assert said == f"ValueError: bad shape (at {user}:2)"
    try:  # a binding message of normdiff's own: no path into normdiff
        from normdiff.implementations import user as user_adapters
        user_adapters._build(lambda: None, __import__("normdiff.implementations.calls", fromlist=["parse"]).parse(
            "Cls(dim)", {"dim"}), {"dim": 4}, {}, "Norm")
    except TypeError as exc:  # (its traceback without this test's own frame, as in a worker)
        said = worker._describe(exc.with_traceback(exc.__traceback__.tb_next))
    assert said.startswith("TypeError: Norm cannot be built as Cls(dim)") and "(at " not in said


def test_an_error_raised_inside_a_library_names_the_users_line_that_called_it(tmp_path):
    said, user = _said(tmp_path, "import json\ndef launch():\n    return json.loads('{')\n", "launch")  # json raises
    assert said.startswith("JSONDecodeError: ") and "json/decoder.py:" in said and said.endswith(f", called from {user}:3)")


# ---- what the worker sends back --------------------------------------------------------------------

RID = "ab" * 16


def sent(buffers):
    data = b"".join(bytes(memoryview(b).cast("B")) for b in buffers)
    reader = wire.ReplyReader(RID, 1 << 30)
    reader.feed(data)
    return reader.value


def test_a_reply_over_its_limit_is_replaced_by_an_error_before_it_crosses_the_pipe():
    reply = sent(worker.framed(RID, ("ok", np.zeros(1000), 0.1), limit=4000))
    assert reply[0] == "error" and reply[1].startswith("its reply would take 8") and "more than the 4000" in reply[1]
    assert sent(worker.framed(RID, ("ok", np.zeros(10), 0.1), limit=4000))[0] == "ok"


def test_a_value_the_protocol_does_not_carry_is_an_error_that_says_so():
    reply = sent(worker.framed(RID, ("ok", {1, 2}, 0.1), limit=1 << 20))
    assert reply == ("error", "the worker cannot send back a set: return an array of numbers")
    reply = sent(worker.framed(RID, ("ok", np.zeros(2, [("a", "<f4")]), 0.1), limit=1 << 20))
    assert reply[0] == "error" and "an array of dtype" in reply[1]


def test_a_long_message_is_clipped_and_counted():
    reply = sent(worker.framed(RID, ("error", "x" * (worker.MAX_TEXT + 123)), limit=wire.REPLY_SLACK))
    assert reply[1] == "x" * worker.MAX_TEXT + "... (123 more characters)"
