"""The numba kernels of ingest, in one module imported only when a task needs one.

Why a separate module: importing numba and loading a cached kernel costs a fresh Python worker about
half a second; tasks of small graphs never need a kernel and skip that.

The canonical forms (see ``textparse``) are decided by ``int_field`` and ``float_field``.
"""

from __future__ import annotations

import numba
import numpy as np

POW10 = np.array([10.0**k for k in range(23)], dtype=np.float64)


@numba.njit(nogil=True, cache=True, inline="always")
def int_field(data, a, b):  # pragma: no cover - compiled
    """(ok, value): ok when data[a:b] is 0 or -?[1-9][0-9]{0,17}."""
    if b <= a:
        return False, 0
    neg = data[a] == 45  # '-'
    p = a + 1 if neg else a
    nd = b - p
    if nd < 1 or nd > 18 or (data[p] == 48 and (nd > 1 or neg)):  # leading zero, "-0"
        return False, 0
    v = np.int64(0)
    for j in range(p, b):
        d = np.int64(data[j]) - 48
        if d < 0 or d > 9:
            return False, 0
        v = v * 10 + d
    return True, -v if neg else v


@numba.njit(nogil=True, cache=True, inline="always")
def float_field(data, a, b, pow10):  # pragma: no cover - compiled
    """(ok, value): ok when data[a:b] is a non-negative decimal with <= 15 significant digits and a
    decimal exponent within +-22, so that one IEEE operation gives the correctly rounded value."""
    mant = np.int64(0)
    sig = 0
    digits = 0
    scale = 0
    dot = False
    j = a
    if b <= a:
        return False, 0.0
    while j < b:
        c = data[j]
        if 48 <= c <= 57:
            digits += 1
            if mant > 0 or c != 48:
                sig += 1
                if sig > 15:
                    return False, 0.0
            mant = mant * 10 + (c - 48)
            if dot:
                scale -= 1
        elif c == 46 and not dot:  # '.'
            dot = True
        else:
            break
        j += 1
    if digits == 0:
        return False, 0.0
    e = 0
    if j < b:
        if data[j] != 101 and data[j] != 69:  # 'e' / 'E'
            return False, 0.0
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
            return False, 0.0
        if eneg:
            e = -e
    k = scale + e
    if mant == 0:
        return True, 0.0
    if 0 <= k <= 22:
        return True, mant * pow10[k]
    if -22 <= k < 0:
        return True, mant / pow10[-k]
    return False, 0.0


@numba.njit(nogil=True, cache=True)
def parse_ints(offsets, data, out, ok):  # pragma: no cover - compiled
    for i in range(len(offsets) - 1):
        ok[i], out[i] = int_field(data, offsets[i], offsets[i + 1])


@numba.njit(nogil=True, cache=True)
def parse_nonneg_floats(offsets, data, pow10, out, ok):  # pragma: no cover - compiled
    for i in range(len(offsets) - 1):
        ok[i], out[i] = float_field(data, offsets[i], offsets[i + 1], pow10)


@numba.njit(nogil=True, cache=True)
def no_blank_ends(offsets, data, out):  # pragma: no cover - compiled
    for i in range(len(offsets) - 1):
        a, b = offsets[i], offsets[i + 1]
        out[i] = b > a and data[a] > 32 and data[b - 1] > 32
