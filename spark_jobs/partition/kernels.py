"""numba kernels of the partitioners: per-edge decisions, per-vertex state updates, streaming HDRF.

Every kernel is a pure function of its array arguments (no global RNG), so a result depends only on
the inputs and the seed; the same kernel runs inside Spark's ``mapInArrow`` workers and on the driver.
Partition sets are bitsets: ``bits[v, w]`` holds partitions ``64*w .. 64*w+63`` of vertex ``v``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

MIX = np.uint64(0x9E3779B97F4A7C15)


@njit(nogil=True, cache=True)
def splitmix64(x: np.ndarray) -> np.ndarray:
    """Counter-based hash (splitmix64 finaliser), vectorised; wraps like unsigned 64-bit C arithmetic."""
    out = np.empty(x.shape[0], np.uint64)
    for i in range(x.shape[0]):
        z = np.uint64(x[i]) + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        out[i] = z ^ (z >> np.uint64(31))
    return out


@njit(nogil=True, cache=True)
def pair_hash(src: np.ndarray, dst: np.ndarray, seed: int) -> np.ndarray:
    """Hash of the unordered pair {src, dst}: both directions of an edge hash alike."""
    m = src.shape[0]
    key = np.empty(m, np.uint64)
    s = np.uint64(seed) * np.uint64(0xD6E8FEB86659FD93)
    for i in range(m):
        a, b = src[i], dst[i]
        if a > b:
            a, b = b, a
        key[i] = (np.uint64(a) * np.uint64(0x9E3779B97F4A7C15)) ^ np.uint64(b) ^ s
    return splitmix64(key)


@njit(nogil=True, cache=True)
def vertex_hash(v: np.ndarray, seed: int) -> np.ndarray:
    key = np.empty(v.shape[0], np.uint64)
    s = np.uint64(seed) * np.uint64(0xD6E8FEB86659FD93)
    for i in range(v.shape[0]):
        key[i] = np.uint64(v[i]) ^ s
    return splitmix64(key)


# ---------------------------------------------------------------------------------------------
# Neighbour expansion: the per-edge decision of one round, and the delta it produces
# ---------------------------------------------------------------------------------------------


@njit(nogil=True, cache=True)
def _mix(a: int, b: int, seed: int) -> float:
    """Deterministic uniform [0, 1) from an unordered pair and a seed."""
    if a > b:
        a, b = b, a
    z = (
        (np.uint64(a) * np.uint64(0x9E3779B97F4A7C15))
        ^ np.uint64(b)
        ^ (np.uint64(seed) * np.uint64(0xD6E8FEB86659FD93))
    )
    z = z + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    return float(z >> np.uint64(11)) / 9007199254740992.0


@njit(nogil=True, cache=True)
def edge_round(
    src: np.ndarray,
    dst: np.ndarray,
    claim: np.ndarray,
    bits: np.ndarray,
    open_bits: np.ndarray,
    weight: np.ndarray,
    accept: np.ndarray,
    seed: int,
    take: np.ndarray,
) -> np.ndarray:
    """Decide every unallocated edge of one round; -1 = stays unallocated.

    Two-hop first (completing the previous round's expansion): an edge whose endpoints share open
    partitions goes to one of the shared ones; otherwise one-hop: an endpoint claimed this round takes
    the edge for its claimant. A two-hop edge is taken with probability ``accept[k]`` (else it waits,
    or goes one-hop): AdaDNE's soft brake on a partition's intake. Where several partitions qualify, one is drawn with probability
    proportional to ``weight`` (the driver makes it large for lightly loaded partitions) by a hash of the
    vertex pair: a batch-parallel stand-in for DNE's sequential "fewest edges wins", which in lock-step
    rounds would send every contested edge of a round to the same partition. A one-hop edge is taken
    with probability ``take[k]`` (AdaDNE: a claimed hub carrying more rows than the partition's per-round
    limit gives only part of its edges; the rest wait, the hub stays on the boundary). The decision depends on
    the unordered pair and broadcast state only, so all rows of a pair agree wherever they are processed.
    """
    m = src.shape[0]
    out = np.full(m, -1, np.int32)
    cand = np.empty(bits.shape[1] * 64, np.int64)
    for i in range(m):
        a = src[i]
        b = dst[i]
        nc = _shared_open_parts(bits, open_bits, a, b, cand)
        if nc > 0:
            k = _draw(cand, nc, weight, _mix(a, b, seed))
            if accept[k] >= 1.0 or _mix(a, b, seed + 0x5BD1E995) < accept[k]:
                out[i] = k
                continue
            nc = 0
        if nc == 0:
            ca = claim[a]
            cb = claim[b]
            if ca > cb:  # canonical order, so (a, b) and (b, a) draw alike
                ca, cb = cb, ca
            if ca >= 0:
                cand[nc] = ca
                nc += 1
            if cb >= 0 and cb != ca:
                cand[nc] = cb
                nc += 1
        if nc == 0:
            continue
        k = _draw(cand, nc, weight, _mix(a, b, seed))
        if take[k] >= 1.0 or _mix(a, b, seed + 0x2545F491) < take[k]:
            out[i] = k
    return out


@njit(nogil=True, cache=True)
def two_hop_counts(
    src: np.ndarray, dst: np.ndarray, bits: np.ndarray, open_bits: np.ndarray, weight: np.ndarray, seed: int
) -> np.ndarray:
    """Rows per partition that the coming round's two-hop step would offer (same draw as edge_round)."""
    parts = weight.shape[0]
    words = bits.shape[1]
    counts = np.zeros(parts, np.int64)
    cand = np.empty(words * 64, np.int64)
    for i in range(src.shape[0]):
        a = src[i]
        b = dst[i]
        nc = _shared_open_parts(bits, open_bits, a, b, cand)
        if nc > 0:
            counts[_draw(cand, nc, weight, _mix(a, b, seed))] += 1
    return counts


@njit(nogil=True, cache=True)
def _shared_open_parts(bits: np.ndarray, open_bits: np.ndarray, a: int, b: int, cand: np.ndarray) -> int:
    """Write into cand the open partitions holding both a and b (the two-hop candidates); return how many."""
    nc = 0
    for w in range(bits.shape[1]):
        c = bits[a, w] & bits[b, w] & open_bits[w]
        while c != 0:
            low = c & (~c + np.uint64(1))
            t = 0
            x = low
            while x > np.uint64(1):
                x >>= np.uint64(1)
                t += 1
            cand[nc] = w * 64 + t
            nc += 1
            c ^= low
    return nc


@njit(nogil=True, cache=True)
def _draw(cand: np.ndarray, nc: int, weight: np.ndarray, u: float) -> int:
    """One of cand[:nc], with probability proportional to weight, for the uniform draw u."""
    if nc == 1:
        return cand[0]
    tot = 0.0
    for j in range(nc):
        tot += weight[cand[j]]
    r = u * tot
    for j in range(nc):
        r -= weight[cand[j]]
        if r < 0.0:
            return cand[j]
    return cand[nc - 1]


@njit(nogil=True, cache=True)
def incidence_delta(src: np.ndarray, dst: np.ndarray, part: np.ndarray, parts: int):
    """Aggregate the allocated edges of a batch into (vertex, part, incidences) and rows per part.

    This is what returns to the driver each round: vertex-level, deduplicated within the batch, never
    the edges themselves.
    """
    m = src.shape[0]
    n_alloc = 0
    for i in range(m):
        if part[i] >= 0:
            n_alloc += 1
    keys = np.empty(2 * n_alloc, np.int64)
    rows = np.zeros(parts, np.int64)
    j = 0
    for i in range(m):
        k = part[i]
        if k >= 0:
            keys[j] = src[i] * parts + k
            keys[j + 1] = dst[i] * parts + k
            j += 2
            rows[k] += 1
    keys.sort()
    nu = 0
    for i in range(keys.shape[0]):
        if i == 0 or keys[i] != keys[i - 1]:
            nu += 1
    vert = np.empty(nu, np.int64)
    vpart = np.empty(nu, np.int32)
    cnt = np.empty(nu, np.int64)
    u = -1
    for i in range(keys.shape[0]):
        if i == 0 or keys[i] != keys[i - 1]:
            u += 1
            vert[u] = keys[i] // parts
            vpart[u] = keys[i] % parts
            cnt[u] = 1
        else:
            cnt[u] += 1
    return vert, vpart, cnt, rows


@njit(nogil=True, cache=True)
def apply_delta(
    bits: np.ndarray,
    resid: np.ndarray,
    vcount: np.ndarray,
    vert: np.ndarray,
    vpart: np.ndarray,
    cnt: np.ndarray,
) -> None:
    """Driver side: add partitions to vertices' sets, count new replicas, lower residual degrees."""
    for i in range(vert.shape[0]):
        v = vert[i]
        k = vpart[i]
        w = k // 64
        b = np.uint64(1) << np.uint64(k % 64)
        if bits[v, w] & b == 0:
            bits[v, w] |= b
            vcount[k] += 1
        resid[v] -= cnt[i]


@njit(nogil=True, cache=True)
def boundaries(resid: np.ndarray, bits: np.ndarray, parts: int):
    """CSR of the boundary sets: B_k = {v : k in parts(v), resid(v) > 0}, vertices ascending."""
    n = resid.shape[0]
    every = np.full(bits.shape[1], ~np.uint64(0), np.uint64)
    cand = np.empty(bits.shape[1] * 64, np.int64)
    size = np.zeros(parts + 1, np.int64)
    for v in range(n):
        if resid[v] > 0:
            nc = _shared_open_parts(bits, every, v, v, cand)
            for j in range(nc):
                size[cand[j] + 1] += 1
    ptr = np.cumsum(size)
    fill = ptr[:-1].copy()
    out = np.empty(ptr[-1], np.int64)
    for v in range(n):
        if resid[v] > 0:
            nc = _shared_open_parts(bits, every, v, v, cand)
            for j in range(nc):
                k = cand[j]
                out[fill[k]] = v
                fill[k] += 1
    return ptr, out


@njit(nogil=True, cache=True)
def take_seeds(
    order: np.ndarray,
    pos: np.ndarray,
    resid: np.ndarray,
    bits: np.ndarray,
    claim: np.ndarray,
    budget: int,
    max_count: int,
) -> np.ndarray:
    """Next seed vertices in ``order`` (degree ascending, random ties), until their residual degrees sum
    to ``budget`` or ``max_count`` are taken.

    ``pos[0]`` walks untouched vertices (no partition yet), preferred; ``pos[1]`` walks any vertex with
    unallocated edges, used once the first is exhausted. Both only move forward: O(|V|) in total.
    """
    words = bits.shape[1]
    taken = np.empty(max_count, np.int64)
    nt = 0
    got = 0
    n = order.shape[0]
    for phase in range(2):
        p = pos[phase]
        while p < n and nt < max_count and got < budget:
            v = order[p]
            ok = resid[v] > 0 and claim[v] < 0
            if ok and phase == 0:
                for w in range(words):
                    if bits[v, w] != 0:
                        ok = False
            if ok:
                taken[nt] = v
                nt += 1
                got += resid[v]
                claim[v] = -2  # reserved: no other partition takes it as a seed this round
            p += 1
        # do not consume the vertex that stopped the loop
        pos[phase] = p
        if nt >= max_count or got >= budget:
            break
    return taken[:nt]


@njit(nogil=True, cache=True)
def set_claims(claim: np.ndarray, verts: np.ndarray, k: int, rank: np.ndarray) -> None:
    """Partition k claims ``verts``; a vertex claimed twice goes to the better-ranked partition."""
    for v in verts:
        c = claim[v]
        if c < 0 or rank[k] < rank[c]:
            claim[v] = k


# ---------------------------------------------------------------------------------------------
# Baselines
# ---------------------------------------------------------------------------------------------


@njit(nogil=True, cache=True)
def edge_partition_2d(src: np.ndarray, dst: np.ndarray, parts: int) -> np.ndarray:
    """GraphX ``PartitionStrategy.EdgePartition2D`` on the unordered pair (min, max), Long arithmetic wrapping."""
    m = src.shape[0]
    out = np.empty(m, np.int32)
    mixing = np.int64(1125899906842597)
    ceil_sqrt = int(np.ceil(np.sqrt(parts)))
    square = ceil_sqrt * ceil_sqrt == parts
    cols = ceil_sqrt
    rows = (parts + cols - 1) // cols
    last_col_rows = parts - rows * (cols - 1)
    for i in range(m):
        a, b = src[i], dst[i]
        if a > b:
            a, b = b, a
        ha = abs(np.int64(a) * mixing)
        hb = abs(np.int64(b) * mixing)
        if square:
            out[i] = ((ha % ceil_sqrt) * ceil_sqrt + (hb % ceil_sqrt)) % parts
        else:
            col = (ha % parts) // rows
            r = hb % (rows if col < cols - 1 else last_col_rows)
            out[i] = col * rows + r
    return out


@njit(nogil=True, cache=True)
def dbh(src: np.ndarray, dst: np.ndarray, degree: np.ndarray, parts: int, seed: int) -> np.ndarray:
    """Degree-based hashing: the edge follows the hash of its lower-degree endpoint (ties: lower id)."""
    m = src.shape[0]
    pick = np.empty(m, np.int64)
    for i in range(m):
        a, b = src[i], dst[i]
        if degree[b] < degree[a] or (degree[b] == degree[a] and b < a):
            a = b
        pick[i] = a
    h = vertex_hash(pick, seed)
    return (h % np.uint64(parts)).astype(np.int32)


@njit(nogil=True, cache=True)
def hdrf_chunk(
    src: np.ndarray,
    dst: np.ndarray,
    pdeg: np.ndarray,
    bits: np.ndarray,
    sizes: np.ndarray,
    last_key: np.ndarray,
    lam: float,
    eps: float,
) -> np.ndarray:
    """HDRF (Petroni et al. 2015) over one chunk of the stream, updating the streaming state in place.

    Score C(u,v,p) = g(u,p) + g(v,p) + lam * (maxsize - |p|) / (eps + maxsize - minsize), with
    g(x,p) = 1 + (1 - theta(x)) if p holds x, theta(u) = d(u) / (d(u) + d(v)) on partial degrees.
    Rows of the same unordered pair arrive adjacent (the stream is grouped by pair) and reuse the
    pair's first decision; ``last_key`` carries the previous pair and its partition across chunks.
    """
    m = src.shape[0]
    parts = sizes.shape[0]
    out = np.empty(m, np.int32)
    for i in range(m):
        a, b = src[i], dst[i]
        if a > b:
            a, b = b, a
        if a == last_key[0] and b == last_key[1]:
            k = last_key[2]
        else:
            pdeg[a] += 1
            if b != a:
                pdeg[b] += 1
            da = pdeg[a]
            db = pdeg[b]
            ta = da / (da + db)
            tb = 1.0 - ta
            mx = sizes.max()
            mn = sizes.min()
            k = 0
            best = -1e300
            for p in range(parts):
                w = p // 64
                bit = np.uint64(1) << np.uint64(p % 64)
                g = 0.0
                if bits[a, w] & bit:
                    g += 1.0 + (1.0 - ta)
                if bits[b, w] & bit:
                    g += 1.0 + (1.0 - tb)
                score = g + lam * (mx - sizes[p]) / (eps + mx - mn)
                if score > best:
                    best = score
                    k = p
            w = k // 64
            bit = np.uint64(1) << np.uint64(k % 64)
            bits[a, w] |= bit
            bits[b, w] |= bit
            last_key[0] = a
            last_key[1] = b
            last_key[2] = k
        sizes[k] += 1
        out[i] = k
    return out
