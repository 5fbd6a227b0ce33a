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

import numba
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_POW10 = np.array([10.0**k for k in range(23)], dtype=np.float64)


@numba.njit(nogil=True, cache=True)
def _parse_ints(offsets, data, out, ok):  # pragma: no cover - compiled
    for i in range(len(offsets) - 1):
        a, b = offsets[i], offsets[i + 1]
        ok[i] = False
        if b <= a:
            continue
        neg = data[a] == 45  # '-'
        p = a + 1 if neg else a
        nd = b - p
        if nd < 1 or nd > 18 or (data[p] == 48 and (nd > 1 or neg)):  # leading zero, "-0"
            continue
        v = 0
        good = True
        for j in range(p, b):
            d = np.int64(data[j]) - 48
            if d < 0 or d > 9:
                good = False
                break
            v = v * 10 + d
        if good:
            out[i] = -v if neg else v
            ok[i] = True


@numba.njit(nogil=True, cache=True)
def _parse_nonneg_floats(offsets, data, pow10, out, ok):  # pragma: no cover - compiled
    for i in range(len(offsets) - 1):
        a, b = offsets[i], offsets[i + 1]
        ok[i] = False
        mant = np.int64(0)
        sig = 0  # significant digits taken into mant
        digits = 0
        scale = 0  # decimal exponent from the digits after the point
        dot = False
        j = a
        good = b > a
        while j < b:
            c = data[j]
            if 48 <= c <= 57:
                digits += 1
                if mant > 0 or c != 48:
                    sig += 1
                    if sig > 15:
                        good = False
                        break
                mant = mant * 10 + (c - 48)
                if dot:
                    scale -= 1
            elif c == 46 and not dot:  # '.'
                dot = True
            else:
                break
            j += 1
        if not good or digits == 0:
            continue
        e = 0
        if j < b:
            if data[j] != 101 and data[j] != 69:  # 'e' / 'E'
                continue
            j += 1
            eneg = False
            if j < b and (data[j] == 43 or data[j] == 45):
                eneg = data[j] == 45
                j += 1
            ed = 0
            while j < b and 48 <= data[j] <= 57 and ed < 4:
                e = e * 10 + (data[j] - 48)
                ed += 1
                j += 1
            if ed == 0 or j != b:
                continue
            if eneg:
                e = -e
        k = scale + e
        if mant == 0:
            out[i] = 0.0
        elif 0 <= k <= 22:
            out[i] = mant * pow10[k]
        elif -22 <= k < 0:
            out[i] = mant / pow10[-k]
        else:
            continue
        ok[i] = True


def _string_parts(arr: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(offsets, data bytes, validity or None) of a string / large_string array, without copies."""
    bufs = arr.buffers()
    off_t = np.int64 if pa.types.is_large_string(arr.type) else np.int32
    offsets = np.frombuffer(bufs[1], dtype=off_t, count=len(arr) + 1, offset=arr.offset * np.dtype(off_t).itemsize)
    data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
    valid = None
    if arr.null_count:
        valid = np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    return offsets, data, valid


def split_typed(arr: pa.Array, kind: str) -> tuple[pa.Array, pa.Array]:
    """(typed values where the text is canonical, else null; the text where it is not, else null).

    ``kind`` is "long" (canonical integers) or "double" (canonical non-negative decimals).
    """
    n = len(arr)
    if n == 0:
        t = pa.int64() if kind == "long" else pa.float64()
        return pa.array([], t), pa.array([], arr.type)
    offsets, data, valid = _string_parts(arr)
    ok = np.empty(n, dtype=np.bool_)
    if kind == "long":
        out = np.empty(n, dtype=np.int64)
        _parse_ints(offsets, data, out, ok)
    elif kind == "double":
        out = np.empty(n, dtype=np.float64)
        _parse_nonneg_floats(offsets, data, _POW10, out, ok)
    else:
        raise ValueError(f"unknown typed kind {kind!r}")
    if valid is not None:
        ok &= valid
    typed = pa.array(out, mask=~ok)
    text = arr if not ok.any() else pc.if_else(pa.array(ok), pa.scalar(None, arr.type), arr)
    return typed, text
