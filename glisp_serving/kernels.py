"""One-hop sampling kernels (GLISP Gather, Algorithms 2-3) over one partition's CSR arrays.

Every kernel works on *tasks*: one task is one (seed vertex, edge type) pair with a contiguous range
``[start, end)`` of positions into the out-edge array (``is_in=False``, position = edge local id) or
into ``in_eid`` (``is_in=True``). Kernels run count-first-then-fill: :func:`count_tasks` computes how
many edges each task returns, the caller prefix-sums the counts and allocates the outputs once, and
:func:`fill_tasks` writes each task's slice. Both release the GIL, so a thread pool can run chunks of
one batch side by side.

Randomness is an inline counter-based generator (splitmix64) seeded per task from (request seed,
global vertex id, slot, partition id, direction): results are reproducible given the request seed,
independent of how the batch was chunked, and independent between partitions. The count pass and
the fill pass re-derive the same stream, so the count of the quota method is the same in both.

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
  top-f sets). Merge: top-f by key.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

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


@njit(inline="always", nogil=True, cache=True)
def _mix(z):
    z = (z ^ (z >> _U30)) * _M1
    z = (z ^ (z >> _U27)) * _M2
    return z ^ (z >> _U31)


@njit(inline="always", nogil=True, cache=True)
def _next(state):
    """splitmix64: returns (64 random bits, next state)."""
    state = state + _GAMMA
    return _mix(state), state


@njit(inline="always", nogil=True, cache=True)
def _uniform(state):
    """A double in (0, 1] (never 0, so log() is finite) and the next state."""
    z, state = _next(state)
    return (np.float64(z >> _U11) + 1.0) * _INV53, state


@njit(inline="always", nogil=True, cache=True)
def _below(c, state):
    """A uniform integer in [0, c) and the next state (53-bit float method; bias < c / 2**53)."""
    z, state = _next(state)
    k = np.int64(np.float64(z >> _U11) * _INV53 * c)
    if k >= c:
        k = c - 1
    return k, state


@njit(nogil=True, cache=True)
def task_seed(req_seed, gid, slot, part, is_in):
    """Seed of one task's stream: distinct per (request, vertex, slot, partition, direction)."""
    h = _mix(np.uint64(req_seed) + _GAMMA * (np.uint64(gid) + np.uint64(1)))
    tag = np.uint64(slot) * _S1 + np.uint64(part) * _S2 + np.uint64(is_in)
    return _mix(h ^ (tag + _GAMMA))


@njit(inline="always", nogil=True, cache=True)
def _edge_at(pos, is_in, in_eid):
    if is_in:
        return np.int64(in_eid[pos])
    return np.int64(pos)


@njit(inline="always", nogil=True, cache=True)
def _eligible(e, has_time, tmax, ts, need_weight, weight):
    if has_time and ts[e] > tmax:
        return False
    if need_weight and not (weight[e] > 0.0):
        return False
    return True


@njit(nogil=True, cache=True)
def _count_one(method, start, end, gdeg, f, seed, is_in, in_eid, has_time, tmax, ts, weight):
    """(number of edges the task returns, number of eligible local edges)."""
    if f <= 0 or end <= start:
        return 0, 0
    need_w = method == WEIGHTED
    if has_time or need_w:
        c = 0
        for p in range(start, end):
            if _eligible(_edge_at(p, is_in, in_eid), has_time, tmax, ts, need_w, weight):
                c += 1
    else:
        c = end - start
    if c == 0:
        return 0, 0
    if method == QUOTA:
        if gdeg <= f:
            return c, c
        x = f * c / gdeg
        n = np.int64(math.floor(x))
        u, _ = _uniform(seed)  # counter 0 of the task's stream
        if u <= x - n:  # u in (0, 1]: P(u <= q) = q
            n += 1
        if n > c:
            n = c
        return n, c
    if method == REPLACE:
        return f, c
    return min(f, c), c


@njit(nogil=True, cache=True)
def count_tasks(method, starts, ends, gdeg, fanouts, seeds, is_in, in_eid, has_time, tmax, ts, weight, counts):
    """Pass 1: ``counts[t]`` = edges task ``t`` returns."""
    for t in range(len(starts)):
        n, _ = _count_one(
            method, np.int64(starts[t]), np.int64(ends[t]), np.int64(gdeg[t]), np.int64(fanouts[t]),
            seeds[t], is_in, in_eid, has_time, tmax, ts, weight,
        )  # fmt: skip
        counts[t] = n


@njit(nogil=True, cache=True)
def _pick(n, c, state, pick, scratch):
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
def _heap_swap(hk, hp, i, j):
    """Swap heap entries i and j (key and payload)."""
    hk[i], hk[j] = hk[j], hk[i]
    hp[i], hp[j] = hp[j], hp[i]


@njit(nogil=True, cache=True)
def _heap_sift_down(hk, hp, size, i):
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
def _heap_sift_up(hk, hp, i):
    while i > 0:
        parent = (i - 1) // 2
        if hk[i] < hk[parent]:
            _heap_swap(hk, hp, i, parent)
            i = parent
        else:
            return


@njit(nogil=True, cache=True)
def fill_tasks(
    method, starts, ends, gdeg, fanouts, seeds, is_in, in_eid, has_time, tmax, ts, weight,
    out_nbr, out_indptr, global_id, part, want_eids, offsets, nbr_out, eid_out, key_out,
):  # fmt: skip
    """Pass 2: write task t's edges into ``[offsets[t], offsets[t+1])`` of the outputs.

    ``nbr_out`` receives neighbour GLOBAL ids; ``eid_out`` global edge ids when ``want_eids``;
    ``key_out`` keys for KEYED/REPLACE/WEIGHTED (unused for QUOTA).
    """
    maxlen = 0
    maxf = 0
    for t in range(len(starts)):
        ln = np.int64(ends[t]) - np.int64(starts[t])
        if ln > maxlen:
            maxlen = ln
        if fanouts[t] > maxf:
            maxf = fanouts[t]
    scratch = np.empty(max(maxlen, 1), np.int64)  # eligible positions / Fisher-Yates
    scratch2 = np.empty(max(maxlen, 1), np.int64)
    pick = np.empty(max(maxf, 1), np.int64)
    hk = np.empty(max(maxf, 1), np.float64)
    hp = np.empty(max(maxf, 1), np.int64)
    base = np.int64(part) << np.int64(EDGE_ID_SHIFT)
    need_w = method == WEIGHTED
    for t in range(len(starts)):
        o = offsets[t]
        n_out = offsets[t + 1] - o
        if n_out == 0:
            continue
        start = np.int64(starts[t])
        end = np.int64(ends[t])
        f = np.int64(fanouts[t])
        state = seeds[t]
        n, c = _count_one(method, start, end, np.int64(gdeg[t]), f, state, is_in, in_eid, has_time, tmax, ts, weight)
        if method == QUOTA:
            _, state = _next(state)  # counter 0 was the Bernoulli draw
        filtered = has_time or need_w
        if filtered:  # eligible positions, in range order
            k = 0
            for p in range(start, end):
                if _eligible(_edge_at(p, is_in, in_eid), has_time, tmax, ts, need_w, weight):
                    scratch[k] = p
                    k += 1
        if method == WEIGHTED:
            size = 0
            for i in range(c):
                p = scratch[i]
                e = _edge_at(p, is_in, in_eid)
                u, state = _uniform(state)
                key = math.log(u) / weight[e]
                if size < n:
                    hk[size] = key
                    hp[size] = p
                    _heap_sift_up(hk, hp, size)
                    size += 1
                elif key > hk[0]:
                    hk[0] = key
                    hp[0] = p
                    _heap_sift_down(hk, hp, size, 0)
            for j in range(n):
                pick[j] = hp[j]
                key_out[o + j] = hk[j]
        elif method == REPLACE:
            for j in range(n):
                u, state = _uniform(state)
                k, state = _below(c, state)
                pick[j] = scratch[k] if filtered else start + k
                key_out[o + j] = math.log(u) / c  # log of the largest of c uniforms
        else:  # QUOTA or KEYED: an ordered uniform n-subset
            if n == c and method == QUOTA:
                for j in range(n):
                    pick[j] = scratch[j] if filtered else start + j
            else:
                state = _pick(n, c, state, pick, scratch2)
                for j in range(n):
                    pick[j] = scratch[pick[j]] if filtered else start + pick[j]
            if method == KEYED:
                acc = 0.0
                for j in range(n):
                    u, state = _uniform(state)
                    acc += math.log(u) / (c - j)
                    key_out[o + j] = acc
        for j in range(n):
            p = pick[j]
            e = _edge_at(p, is_in, in_eid)
            if is_in:
                src = np.searchsorted(out_indptr, e, side="right") - 1
                nbr_out[o + j] = global_id[src]
            else:
                nbr_out[o + j] = global_id[out_nbr[p]]
            if want_eids:
                eid_out[o + j] = base | e


@njit(nogil=True, cache=True)
def make_seeds(req_seed, gids, slots_per_gid, part, is_in, out):
    """Task seeds for tasks ``t = i * slots_per_gid + j`` (vertex i, slot j), seed-major."""
    for i in range(len(gids)):
        for j in range(slots_per_gid):
            out[i * slots_per_gid + j] = task_seed(req_seed, gids[i], j, part, is_in)
