"""The worker protocol's wire format (harness/engine/wire.py): a reply travels bit for bit, and
anything that is not one of normdiff's replies to this request is refused at its first wrong byte,
never waited for past what its length allows, and never unpickled."""
import json
import os
import pickle
import struct
import threading

import ml_dtypes
import numpy as np
import pytest

from normdiff.cases.model import Case
from normdiff.harness.engine import wire
from normdiff.harness.engine.wire import Malformed, ReplyReader

RID = "0123456789abcdef" * 2
EARLIER = "fedcba9876543210" * 2


def frame(value, rid=RID) -> bytes:
    return b"".join(bytes(memoryview(b).cast("B")) for b in wire.encode(rid, value))


def roundtrip(value, limit=1 << 30):
    reader = ReplyReader(RID, limit)
    reader.feed(frame(value))
    assert reader.done
    return reader.value


def same_bits(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and np.ascontiguousarray(a).tobytes() == \
        np.ascontiguousarray(b).tobytes()


# ---- what travels --------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn,
                                   np.int8, np.uint16, np.int64, np.bool_, np.complex128, np.clongdouble,
                                   "datetime64[ns]", "U7", "S3", ">f4"])
def test_arrays_travel_bit_for_bit(dtype):
    bits = np.random.default_rng(0).integers(0, 256, 24 * np.dtype(dtype).itemsize, dtype=np.uint8)
    array = bits.view(np.dtype(dtype)).reshape(2, 3, 4) if np.dtype(dtype).kind not in "bU" else \
        np.zeros((2, 3, 4), dtype)
    back = roundtrip(("ok", array, 0.5))[1]
    assert same_bits(back, array)
    assert back.flags.writeable and back.flags.c_contiguous


def test_nan_payloads_and_signed_zeros_are_kept():
    x = np.array([np.nan, -0.0, np.inf, -np.inf], np.float32)
    x.view(np.uint32)[0] |= 1  # a NaN with another payload
    assert same_bits(roundtrip(x), x)


@pytest.mark.parametrize("make", [lambda: np.asfortranarray(np.arange(12.0).reshape(3, 4)),
                                  lambda: np.arange(24.0).reshape(2, 3, 4).transpose(2, 0, 1),
                                  lambda: np.arange(24.0)[::3], lambda: np.zeros((0, 5), np.float16),
                                  lambda: np.array(2.5, np.float32)],
                         ids=["fortran", "transposed", "strided", "empty", "0-d"])
def test_any_layout_arrives_in_the_memory_order_pickle_gave_it(make):
    """A Fortran-ordered array stays one, any other arrives C-contiguous, as the old pickled
    replies had them: the parent's statistics sum in memory order, and a C-ordered copy of a
    Fortran output changed span_rms_err in its ninth digit (the default suite's transposed-layout
    cases)."""
    array = make()
    back, pickled = roundtrip(array), pickle.loads(pickle.dumps(array))
    assert np.array_equal(back, array) and back.shape == array.shape and back.dtype == array.dtype
    assert (back.strides == pickled.strides or not array.size) and back.flags.writeable


def test_plain_data_and_its_types_are_kept():
    value = ("ok", {"sites": [{"path": "m.layers.0", "eps": 1e-6, "num_heads": 2, "y": {"y": np.ones(3)}}],
                    "failed": None, "flag": True, "tokens": [3, 1, 2], "text": "é\x00\u2028",
                    "nan": float("nan"), "inf": float("-inf"), "nested": (1, (2, 3))}, 1.25, "wrote x")
    back = roundtrip(value)
    assert isinstance(back, tuple) and back[0] == "ok" and back[2:] == (1.25, "wrote x")
    data = back[1]
    assert data["sites"][0]["eps"] == 1e-6 and data["sites"][0]["num_heads"] == 2
    assert np.array_equal(data["sites"][0]["y"]["y"], np.ones(3))
    assert data["failed"] is None and data["flag"] is True and data["tokens"] == [3, 1, 2]
    assert data["text"] == "é\x00\u2028" and np.isnan(data["nan"]) and data["inf"] == float("-inf")
    assert data["nested"] == (1, (2, 3))


def test_numpy_scalars_come_back_as_numpy_scalars():
    back = roundtrip([np.float32(1.5), np.float64(2.0), ml_dtypes.bfloat16(3.0), np.int64(7), np.bool_(True)])
    assert [type(v) for v in back] == [np.float32, np.float64, ml_dtypes.bfloat16, np.int64, np.bool_]
    assert [float(v) for v in back] == [1.5, 2.0, 3.0, 7.0, 1.0]


@pytest.mark.parametrize("value, words", [
    (np.array([object()]), "dtype object"),
    (np.zeros(2, [("a", "<f4")]), "dtype"),
    ({1, 2}, "a set"),
    (object(), "a object"),
    ({1: "a"}, "the key 1"),
    ({wire.TAG: "a", "i": 0}, "the key"),
    (lambda: 0, "a function"),
], ids=["object-array", "structured", "set", "object", "int-key", "tag-key", "function"])
def test_what_the_protocol_does_not_carry_is_refused_by_the_sender(value, words):
    with pytest.raises(wire.Unsendable, match=words):
        wire.encode(RID, ("ok", value, 0.1))


# ---- what is refused -----------------------------------------------------------------------------


def reading(data: bytes, limit=1 << 20, earlier="", step=None):
    reader = ReplyReader(RID, limit, earlier)
    step = step or len(data) or 1
    for start in range(0, len(data), step):
        reader.feed(data[start:start + step])
    return reader


def test_a_reply_fed_byte_by_byte_is_read():
    reader = reading(frame(("ok", np.arange(5.0), 0.1)), step=1)
    assert reader.done and np.array_equal(reader.value[1], np.arange(5.0))


def test_a_partial_reply_waits_for_more_without_a_value():
    data = frame(("ok", np.arange(5.0), 0.1))
    reader = reading(data[:-1])
    assert not reader.done and reader.received == len(data) - 1


@pytest.mark.parametrize("junk", [b"\xff", b"junk" * 100, b"NDREPLY0", b"\x00" * 48],
                         ids=["one-byte", "text", "another-version", "zeros"])
def test_junk_is_refused_at_its_first_byte(junk):
    with pytest.raises(Malformed, match="does not start with normdiff's mark"):
        reading(junk[:8], step=1)


def test_a_reply_of_the_old_protocol_is_refused_unread():
    """The old protocol's reply (multiprocessing's 4-byte length and a pickle): refused at its first
    byte, so its pickle, which runs code when loaded, is never loaded."""
    payload = pickle.dumps(("ok", np.ones(3), 0.1))
    with pytest.raises(Malformed, match="mark"):
        reading(struct.pack("!i", len(payload)) + payload)


def test_a_reply_to_another_request_is_refused_at_its_first_wrong_id_byte():
    data = frame(("ok", None, 0.1), rid="0123456789abcdef" + "f" * 16)
    with pytest.raises(Malformed, match="another request"):
        reading(data[:len(wire.MAGIC) + 17])
    with pytest.raises(Malformed, match="second reply to the previous request"):
        reading(frame(("ok", None, 0.1), rid=EARLIER), earlier=EARLIER)


def test_a_length_above_the_limit_is_refused_before_the_body():
    header = wire.HEADER.pack(wire.MAGIC, RID.encode(), 1 << 40)
    with pytest.raises(Malformed, match=r"announces 1099511627776 bytes, more than the 1000"):
        reading(header, limit=1000)


def test_bytes_after_the_reply_are_refused():
    data = frame(("ok", None, 0.1))
    with pytest.raises(Malformed, match="3 bytes came after the reply"):
        reading(data + b"xyz")
    reader = reading(data)
    with pytest.raises(Malformed, match="after the reply"):
        reader.feed(b"\x00")
    reader.feed(b"")  # nothing more: the end of the pipe after a reply is no fault


def body_frame(head, arrays=b"") -> bytes:
    text = head if isinstance(head, bytes) else json.dumps(head).encode()
    body = wire.JSON_LENGTH.pack(len(text)) + text + arrays
    return wire.HEADER.pack(wire.MAGIC, RID.encode(), len(body)) + body


@pytest.mark.parametrize("data, words", [
    (wire.HEADER.pack(wire.MAGIC, RID.encode(), 2) + b"ab", "too short"),
    (body_frame(b"{not json"), "cannot be read"),
    (body_frame(b"[" * 100000 + b"]" * 100000), "cannot be read"),
    (body_frame({"value": 1}), "not a reply's"),
    (body_frame({"value": 1, "arrays": [{"dtype": "O", "shape": [1]}]}, b"x" * 8), "not one a reply may hold"),
    (body_frame({"value": 1, "arrays": [{"dtype": "V8", "shape": [1]}]}, b"x" * 8), "not one a reply may hold"),
    (body_frame({"value": 1, "arrays": [{"dtype": "(2,)f4", "shape": [1]}]}, b"x" * 8), "not one"),
    (body_frame({"value": 1, "arrays": [{"dtype": "nonsense", "shape": [1]}]}, b"x" * 8), "no dtype"),
    (body_frame({"value": 1, "arrays": [{"dtype": "<f4", "shape": [-1]}]}, b"x" * 4), "not a list of sizes"),
    (body_frame({"value": 1, "arrays": [{"dtype": "<f4", "shape": [1.5]}]}, b"x" * 4), "not a list of sizes"),
    (body_frame({"value": 1, "arrays": [{"dtype": "<f4", "shape": [4]}]}, b"x" * 4), "run past its body"),
    (body_frame({"value": 1, "arrays": [{"dtype": "<f4", "shape": [1]}]}, b"x" * 8), "4 bytes in its body"),
    (body_frame({"value": {wire.TAG: "a", "i": 3}, "arrays": []}), "tagged value"),
    (body_frame({"value": {wire.TAG: "s", "i": 0}, "arrays": [{"dtype": "<f4", "shape": [2]}]}, b"x" * 8),
     "tagged value"),
    (body_frame({"value": {wire.TAG: "p", "v": []}, "arrays": []}), "tagged value"),
], ids=["short-body", "not-json", "deep-json", "no-arrays-key", "object-dtype", "void-dtype", "subarray-dtype",
        "no-dtype", "negative-size", "float-size", "arrays-past-body", "bytes-left", "array-index", "scalar-shape",
        "unknown-tag"])
def test_a_body_that_is_no_reply_is_named(data, words):
    with pytest.raises(Malformed, match=words):
        reading(data)


@pytest.mark.parametrize("kind, reply, ok", [
    ("call", ("ok", np.ones(2), 0.1), True),
    ("call", ("ok", {"y": np.ones(2), "residual_out": np.ones(2)}, 0.1, "wrote"), True),
    ("call", ("error", "boom"), True),
    ("call", ("unavailable", "not installed"), True),
    ("load", ("ok", None, 0.1), True),
    ("load", ("ok", ["x", "eps"], 0.1), True),
    ("load", ("ok", ["eps", "weight", "x"], 0.1, ("eps", "scope")), True),  # as a user function's load replies
    ("load", ("ok", None, 0.1, None), True),
    ("backward", ("ok", {"x": np.ones(2)}, 0.1), True),
    ("task", ("ok", {"anything": [1, "a"]}, 0.1), True),
    ("call", ["ok", np.ones(2), 0.1], False),
    ("call", (), False),
    ("call", ("crashed", "x"), False),
    ("call", ("timeout", "x"), False),
    ("call", ("error", 3), False),
    ("call", ("ok", np.ones(2)), False),
    ("call", ("ok", np.ones(2), True), False),
    ("call", ("ok", np.ones(2), "0.1"), False),
    ("call", ("ok", [1.0, 2.0], 0.1), False),
    ("call", ("ok", {}, 0.1), False),
    ("call", ("ok", np.ones(2), 0.1, 5), False),
    ("backward", ("ok", np.ones(2), 0.1), False),
    ("load", ("ok", 3, 0.1), False),
    ("load", ("ok", ["x", 3], 0.1), False),
    ("load", ("ok", ["x"], 0.1, ("eps", 3)), False),
    ("load", ("ok", ["x"], 0.1, "eps"), False),
])
def test_only_the_forms_a_worker_gives_pass(kind, reply, ok):
    """A forged reply that decodes must still have the form the caller relies on (the runner
    reads a load's names with list(), a call's value as arrays)."""
    if ok:
        assert wire.check_reply(kind, reply) is reply
    else:
        with pytest.raises(Malformed):
            wire.check_reply(kind, reply)


# ---- the limit and the requests -------------------------------------------------------------------


def test_a_calls_limit_is_derived_from_its_arrays():
    case = Case.of("rms_norm", "qwen3", "bfloat16", "4x128", weight="trained")
    inputs = case.inputs()
    message = ("call", None, case.op, case.contract, inputs)
    largest, count = max(a.size for a in inputs.arrays.values()), len(inputs.arrays)
    assert wire.reply_limit(message) == wire.REPLY_SLACK + wire.WIDEST_ITEM * largest * count
    # the widest output a call may give (as many elements as x, complex256) fits
    assert frame(("ok", np.zeros(inputs.arrays["x"].shape, np.clongdouble), 0.1)).__len__() \
        <= wire.HEADER.size + wire.reply_limit(message)
    dy = np.ones((4, 128), np.float32)
    assert wire.reply_limit(("backward", None, case.op, case.contract, inputs, dy)) == \
        wire.REPLY_SLACK + wire.WIDEST_ITEM * largest * (count + 1)
    assert wire.reply_limit(("load", None)) == wire.REPLY_SLACK
    assert wire.reply_limit(("task", "m:f", {})) == wire.TASK_REPLY_LIMIT


def test_requests_travel_and_a_non_blocking_pipe_is_made_blocking_again():
    read_end, write_end = os.pipe()
    try:
        os.set_blocking(read_end, False)  # as code under test may leave it, before the request comes
        later = threading.Timer(0.2, os.write, (write_end, wire.request_frame(RID, 99, ("load", "x"))))
        later.start()
        assert wire.read_request(read_end) == (RID, 99, ("load", "x"))
        later.join()
        assert os.get_blocking(read_end)
        os.close(write_end)
        write_end = None
        assert wire.read_request(read_end) is None  # its end: the parent closed it
    finally:
        os.close(read_end)
        if write_end is not None:
            os.close(write_end)


@pytest.mark.parametrize("data, words", [(b"junk" * 4, "mark"),
                                         (wire.request_frame(RID, 1, ("x",))[:-3], "ended inside a request")],
                         ids=["junk", "cut-short"])
def test_what_is_no_request_is_named(data, words):
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, data)
        os.close(write_end)
        with pytest.raises(ValueError, match=words):
            wire.read_request(read_end)
    finally:
        os.close(read_end)
