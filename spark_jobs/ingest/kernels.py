"""The numba kernels of ingest, in one module imported only when a task needs one.

Why a separate module: importing numba and loading a cached kernel costs a fresh Python worker about
half a second; tasks of small graphs never need a kernel and skip that.
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(nogil=True, cache=True)
def parse_ints(offsets, data, out, ok):  # pragma: no cover - compiled
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
def parse_nonneg_floats(offsets, data, pow10, out, ok):  # pragma: no cover - compiled
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


@numba.njit(nogil=True, cache=True)
def no_blank_ends(offsets, data, out):  # pragma: no cover - compiled
    for i in range(len(offsets) - 1):
        a, b = offsets[i], offsets[i + 1]
        out[i] = b > a and data[a] > 32 and data[b - 1] > 32
