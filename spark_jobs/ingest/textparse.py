"""Number parsing of Arrow string arrays with numba, in the canonical forms where Spark agrees exactly.

Why: a typed column crosses from the Python reader into the JVM about five times cheaper than a
string column, and Spark then casts nothing. Only *canonical* text is parsed here; anything else
(signs, spaces, leading zeros, hex, 'Infinity', too many digits, ...) stays text and Spark's own
``try_cast`` decides, so typed parsing never changes what a value means:

- integers: ``0`` or ``-?[1-9][0-9]{0,17}``. ``str(value) == text``, so a string id rebuilt from the
  integer is the original text, and 18 digits cannot overflow int64;
- non-negative decimals: ``[0-9]*(.[0-9]*)?([eE][+-]?[0-9]+)?`` with at most 15 significant digits
  and a decimal exponent within +-22: the value is then one exact IEEE multiplication or division
  (Clinger's fast path), i.e. correctly rounded, the same double as Java's ``parseDouble``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa


def string_parts(arr: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(offsets, data bytes, validity or None) of a string / large_string array, without copies."""
    bufs = arr.buffers()
    off_t = np.int64 if pa.types.is_large_string(arr.type) else np.int32
    offsets = np.frombuffer(bufs[1], dtype=off_t, count=len(arr) + 1, offset=arr.offset * np.dtype(off_t).itemsize)
    data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
    valid = None
    if arr.null_count:
        valid = np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    return offsets, data, valid


def parse_canonical(arr: pa.Array, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """(values, ok) of a string array: ``ok`` where the text is in canonical form (values elsewhere are
    undefined). ``kind`` is "long" (canonical integers) or "double" (canonical non-negative decimals)."""
    from spark_jobs.ingest import kernels

    n = len(arr)
    ok = np.zeros(n, dtype=np.bool_)
    parse: Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray], None]
    if kind == "long":
        out = np.zeros(n, dtype=np.int64)
        parse = kernels.parse_ints
    elif kind == "double":
        out = np.zeros(n, dtype=np.float64)
        parse = lambda o, d, v, k: kernels.parse_nonneg_floats(o, d, kernels.POW10, v, k)  # noqa: E731
    else:
        raise ValueError(f"unknown kind {kind!r}")
    if n == 0:
        return out, ok
    offsets, data, valid = string_parts(arr)
    parse(offsets, data, out, ok)
    if valid is not None:
        ok &= valid
    return out, ok
