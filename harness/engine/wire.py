"""The worker protocol's wire format: requests parent -> worker, replies worker -> parent.

A worker runs the code under test, and that code can reach the pipes it finds open (worker.py says
how they are hidden and what remains possible). So the parent trusts nothing that comes back:

  * a reply is one frame: MAGIC (8 bytes), the id of the request it answers (32 hex digits, a fresh
    `secrets.token_hex(16)` per request), the body's length (8 bytes, big-endian), the body;
  * the body is never unpickled: a 4-byte length, a JSON text (the reply's structure: None, bools,
    numbers, strings, lists, dicts with string keys, and tagged tuples, arrays and NumPy scalars),
    then the arrays' raw bytes one after the other; an array's dtype is a plain number, bool,
    string or datetime dtype of NumPy's, or one of ml_dtypes' (bfloat16), named in the JSON, never
    an object or a structured dtype;
  * the body's length is bounded by the request's own `limit` (`reply_limit`), known before any
    byte arrives, so junk with a huge length header is refused at once, never waited for;
  * `ReplyReader` checks each byte as it arrives (a wrong mark or id is refused at its first wrong
    byte) and the parent reads it against a deadline for the whole message (pool.py).

A request is MAGIC_REQUEST, the length of a pickle, the pickle of (id, limit, message): the worker
trusts its parent. What can go wrong in a request (code under test read part of it) makes the
worker end with READ_FAILED, and the parent say so.
"""
from __future__ import annotations

import json
import math
import os
import pickle
import secrets
import struct

import ml_dtypes
import numpy as np

MAGIC = b"NDREPLY1"
MAGIC_REQUEST = b"NDRQST01"
ID_CHARS = 32  # secrets.token_hex(16)
HEADER = struct.Struct("!8s32sQ")  # mark, request id, body length
REQUEST_HEADER = struct.Struct("!8sQ")  # mark, pickle length
JSON_LENGTH = struct.Struct("!I")
TAG = "\u0000"  # the key of a tagged value (a tuple, an array, a NumPy scalar); no dict of ours has it

# A reply's limit: the arrays it may hold, and this much besides (messages, names, the JSON)
REPLY_SLACK = 1 << 20
# The widest element an array may come back in (complex256): the limit allows every array of a
# reply this many bytes per element of the largest array in its request
WIDEST_ITEM = 32
# A "task" (one whole job: normdiff model's two forwards) returns what its function returns
TASK_REPLY_LIMIT = 1 << 31
MAX_REQUEST = 1 << 40  # a request's length beyond this is not one the parent sent
MAX_DIMS = 64  # NumPy's own limit on an array's dimensions
FDS_ENV = "NORMDIFF_WORKER_FDS"  # "READ,WRITE": the pipes' numbers as a worker starts (it removes it)
READ_FAILED = 75  # the worker's exit status when its request pipe gave something that is no request

_ML_DTYPES = {name: np.dtype(getattr(ml_dtypes, name)) for name in dir(ml_dtypes)
              if not name.startswith("_") and isinstance(getattr(ml_dtypes, name), type)
              and issubclass(getattr(ml_dtypes, name), np.generic)}
_KINDS = "biufcmMSU"  # bool, integers, floats, complex, timedelta, datetime, bytes, str


class Malformed(Exception):
    """A reply that is not one: what is wrong with it, in words."""


class Unsendable(Exception):
    """A value the worker cannot put in a reply (what it is, in words)."""


def new_id() -> str:
    return secrets.token_hex(ID_CHARS // 2)


# ---- requests (parent -> worker) -----------------------------------------------------------------


def request_frame(rid: str, limit: int, message: tuple) -> bytes:
    payload = pickle.dumps((rid, limit, message), protocol=pickle.HIGHEST_PROTOCOL)
    return REQUEST_HEADER.pack(MAGIC_REQUEST, len(payload)) + payload


def read_request(fd: int):
    """(id, limit, message) from the request pipe; None at its end. Raises ValueError for bytes
    that are no request of normdiff's (the worker then ends: its stream has lost its place)."""
    head = _read_exactly(fd, REQUEST_HEADER.size)
    if head is None:
        return None
    mark, length = REQUEST_HEADER.unpack(head)
    if mark != MAGIC_REQUEST or length > MAX_REQUEST:
        raise ValueError(f"a request that does not start with normdiff's mark ({head[:8]!r})")
    payload = _read_exactly(fd, length)
    if payload is None:
        raise ValueError(f"a request cut short (its {length} bytes announced, fewer came)")
    rid, limit, message = pickle.loads(payload)
    return rid, limit, message


def _read_exactly(fd: int, n: int) -> bytes | None:
    """n bytes from a blocking fd (made blocking again if code under test made it non-blocking);
    None at its end before the first byte."""
    parts, got = [], 0
    while got < n:
        try:
            chunk = os.read(fd, min(n - got, 1 << 24))
        except BlockingIOError:
            os.set_blocking(fd, True)
            continue
        except InterruptedError:
            continue
        if not chunk:
            if got == 0:
                return None
            raise ValueError(f"the request pipe ended inside a request ({got} of {n} bytes)")
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


# ---- replies (worker -> parent) ------------------------------------------------------------------


def reply_limit(message: tuple) -> int:
    """The most bytes the reply to `message` may take: REPLY_SLACK for a load; for a call or a
    backward, WIDEST_ITEM bytes per element of its largest array for each of its arrays (the worker
    refuses an output with more elements than x, a gradient with more than its operand, and an op's
    results outnumber no request's arrays: a fused add's y and residual_out come with x, residual
    and weight); TASK_REPLY_LIMIT for a task."""
    kind = message[0]
    if kind == "task":
        return TASK_REPLY_LIMIT
    arrays = [a for item in message[2:] for a in _arrays_in(item)]
    if kind == "load" or not arrays:
        return REPLY_SLACK
    return REPLY_SLACK + WIDEST_ITEM * max(a.size for a in arrays) * len(arrays)


def _arrays_in(item) -> list:
    if isinstance(item, np.ndarray):
        return [item]
    if isinstance(item, dict):
        return [a for v in item.values() for a in _arrays_in(v)]
    arrays = getattr(item, "arrays", None)  # CaseInputs
    return _arrays_in(arrays) if isinstance(arrays, dict) else []


def encode(rid: str, value) -> list:
    """The frame of a reply, as buffers to write in order (the arrays' memory is not copied).
    Raises Unsendable for a value the protocol does not carry."""
    arrays: list[np.ndarray] = []
    structure = _pack(value, arrays)
    meta = [{"dtype": _dtype_name(a.dtype), "shape": list(a.shape), "order": _order(a)} for a in arrays]
    text = json.dumps({"value": structure, "arrays": meta}, separators=(",", ":")).encode()
    raw = [_flat_bytes(a) for a in arrays]
    length = JSON_LENGTH.size + len(text) + sum(r.nbytes for r in raw)
    return [HEADER.pack(MAGIC, rid.encode("ascii"), length) + JSON_LENGTH.pack(len(text)) + text, *raw]


def _order(array: np.ndarray) -> str:
    """The order its bytes travel in, as pickle chooses it: a Fortran-ordered array stays one (a sum
    over it runs in another order than over a C-ordered copy, so a statistic of it would change in
    its last bits); any other arrives C-contiguous."""
    return "F" if array.flags.f_contiguous and not array.flags.c_contiguous else "C"


def _flat_bytes(array: np.ndarray) -> np.ndarray:
    """Its elements' bytes in its `_order`, without a copy where it is contiguous that way."""
    ordered = array.T if _order(array) == "F" else np.ascontiguousarray(array)
    return ordered.reshape(-1).view(np.uint8)


def frame_size(buffers: list) -> int:
    return sum(memoryview(b).nbytes for b in buffers)


def _pack(value, arrays: list):
    if isinstance(value, (np.ndarray, np.generic)):  # before float: a np.float64 is one
        _dtype_name(value.dtype)  # refused here, before anything is written
        arrays.append(np.asarray(value))
        return {TAG: "a" if isinstance(value, np.ndarray) else "s", "i": len(arrays) - 1}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value  # (a float's NaN and infinities too: JSON's NaN and Infinity)
    if isinstance(value, tuple):
        return {TAG: "t", "v": [_pack(v, arrays) for v in value]}
    if isinstance(value, list):
        return [_pack(v, arrays) for v in value]
    if isinstance(value, dict):
        bad = [k for k in value if not isinstance(k, str) or k == TAG]
        if bad:
            raise Unsendable(f"a dict with the key {bad[0]!r} (only text keys travel)")
        return {k: _pack(v, arrays) for k, v in value.items()}
    raise Unsendable(f"a {type(value).__name__}")


def _dtype_name(dtype: np.dtype) -> str:
    if dtype.kind == "V" and dtype.name in _ML_DTYPES and dtype == _ML_DTYPES[dtype.name]:
        return dtype.name
    if dtype.kind in _KINDS and dtype.fields is None and dtype.subdtype is None and dtype.itemsize > 0:
        return dtype.str
    raise Unsendable(f"an array of dtype {dtype}")


def _dtype(name) -> np.dtype:
    if not isinstance(name, str) or len(name) > 40:
        raise Malformed(f"an array's dtype is {str(name)[:40]!r}")
    if name in _ML_DTYPES:
        return _ML_DTYPES[name]
    try:
        dtype = np.dtype(name)
    except (TypeError, ValueError, SyntaxError) as exc:
        raise Malformed(f"an array's dtype {name!r} is no dtype ({exc})") from None
    if dtype.kind not in _KINDS or dtype.fields is not None or dtype.subdtype is not None or dtype.itemsize <= 0 \
            or dtype.hasobject:
        raise Malformed(f"an array's dtype {name!r} is not one a reply may hold")
    return dtype


class ReplyReader:
    """Takes a reply's bytes as they arrive (`feed`), checking each part as soon as it is whole
    enough: the mark, the id, the length against `limit`; `value` once the body is in. Raises
    Malformed at the first thing wrong, bytes after the frame included. `earlier`: the previous
    request's id (a reply to it is named so)."""

    def __init__(self, rid: str, limit: int, earlier: str = ""):
        self.rid, self.limit, self.earlier = rid.encode("ascii"), limit, earlier.encode("ascii")
        self.buffer = bytearray()
        self.length: int | None = None
        self.done = False
        self.value = None

    @property
    def received(self) -> int:
        return len(self.buffer)

    def feed(self, data: bytes) -> None:
        if self.done:
            if data:
                raise Malformed(f"{len(data)} bytes came after the reply")
            return
        self.buffer += data
        got = bytes(self.buffer[:HEADER.size])
        if not MAGIC.startswith(got[:len(MAGIC)]):
            raise Malformed(f"it does not start with normdiff's mark (it starts {got[:16]!r})")
        ident = got[len(MAGIC):len(MAGIC) + ID_CHARS]
        if not self.rid.startswith(ident):
            if self.earlier and len(ident) == ID_CHARS and ident == self.earlier:
                raise Malformed("a second reply to the previous request came")
            raise Malformed("it answers another request (a wrong id)")
        if len(got) < HEADER.size:
            return
        if self.length is None:
            self.length = HEADER.unpack(got)[2]
            if self.length > self.limit:
                raise Malformed(f"it announces {self.length} bytes, more than the {self.limit} a reply to this "
                                "request may take")
        end = HEADER.size + self.length
        if len(self.buffer) > end:
            raise Malformed(f"{len(self.buffer) - end} bytes came after the reply")
        if len(self.buffer) == end:
            self.value = decode(memoryview(self.buffer)[HEADER.size:])
            self.done = True


def check_reply(kind: str, reply) -> tuple:
    """`reply` if it has the form a worker gives to a request of `kind` (worker.py's docstring);
    else Malformed, so that nothing forged reaches code that trusts the form."""
    if not isinstance(reply, tuple) or not reply:
        raise Malformed(f"it holds a {type(reply).__name__}, not a reply")
    status = reply[0]
    if status in ("error", "unavailable"):
        if len(reply) == 2 and isinstance(reply[1], str):
            return reply
        raise Malformed(f"its {status} reply is not one message")
    if status != "ok":
        raise Malformed(f"its status {str(status)[:40]!r} is none a worker gives")
    if len(reply) not in (3, 4) or isinstance(reply[2], bool) or not isinstance(reply[2], (int, float)):
        raise Malformed("it is not (ok, value, seconds[, note])")
    if len(reply) == 4 and not (isinstance(reply[3], str) if kind != "load" else _names(reply[3], tuple)):
        # a call's note (what it wrote into its inputs); a load's `sees` (None, or the knobs it reads)
        raise Malformed("it is not (ok, value, seconds[, note])" if kind != "load" else
                        "it is not (ok, takes, seconds[, sees])")
    value = reply[1]
    if kind == "load":
        fits = _names(value, list)
    elif kind in ("call", "backward"):
        arrays = isinstance(value, dict) and value and all(isinstance(k, str) and isinstance(v, np.ndarray)
                                                           for k, v in value.items())
        fits = bool(arrays) or (kind == "call" and isinstance(value, np.ndarray))
    else:
        fits = True  # a task's value is its function's
    if not fits:
        raise Malformed(f"its value, a {type(value).__name__}, is not what a {kind} gives")
    return reply


def _names(value, kind: type) -> bool:
    """None, or a `kind` (list, tuple) of strings: what a load's reply says it takes and sees."""
    return value is None or (isinstance(value, kind) and all(isinstance(n, str) for n in value))


def decode(body) -> object:
    """The value a reply's body holds; Malformed says what is wrong with it."""
    body = memoryview(body)
    if body.nbytes < JSON_LENGTH.size:
        raise Malformed(f"its body of {body.nbytes} bytes is too short")
    (size,) = JSON_LENGTH.unpack(body[:JSON_LENGTH.size])
    start = JSON_LENGTH.size + size
    if start > body.nbytes:
        raise Malformed(f"its JSON part of {size} bytes runs past its body of {body.nbytes}")
    try:
        head = json.loads(bytes(body[JSON_LENGTH.size:start]).decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise Malformed(f"its JSON part cannot be read ({type(exc).__name__})") from None
    if not isinstance(head, dict) or set(head) != {"value", "arrays"} or not isinstance(head["arrays"], list):
        raise Malformed("its JSON part is not a reply's")
    arrays = []
    for meta in head["arrays"]:
        if not isinstance(meta, dict) or not isinstance(meta.get("shape"), list) or len(meta["shape"]) > MAX_DIMS \
                or not all(type(n) is int and n >= 0 for n in meta["shape"]):
            raise Malformed("an array's shape is not a list of sizes")
        dtype = _dtype(meta.get("dtype"))
        nbytes = math.prod(meta["shape"]) * dtype.itemsize
        if start + nbytes > body.nbytes:
            raise Malformed(f"its arrays run past its body of {body.nbytes} bytes")
        order = meta.get("order", "C")
        if order not in ("C", "F"):
            raise Malformed(f"an array's order is {str(order)[:8]!r}")
        try:
            array = np.empty(meta["shape"], dtype, order=order)
        except (ValueError, OverflowError, MemoryError) as exc:
            raise Malformed(f"an array's shape {meta['shape'][:8]} cannot be made ({exc})") from None
        (array.T if order == "F" else array).reshape(-1).view(np.uint8)[:] = \
            np.frombuffer(body[start:start + nbytes], np.uint8)
        arrays.append(array)
        start += nbytes
    if start != body.nbytes:
        raise Malformed(f"{body.nbytes - start} bytes in its body are no part of it")
    try:
        return _unpack(head["value"], arrays)
    except RecursionError:
        raise Malformed("it nests too deep") from None


def _unpack(value, arrays: list):
    if isinstance(value, list):
        return [_unpack(v, arrays) for v in value]
    if not isinstance(value, dict):
        return value
    if TAG not in value:
        return {k: _unpack(v, arrays) for k, v in value.items()}
    kind = value[TAG]
    if kind == "t" and isinstance(value.get("v"), list):
        return tuple(_unpack(v, arrays) for v in value["v"])
    index = value.get("i")
    if kind in ("a", "s") and type(index) is int and 0 <= index < len(arrays):
        if kind == "a":
            return arrays[index]
        if arrays[index].shape == ():
            return arrays[index][()]
    raise Malformed(f"a tagged value it holds is not one ({str(value)[:80]})")
