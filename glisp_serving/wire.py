"""numpy <-> ``Array`` messages: raw little-endian bytes with dtype and shape (no repeated numbers).

:func:`to_array` / :func:`from_array` convert to and from the generated protobuf classes;
:func:`encode` / :func:`decode` write and read the hot messages (Gather, Lookup) on the wire directly.
"""

from __future__ import annotations

import numpy as np

from glisp_core.errors import GlispError
from glisp_serving.proto import sampling_pb2 as pb

# dtypes that may travel; anything else is a bad request
ALLOWED = {"<i8", "<i4", "<f4", "<f8", "|u1", "|i1", "<i2", "<u8"}


class WireError(GlispError):
    """An Array message that does not decode (unknown dtype, size not matching shape)."""


def to_array(a: np.ndarray) -> pb.Array:
    a = np.ascontiguousarray(a)
    if a.dtype.byteorder == ">":
        a = a.astype(a.dtype.newbyteorder("<"))
    return pb.Array(data=a.tobytes(), dtype=a.dtype.str, shape=list(a.shape))


def from_array(msg: pb.Array, what: str, allowed: tuple[str, ...] | None = None) -> np.ndarray:
    """Decode ``msg``; WireError naming ``what`` when the dtype is not allowed or bytes do not fit the shape."""
    dt = msg.dtype
    if dt not in ALLOWED or (allowed is not None and dt not in allowed):
        ok = sorted(allowed or ALLOWED)
        raise WireError(f"{what}: dtype must be one of {ok} (got {dt!r})")
    dtype = np.dtype(dt)
    shape = tuple(int(s) for s in msg.shape)
    if any(s < 0 for s in shape):
        raise WireError(f"{what}: negative shape (got {shape})")
    n = int(np.prod(shape, dtype=np.int64)) if shape else len(msg.data) // dtype.itemsize
    if n * dtype.itemsize != len(msg.data):
        raise WireError(f"{what}: {len(msg.data)} bytes do not hold shape {shape} of {dt} (got {len(msg.data)} bytes)")
    arr = np.frombuffer(msg.data, dtype=dtype)
    return arr.reshape(shape) if shape else arr


# ---------------------------------------------------------------------------------------------------
# Direct protobuf wire encoding of the hot messages (Gather, Lookup).
#
# The generated classes copy every array three times on each side (tobytes, into the message, out
# at serialisation; and back: parse, .data, the destination). These functions write and read the
# same wire format as sampling.proto defines, so any protobuf client or server interoperates, but
# arrays cost one copy to encode (bytes.join over the arrays' memory) and none to decode (numpy views
# of the received bytes). Unknown fields are skipped, as protobuf parsers do.
# ---------------------------------------------------------------------------------------------------
_U64 = (1 << 64) - 1

# field name -> (field number, kind); kinds: array (nested Array), int (varint, int32/int64/enum,
# negative as 10-byte two's complement), uint (uint64), bool, string, packed (repeated int32),
# type_fanouts (repeated TypeFanout)
GATHER_REQUEST = {
    "seeds": (1, "array"),
    "fanout": (2, "int"),
    "type_fanouts": (3, "type_fanouts"),
    "method": (4, "string"),
    "direction": (5, "int"),
    "max_time": (6, "int"),
    "seed": (7, "uint"),
    "edge_ids": (8, "bool"),
    "request_id": (9, "uint"),
    "version": (10, "string"),
}
GATHER_RESPONSE = {
    "counts": (1, "array"),
    "neighbors": (2, "array"),
    "keys": (3, "array"),
    "edge_ids": (4, "array"),
    "merge": (5, "string"),
    "fanouts": (6, "packed"),
    "part_id": (7, "int"),
    "request_id": (8, "uint"),
    "error_code": (9, "int"),
    "error": (10, "string"),
    "version": (11, "string"),
}
LOOKUP_REQUEST = {"vertices": (1, "array"), "features": (2, "bool"), "labels": (3, "bool"), "version": (4, "string")}
LOOKUP_RESPONSE = {"features": (1, "array"), "labels": (2, "array"), "split": (3, "array"), "version": (4, "string")}


def _varint(n: int) -> bytes:
    n &= _U64
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _key(number: int, wire_type: int) -> bytes:
    return _varint((number << 3) | wire_type)


def _array_parts(number: int, a: np.ndarray) -> list:
    a = np.ascontiguousarray(a)
    if a.dtype.byteorder == ">":
        a = a.astype(a.dtype.newbyteorder("<"))
    dt = a.dtype.str.encode()
    shape = b"".join(_varint(s) for s in a.shape)
    tail = _key(2, 2) + _varint(len(dt)) + dt + _key(3, 2) + _varint(len(shape)) + shape
    head = _key(1, 2) + _varint(a.nbytes)
    return [
        _key(number, 2) + _varint(len(head) + a.nbytes + len(tail)) + head,
        a.data.cast("B") if a.size else b"",
        tail,
    ]


def encode(schema: dict, **values) -> bytes:
    """Wire bytes of a message of ``schema`` with the given field values (None or absent: not sent)."""
    parts: list = []
    for name, v in values.items():
        if v is None:
            continue
        number, kind = schema[name]
        if kind == "array":
            parts += _array_parts(number, v)
        elif kind in ("int", "uint"):
            parts.append(_key(number, 0) + _varint(int(v)))
        elif kind == "bool":
            if v:
                parts.append(_key(number, 0) + b"\x01")
        elif kind == "string":
            b = v.encode()
            parts.append(_key(number, 2) + _varint(len(b)) + b)
        elif kind == "packed":
            b = b"".join(_varint(int(x)) for x in v)
            parts.append(_key(number, 2) + _varint(len(b)) + b)
        elif kind == "type_fanouts":
            for t, f in v:
                tb = t.encode()
                sub = _key(1, 2) + _varint(len(tb)) + tb + _key(2, 0) + _varint(int(f))
                parts.append(_key(number, 2) + _varint(len(sub)) + sub)
        else:
            raise ValueError(f"unknown field kind {kind!r}")
    return b"".join(parts)


def _read_varint(buf: memoryview, i: int, end: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if i >= end or shift > 63:
            raise WireError(f"message: truncated or malformed varint at byte {i}")
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, i
        shift += 7


def _fields(buf: memoryview, i: int, end: int):
    """(field number, wire type, value or (start, end) of a length-delimited field) of buf[i:end]."""
    while i < end:
        key, i = _read_varint(buf, i, end)
        number, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _read_varint(buf, i, end)
            yield number, wt, v
        elif wt == 2:
            n, i = _read_varint(buf, i, end)
            if i + n > end:
                raise WireError(f"message: field {number} runs past the end ({i + n} > {end})")
            yield number, wt, (i, i + n)
            i += n
        elif wt == 1:
            i += 8
        elif wt == 5:
            i += 4
        else:
            raise WireError(f"message: unsupported wire type {wt} of field {number}")
    if i != end:
        raise WireError("message: truncated fixed-width field")


def _decode_array(raw: bytes, buf: memoryview, start: int, end: int, what: str) -> np.ndarray:
    data, dt, shape = (start, start), "", []
    for number, wt, v in _fields(buf, start, end):
        if number == 1 and wt == 2:
            data = v
        elif number == 2 and wt == 2:
            dt = bytes(buf[v[0] : v[1]]).decode()
        elif number == 3 and wt == 2:  # packed shape
            j = v[0]
            while j < v[1]:
                s, j = _read_varint(buf, j, v[1])
                shape.append(s)
        elif number == 3 and wt == 0:  # unpacked shape (also valid protobuf)
            shape.append(v)
    if dt not in ALLOWED:
        raise WireError(f"{what}: dtype must be one of {sorted(ALLOWED)} (got {dt!r})")
    dtype = np.dtype(dt)
    nbytes = data[1] - data[0]
    n = int(np.prod(shape, dtype=np.int64)) if shape else nbytes // dtype.itemsize
    if n * dtype.itemsize != nbytes:
        raise WireError(f"{what}: {nbytes} bytes do not hold shape {tuple(shape)} of {dt} (got {nbytes} bytes)")
    arr = np.frombuffer(raw, dtype=dtype, count=n, offset=data[0])
    return arr.reshape(shape) if shape else arr


def _text(b: memoryview, name: str) -> str:
    try:
        return bytes(b).decode()
    except UnicodeDecodeError:
        raise WireError(f"{name}: not valid UTF-8 (got {bytes(b[:16])!r})") from None


def decode(schema: dict, raw: bytes) -> dict:
    """Fields of a message of ``schema`` present in ``raw``; arrays are read-only views of ``raw``."""
    by_number = {number: (name, kind) for name, (number, kind) in schema.items()}
    buf = memoryview(raw)
    out: dict = {}
    for number, wt, v in _fields(buf, 0, len(buf)):
        if number not in by_number:
            continue
        name, kind = by_number[number]
        if kind == "array" and wt == 2:
            out[name] = _decode_array(raw, buf, v[0], v[1], name)
        elif kind == "int" and wt == 0:
            out[name] = v - (1 << 64) if v >> 63 else v
        elif kind == "uint" and wt == 0:
            out[name] = v
        elif kind == "bool" and wt == 0:
            out[name] = bool(v)
        elif kind == "string" and wt == 2:
            out[name] = _text(buf[v[0] : v[1]], name)
        elif kind == "packed" and wt == 2:
            vals, j = [], v[0]
            while j < v[1]:
                x, j = _read_varint(buf, j, v[1])
                vals.append(x - (1 << 64) if x >> 63 else x)
            out[name] = vals
        elif kind == "type_fanouts" and wt == 2:
            t, f = "", 0
            for n2, wt2, v2 in _fields(buf, v[0], v[1]):
                if n2 == 1 and wt2 == 2:
                    t = _text(buf[v2[0] : v2[1]], name)
                elif n2 == 2 and wt2 == 0:
                    f = v2 - (1 << 64) if v2 >> 63 else v2
            out.setdefault(name, []).append((t, f))
        else:
            raise WireError(f"{name}: wire type {wt} does not match the field's type")
    return out


def with_request_id(raw: bytes, request_id: int) -> bytes:
    """``raw`` (an encoded GatherRequest) with ``request_id`` set: protobuf merges concatenated messages."""
    return raw + _key(GATHER_REQUEST["request_id"][0], 0) + _varint(request_id)
