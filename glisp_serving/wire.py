"""numpy <-> ``Array`` messages: raw little-endian bytes with dtype and shape (no repeated numbers)."""

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
