"""numba kernels of the reader, imported on first use so that opening a partition does not load numba."""

from __future__ import annotations

import numba as nb
import numpy as np
from numpy.typing import NDArray


@nb.njit(nogil=True, cache=True)
def typed_range(  # pragma: no cover - compiled
    lids: np.ndarray, etype: np.int64, indptr: np.ndarray, tptr: np.ndarray, tids: np.ndarray, tend: np.ndarray
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    k = len(lids)
    start = np.empty(k, np.int64)
    end = np.empty(k, np.int64)
    for i in range(k):
        v = lids[i]
        if v < 0:
            start[i] = 0
            end[i] = 0
            continue
        lo = indptr[v]
        s = lo
        e = lo
        for j in range(tptr[v], tptr[v + 1]):
            if tids[j] == etype:
                e = tend[j]
                break
            s = tend[j]
            e = s
        if e == s:  # absent type: an empty range at the vertex's start
            s = lo
            e = lo
        start[i] = s
        end[i] = e
    return start, end


@nb.njit(nogil=True, cache=True)
def edge_type_of(  # pragma: no cover - compiled
    eids: NDArray[np.int64], src: NDArray[np.int64], tptr: np.ndarray, tids: np.ndarray, tend: np.ndarray
) -> NDArray[np.int32]:
    out = np.empty(len(eids), np.int32)
    for i in range(len(eids)):
        e = eids[i]
        v = src[i]
        t = -1
        for j in range(tptr[v], tptr[v + 1]):
            if e < tend[j]:
                t = tids[j]
                break
        out[i] = t
    return out
