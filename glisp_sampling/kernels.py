"""One-hop sampling kernels (GLISP Gather, Algorithms 2-3) over one partition's CSR arrays.

:func:`sample_tasks` works on *tasks*: one task is one (seed vertex, edge type) pair with a contiguous
range ``[start, end)`` of positions into the out-edge array (``is_in=False``, position = edge local id)
or into ``in_eid`` (``is_in=True``). A task returns at most its fanout, so one pass writes every task's
edges at a running cursor into buffers sized by the fanouts (no count pass; untouched pages of the
buffer are never faulted in). It releases the GIL, so a thread pool can run chunks of one batch side
by side, each into its own region.

Randomness is an inline counter-based generator (splitmix64) seeded per task from (request seed,
global vertex id, slot, partition id, direction): results are reproducible given the request seed,
independent of how the batch was chunked, and independent between partitions.

Methods (``method`` argument):

- ``QUOTA``: uniform without replacement, the paper's local quota. The server holds ``c`` of the
  vertex's ``D`` global edges. If ``D <= f`` every local edge is returned; else ``x = f*c/D`` and
  ``n = floor(x) + Bernoulli(x - floor(x))`` capped at ``c`` local edges are drawn without
  replacement, so each edge is included with probability exactly ``f/D``. Needs the global degree,
  so it applies only to untyped, time-unrestricted requests. Merge: concatenate.
- ``KEYED``: uniform without replacement with exactly ``min(f, D)`` edges: A-ES with all weights 1.
  The server returns its local top-``min(f, c)`` by key ``log(U)``; the client keeps the global
  top-``f``. The keys of the local top-n are generated as the top order statistics of ``c``
  uniforms (``O(n)``, not ``O(c)``), assigned to a uniformly random ordered n-subset. Used when the
  global count of eligible edges is unknown (per-type fanouts, a time bound). Merge: top-f by key.
- ``REPLACE``: uniform with replacement, exactly ``f`` draws. Draw ``k`` on this server picks a
  uniform local edge with key ``log(U)/c`` (the log of the largest of ``c`` uniforms); the client
  keeps, per draw, the entry with the largest key across servers, which is a uniform edge of all
  ``D``. Each server returns ``f`` entries per task (draw order). Merge: per-draw max.
- ``WEIGHTED``: A-ES, key ``log(U)/w`` for every eligible edge with ``w > 0``; the local top-``f`` is
  returned with keys; the client keeps the global top-``f`` (it lies in the union of the local
  top-f sets). Keys are drawn with exponential jumps (A-ExpJ): the same joint law, but after the
  first ``f`` edges only ``O(f log(c/f))`` random draws instead of one per edge. Merge: top-f by key.
"""

from __future__ import annotations

import math
from typing import Any, TypeAlias

import numpy as np
from numba import njit
from numpy.typing import NDArray

QUOTA = 0
KEYED = 1
REPLACE = 2
WEIGHTED = 3
METHOD_NAMES = {QUOTA: "quota", KEYED: "keyed", REPLACE: "replace", WEIGHTED: "weighted"}

EDGE_ID_SHIFT = 40  # global edge id = (part_id << 40) | edge_local_id

_GAMMA = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S1 = np.uint64(0xD1B54A32D192ED03)
_S2 = np.uint64(0x8CB92BA72F3D8DD7)
_U30 = np.uint64(30)
_U27 = np.uint64(27)
_U31 = np.uint64(31)
_U11 = np.uint64(11)
_INV53 = 1.0 / 9007199254740992.0  # 2**-53

# An integer scalar inside the kernels: numba lowers Python ints and NumPy integers alike (int64), and
# the kernels mix both (loop counters, np.int64(...) reads).
_Int: TypeAlias = int | np.integer[Any]


@njit(inline="always", nogil=True, cache=True)
def _mix(z: np.uint64) -> np.uint64:
    z = (z ^ (z >> _U30)) * _M1
    z = (z ^ (z >> _U27)) * _M2
    return z ^ (z >> _U31)


@njit(inline="always", nogil=True, cache=True)
def _next(state: np.uint64) -> tuple[np.uint64, np.uint64]:
    """splitmix64: returns (64 random bits, next state)."""
    state = state + _GAMMA
    return _mix(state), state


@njit(inline="always", nogil=True, cache=True)
def _uniform(state: np.uint64) -> tuple[float, np.uint64]:
    """A double in (0, 1] (never 0, so log() is finite) and the next state."""
    z, state = _next(state)
    return (np.float64(z >> _U11) + 1.0) * _INV53, state


@njit(inline="always", nogil=True, cache=True)
def _below(c: _Int, state: np.uint64) -> tuple[_Int, np.uint64]:
    """A uniform integer in [0, c) and the next state (53-bit float method; bias < c / 2**53)."""
    z, state = _next(state)
    k: _Int = np.int64(np.float64(z >> _U11) * _INV53 * c)
    if k >= c:
        k = c - 1
    return k, state


@njit(inline="always", nogil=True, cache=True)
def task_seed(req_seed: np.uint64, gid: _Int, slot: _Int, part: _Int, is_in: _Int) -> np.uint64:
    """Seed of one task's stream: distinct per (request, vertex, slot, partition, direction)."""
    h = _mix(np.uint64(req_seed) + _GAMMA * (np.uint64(gid) + np.uint64(1)))
    tag = np.uint64(slot) * _S1 + np.uint64(part) * _S2 + np.uint64(is_in)
    return _mix(h ^ (tag + _GAMMA))


@njit(inline="always", nogil=True, cache=True)
def _edge_at(pos: _Int, is_in: bool, in_eid: np.ndarray) -> np.int64:
    if is_in:
        return np.int64(in_eid[pos])
    return np.int64(pos)


@njit(inline="always", nogil=True, cache=True)
def _eligible(e: _Int, has_time: bool, tmax: np.int64, ts: np.ndarray, need_weight: bool, weight: np.ndarray) -> bool:
    if has_time and ts[e] > tmax:
        return False
    if need_weight and not (weight[e] > 0.0):
        return False
    return True


@njit(nogil=True, cache=True)
def _pick(n: _Int, c: _Int, state: np.uint64, pick: NDArray[np.int64], scratch: NDArray[np.int64]) -> np.uint64:
    """A uniformly random *ordered* n-subset of range(c) into pick[:n]; returns the next state.

    Small n against c: rejection with a linear membership check (O(n^2), n is a fanout). Otherwise a
    partial Fisher-Yates over scratch[:c] (O(c)).
    """
    if n <= 32 and 2 * n <= c:
        for j in range(n):
            while True:
                k, state = _below(c, state)
                dup = False
                for i in range(j):
                    if pick[i] == k:
                        dup = True
                        break
                if not dup:
                    break
            pick[j] = k
        return state
    for i in range(c):
        scratch[i] = i
    for j in range(n):
        k, state = _below(c - j, state)
        k += j
        tmp = scratch[j]
        scratch[j] = scratch[k]
        scratch[k] = tmp
        pick[j] = scratch[j]
    return state


@njit(nogil=True, cache=True)
def _heap_swap(hk: NDArray[np.float64], hp: NDArray[np.int64], i: _Int, j: _Int) -> None:
    """Swap heap entries i and j (key and payload)."""
    hk[i], hk[j] = hk[j], hk[i]
    hp[i], hp[j] = hp[j], hp[i]


@njit(nogil=True, cache=True)
def _heap_sift_down(hk: NDArray[np.float64], hp: NDArray[np.int64], size: _Int, i: _Int) -> None:
    """Min-heap on keys hk (payload hp) after the root was replaced."""
    while True:
        left = 2 * i + 1
        if left >= size:
            return
        small = left
        right = left + 1
        if right < size and hk[right] < hk[left]:
            small = right
        if hk[small] < hk[i]:
            _heap_swap(hk, hp, i, small)
            i = small
        else:
            return


@njit(nogil=True, cache=True)
def _heap_sift_up(hk: NDArray[np.float64], hp: NDArray[np.int64], i: _Int) -> None:
    while i > 0:
        parent = (i - 1) // 2
        if hk[i] < hk[parent]:
            _heap_swap(hk, hp, i, parent)
            i = parent
        else:
            return


@njit(nogil=True, cache=True)
def _eligible_positions(
    start: _Int,
    end: _Int,
    is_in: bool,
    in_eid: np.ndarray,
    has_time: bool,
    tmax: np.int64,
    ts: np.ndarray,
    need_w: bool,
    weight: np.ndarray,
    buf: NDArray[np.int64],
) -> int:
    """Positions in [start, end) whose edge passes the time bound / has positive weight, into buf."""
    c = 0
    for p in range(start, end):
        if _eligible(_edge_at(p, is_in, in_eid), has_time, tmax, ts, need_w, weight):
            buf[c] = p
            c += 1
    return c


@njit(nogil=True, cache=True)
def _weighted_expj(
    start: _Int,
    end: _Int,
    f: _Int,
    state: np.uint64,
    is_in: bool,
    in_eid: np.ndarray,
    has_time: bool,
    tmax: np.int64,
    ts: np.ndarray,
    weight: np.ndarray,
    hk: NDArray[np.float64],
    hp: NDArray[np.int64],
) -> int:
    """A-ES local top-f by key log(U)/w with exponential jumps (Efraimidis-Spirakis A-ExpJ).

    The keys have the joint law of A-Res (one log(U)/w per eligible edge) but only O(f log(c/f)) of
    them are drawn: after the heap is full, the weight to skip before the next insertion is
    log(U)/log(T) (T the smallest key), and the inserted key is drawn from U(T^w, 1). Returns the
    heap size; hk/hp hold (log-key, position).
    """
    size = 0
    jump = 0.0
    for p in range(start, end):
        e = _edge_at(p, is_in, in_eid)
        if has_time and ts[e] > tmax:
            continue
        w = np.float64(weight[e])
        if not (w > 0.0):
            continue
        if size < f:
            u, state = _uniform(state)
            hk[size] = math.log(u) / w
            hp[size] = p
            _heap_sift_up(hk, hp, size)
            size += 1
            if size == f:
                u, state = _uniform(state)
                jump = math.log(u) / hk[0] if hk[0] < 0.0 else 0.0
            continue
        jump -= w
        if jump > 0.0:
            continue
        tw = math.exp(w * hk[0])  # T^w: the new key is drawn from U(T^w, 1)
        u, state = _uniform(state)
        r = tw + (1.0 - tw) * u
        hk[0] = math.log(r) / w if r < 1.0 else 0.0
        hp[0] = p
        _heap_sift_down(hk, hp, size, 0)
        u, state = _uniform(state)
        jump = math.log(u) / hk[0] if hk[0] < 0.0 else 0.0
    return size


@njit(inline="always", nogil=True, cache=True)
def _quota_count(c: _Int, gdeg: _Int, f: _Int, state: np.uint64) -> tuple[_Int, np.uint64]:
    """The paper's local quota: all c local edges when D <= f, else floor(x) + Bernoulli(x - floor(x))
    with x = f*c/D, capped at c. Uses counter 0 of the task's stream; returns (n, next state)."""
    if gdeg <= f:
        return c, state
    x = f * c / gdeg
    n: _Int = np.int64(math.floor(x))
    u, _ = _uniform(state)
    if u <= x - n:  # u in (0, 1]: P(u <= q) = q
        n += 1
    if n > c:
        n = c
    _, state = _next(state)
    return n, state


@njit(nogil=True, cache=True)
def _task_ranges(
    lids: np.ndarray,
    nslot: _Int,
    starts: NDArray[np.int64],
    ends: NDArray[np.int64],
    ranged: bool,
    indptr: np.ndarray,
    gdeg_of: np.ndarray,
    i0: _Int,
    i1: _Int,
    st: NDArray[np.int64],
    en: NDArray[np.int64],
    gd: NDArray[np.int64],
) -> None:
    """Pass 1: every task's edge range (and the seed's global degree): independent loads only."""
    for i in range(i0, i1):
        lid = np.int64(lids[i])
        for j in range(nslot):
            t = i * nslot + j
            k = t - i0 * nslot
            if ranged:
                st[k] = starts[t]
                en[k] = ends[t]
            else:
                st[k] = indptr[lid]
                en[k] = indptr[lid + 1]
            gd[k] = gdeg_of[lid]


@njit(nogil=True, cache=True)
def _task_picks(
    method: _Int,
    gids: NDArray[np.int64],
    nslot: _Int,
    fans: NDArray[np.int64],
    req_seed: np.uint64,
    part: _Int,
    is_in: bool,
    in_eid: np.ndarray,
    has_time: bool,
    tmax: np.int64,
    ts: np.ndarray,
    weight: np.ndarray,
    i0: _Int,
    i1: _Int,
    st: NDArray[np.int64],
    en: NDArray[np.int64],
    gd: NDArray[np.int64],
    counts: NDArray[np.int32],
    pos: NDArray[np.int64],
    key_out: NDArray[np.float32],
    o0: _Int,
) -> _Int:
    """Pass 2: per task, how many edges and which positions (``pos[o - o0]``); keys at ``key_out[o]``."""
    maxf = 1
    for j in range(nslot):
        if fans[j] > maxf:
            maxf = fans[j]
    # Scratch is sized once and never rebound in the loop (a rebound array costs reference counting
    # per task): eligible positions need the longest range, and so does Fisher-Yates when f > 32 (for
    # f <= 32 it only runs when c < 2f).
    filtered = has_time or method == WEIGHTED
    maxc = 0
    if filtered or maxf > 32:
        for k in range(len(st)):
            if en[k] - st[k] > maxc:
                maxc = en[k] - st[k]
    buf = np.empty(maxc if filtered else 0, np.int64)  # eligible positions
    fy = np.empty(max(2 * maxf, maxc, 1), np.int64)  # Fisher-Yates scratch
    pick = np.empty(maxf, np.int64)
    hk = np.empty(maxf, np.float64)
    hp = np.empty(maxf, np.int64)
    need_w = method == WEIGHTED
    o = o0
    for i in range(i0, i1):
        for j in range(nslot):
            t = i * nslot + j
            k0 = t - i0 * nslot
            start = np.int64(st[k0])
            end = np.int64(en[k0])
            f: _Int = np.int64(fans[j])
            counts[t] = 0
            if f <= 0 or end <= start:
                continue
            q = o - o0
            if method == QUOTA and gd[k0] <= f:  # every local edge, no randomness needed
                n: _Int = end - start
                for k in range(n):
                    pos[q + k] = start + k
                counts[t] = n
                o += n
                continue
            if method == WEIGHTED and not has_time and gd[k0] <= f:
                # D <= f: A-ES keeps every edge of positive weight whatever the keys, so draw none
                n = _eligible_positions(start, end, is_in, in_eid, False, tmax, ts, True, weight, buf)
                for k in range(n):
                    pos[q + k] = buf[k]
                    key_out[o + k] = 0.0
                counts[t] = n
                o += n
                continue
            state = task_seed(req_seed, gids[i], j, part, is_in)
            if method == WEIGHTED:
                n = _weighted_expj(start, end, f, state, is_in, in_eid, has_time, tmax, ts, weight, hk, hp)
                for k in range(n):
                    pos[q + k] = hp[k]
                    key_out[o + k] = hk[k]
                counts[t] = n
                o += n
                continue
            if filtered:
                c: _Int = _eligible_positions(start, end, is_in, in_eid, has_time, tmax, ts, need_w, weight, buf)
            else:
                c = end - start
            if c == 0:
                continue
            if method == QUOTA:
                n, state = _quota_count(c, np.int64(gd[k0]), f, state)
            elif method == REPLACE:
                n = f
            else:
                n = min(f, c)
            if method == REPLACE:
                for k in range(n):
                    u, state = _uniform(state)
                    d, state = _below(c, state)
                    pos[q + k] = buf[d] if filtered else start + d
                    key_out[o + k] = math.log(u) / c  # log of the largest of c uniforms
            elif n == c and method == QUOTA:
                for k in range(n):
                    pos[q + k] = start + k
            else:
                state = _pick(n, c, state, pick, fy)
                for k in range(n):
                    pos[q + k] = buf[pick[k]] if filtered else start + pick[k]
                if method == KEYED:
                    acc = 0.0
                    for k in range(n):
                        u, state = _uniform(state)
                        acc += math.log(u) / (c - k)
                        key_out[o + k] = acc
            counts[t] = n
            o += n
    return o


@njit(nogil=True, cache=True)
def _task_edges(
    pos: NDArray[np.int64],
    m: _Int,
    is_in: bool,
    in_eid: np.ndarray,
    out_nbr: np.ndarray,
    out_indptr: np.ndarray,
    gid_of: np.ndarray,
    part: _Int,
    want_eids: bool,
    nbr_out: np.ndarray,
    eid_out: NDArray[np.int64],
    o0: _Int,
) -> None:
    """Pass 3: neighbour global ids (and global edge ids) of the picked positions, in three sweeps of
    independent loads (edge, neighbour's local id, its global id)."""
    base = np.int64(part) << np.int64(EDGE_ID_SHIFT)
    if is_in:
        for k in range(m):
            e = np.int64(in_eid[pos[k]])
            pos[k] = e
            if want_eids:
                eid_out[o0 + k] = base | e
        for k in range(m):  # the source of in-edge e: the CSR row holding it
            nbr_out[o0 + k] = np.searchsorted(out_indptr, pos[k], side="right") - 1
    else:
        for k in range(m):
            if want_eids:
                eid_out[o0 + k] = base | pos[k]
            nbr_out[o0 + k] = out_nbr[pos[k]]
    for k in range(m):
        nbr_out[o0 + k] = gid_of[nbr_out[o0 + k]]


@njit(nogil=True, cache=True)
def sample_tasks(
    method: _Int,
    lids: np.ndarray,
    gids: NDArray[np.int64],
    nslot: _Int,
    starts: NDArray[np.int64],
    ends: NDArray[np.int64],
    ranged: bool,
    indptr: np.ndarray,
    gdeg_of: np.ndarray,
    fans: NDArray[np.int64],
    req_seed: np.uint64,
    part: _Int,
    is_in: bool,
    in_eid: np.ndarray,
    has_time: bool,
    tmax: np.int64,
    ts: np.ndarray,
    weight: np.ndarray,
    out_nbr: np.ndarray,
    out_indptr: np.ndarray,
    gid_of: np.ndarray,
    want_eids: bool,
    i0: _Int,
    i1: _Int,
    counts: NDArray[np.int32],
    nbr_out: np.ndarray,
    eid_out: NDArray[np.int64],
    key_out: NDArray[np.float32],
    o0: _Int,
) -> int:
    """Sample the tasks of seeds ``i0 <= i < i1``; returns the output cursor after the last one.

    Task ``t = i * nslot + j`` is seed ``i`` (global id ``gids[i]``, local id ``lids[i]``) and slot
    ``j`` (fanout ``fans[j]``). Its range is ``[indptr[lid], indptr[lid + 1])`` (``ranged=False``) or
    ``[starts[t], ends[t])`` (per-type ranges). A task returns at most its fanout, so its edges are
    written at a running cursor from ``o0``; ``counts[t]`` is how many. ``nbr_out`` receives the
    neighbours' global ids from ``gid_of`` (int32 when every id fits, so the array is the wire
    payload), ``eid_out`` global edge ids when ``want_eids``, ``key_out`` keys for KEYED, REPLACE and
    WEIGHTED. ``gdeg_of[lid]`` (global degree) is read by QUOTA only.

    Three passes (ranges; picks; edges and ids) rather than one loop per task: each pass is a short
    loop of independent loads, so the CPU keeps many cache misses in flight (measured 2x faster on a
    hop of 26k vertices than the fused loop, whose chain of dependent misses ran one task at a time).
    """
    nt = (i1 - i0) * nslot
    st = np.empty(nt, np.int64)
    en = np.empty(nt, np.int64)
    gd = np.empty(nt, np.int64)
    _task_ranges(lids, nslot, starts, ends, ranged, indptr, gdeg_of, i0, i1, st, en, gd)
    cap = 0  # a task returns at most min(fanout, its range) edges (REPLACE: its fanout when the range is not empty)
    for t in range(nt):
        f = fans[t % nslot]
        d = en[t] - st[t]
        if method == REPLACE:
            cap += f if d > 0 else 0
        else:
            cap += f if f < d else d
    pos = np.empty(cap, np.int64)
    o = _task_picks(
        method,
        gids,
        nslot,
        fans,
        req_seed,
        part,
        is_in,
        in_eid,
        has_time,
        tmax,
        ts,
        weight,
        i0,
        i1,
        st,
        en,
        gd,
        counts,
        pos,
        key_out,
        o0,
    )
    _task_edges(pos, o - o0, is_in, in_eid, out_nbr, out_indptr, gid_of, part, want_eids, nbr_out, eid_out, o0)
    return o  # type: ignore[return-value]  # numba returns the int64 cursor to Python as an int


@njit(nogil=True, cache=True)
def typed_ranges(
    lids: np.ndarray,
    etypes: NDArray[np.int64],
    indptr: np.ndarray,
    tptr: np.ndarray,
    tids: np.ndarray,
    tend: np.ndarray,
    starts: NDArray[np.int64],
    ends: NDArray[np.int64],
) -> None:
    """Per (seed i, requested type j) task ``t = i * len(etypes) + j``: the range of the seed's edges of
    that type, from the partition's type index (one pass over each seed's segments for all types; an
    absent type gives an empty range at the vertex's start)."""
    nslot = len(etypes)
    for i in range(len(lids)):
        v = np.int64(lids[i])
        lo = np.int64(indptr[v])
        for j in range(nslot):
            starts[i * nslot + j] = lo
            ends[i * nslot + j] = lo
        s = lo
        for q in range(tptr[v], tptr[v + 1]):
            e = np.int64(tend[q])
            for j in range(nslot):
                if tids[q] == etypes[j]:
                    starts[i * nslot + j] = s
                    ends[i * nslot + j] = e
            s = e


@njit(nogil=True, cache=True)
def local_ids(ids: NDArray[np.int64], g2l: NDArray[np.int32], out: NDArray[np.int32]) -> int:
    """``out[i] = g2l[ids[i]]`` (-1 where absent or out of range); returns how many are absent."""
    bad = 0
    n = len(g2l)
    for i in range(len(ids)):
        v = np.int64(ids[i])
        lid = g2l[v] if 0 <= v < n else -1
        out[i] = lid
        if lid < 0:
            bad += 1
    return bad
