"""The expansion's per-vertex state in vertex-id-range shards, read and rewritten by executor tasks (issue 26,
item 2; the sharded form of ``state.ExpansionState``).

Why: ``ExpansionState`` keeps O(|V|) arrays on the driver and broadcasts O(|V|) bytes every round (66 B of
state, 24 B of broadcast and 300 B of peak RSS per vertex id measured at 10^7 ids), so 10^8 ids need about
30 GB of driver memory. Here vertex ids 0..n-1 are cut into S ranges of ``ceil(n / S)`` ids
(:class:`ShardRanges`); shard s's state (its vertex ids, residual degree, degree, partition bitsets and, for
a refining partitioner, pair counts) is one Arrow IPC file per round in the staging store,
``vstate/r<round>/s<s>``. A shard holds only the vertices with edges (ascending ``ids``; a task finds a
vertex's row by binary search): in files and in a task's memory its size follows those vertices, not the
id range (10^8 ids over 262k vertices with edges: dense shard arrays took a relocation task to 12.8 GB).

* **Deltas** (``kernels.incidence_delta``'s (vert, vpart, cnt, pcnt)) are written by the task that made them,
  split by shard, as ``vdelta/r<round>/s<s>-c<task>.arrow`` (:func:`write_deltas`); a row with vpart < 0 adds
  cnt to the vertex's degree and residual degree (how the split's degrees enter: the first round's deltas).
* **Merge** (:meth:`VertexShards.merge`): one Spark job of S tasks; task s reads its shard's previous state
  and its delta files, applies them (``kernels.apply_delta``, ``kernels.add_counts``: sums and bitwise ORs, so
  the order of the files does not matter) and writes the next state whole. Names are fixed by (round,
  shard, task), so a retried or speculative task rewrites the same content.
* **Summaries**: each merge task returns O(p x buckets) numbers, never per-vertex ones: the replicas it
  added per partition and, per partition, a histogram of its boundary vertices over :func:`key_bucket` of
  the selection key (score, seeded vertex hash) with their residual rows; row p is the seed order's
  (degree, seeded hash) histogram of the untouched vertices. The driver sums them over the shards and
  turns them into per-partition bucket thresholds (:func:`boundary_thresholds`, :func:`seed_ranges`); the
  claims are then a pure function of a shard's state and those thresholds (:func:`shard_claims`), which
  any task that reads the shard computes alike.

The driver keeps the ranges, the paths and the round number: nothing that grows with |V|. See
docs/partitioning.md ("Vertex state off the driver") for what is wired and what is not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
from numba import njit

from glisp_core.id_rows import SPAN_FACTOR, IdRows
from glisp_core.storage.store import store_for
from glisp_core.storage.uri import StoreURI
from glisp_spark.tasks import run_tasks
from spark_jobs.partition import kernels
from spark_jobs.partition.selection import pack_bits
from spark_jobs.partition.staging import open_input, write_whole

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

EXACT = 32  # scores below this have a class of their own
PER_OCTAVE = 4  # classes per doubling above it
HASH_SLOTS = 16  # buckets per class, by the top bits of the seeded vertex hash (the tie rule)
CLASSES = EXACT + PER_OCTAVE * (63 - 5)
BUCKETS = CLASSES * HASH_SLOTS
SEED_CLASSES, SEED_SLOTS = 16, 256  # the seed order: degree classes 0..15 (the last one open), 8 hash bits
TABLE_SPAN = SPAN_FACTOR  # a cell maps ids to rows by a table while its id span is at most this many times its vertices
DELTA_PA = pa.schema([("vert", pa.int64()), ("vpart", pa.int32()), ("cnt", pa.int64()), ("pcnt", pa.int64())])


@dataclass(frozen=True)
class ShardRanges:
    """Vertex ids 0..n-1 in S ranges of ``size`` ids (the last one shorter)."""

    n: int
    shards: int

    @property
    def size(self) -> int:
        return max(1, -(-self.n // max(1, self.shards)))

    def bounds(self, s: int) -> tuple[int, int]:
        return min(self.n, s * self.size), min(self.n, (s + 1) * self.size)

    def of(self, v: np.ndarray) -> np.ndarray:
        return np.asarray(v, np.int64) // self.size


@njit(nogil=True, cache=True)
def score_class(score: int) -> int:
    """The score's class: itself below ``EXACT``, then ``PER_OCTAVE`` classes per doubling. The sharded
    selection orders by (class, seeded vertex hash): ties within a class go by the hash, as ties of equal
    scores do in the driver's selection."""
    s = max(score, 0)
    if s < EXACT:
        return s
    top = 63
    while (s >> top) & 1 == 0:
        top -= 1
    return EXACT + PER_OCTAVE * (top - 5) + ((s >> (top - 2)) & 3)


@njit(nogil=True, cache=True)
def key_bucket(score: int, h: np.uint64) -> int:
    """Bucket of the selection key (class, hash), monotone in it: ``HASH_SLOTS`` buckets per class by the
    hash's top bits."""
    return score_class(score) * HASH_SLOTS + int(h >> np.uint64(60))


@njit(nogil=True, cache=True)
def seed_bucket(deg: int, h: np.uint64) -> int:
    """Bucket of the seed key (degree class, hash): seeds come from the lowest degrees, where a vertex class
    is large, so the hash splits it finer than the boundary's (``SEED_SLOTS`` < ``BUCKETS`` per class)."""
    return min(score_class(deg), SEED_CLASSES - 1) * SEED_SLOTS + int(h >> np.uint64(56))


@njit(nogil=True, cache=True)
def _summary(
    score: np.ndarray,
    deg: np.ndarray,
    resid: np.ndarray,
    bits: np.ndarray,
    hsel: np.ndarray,
    hseed: np.ndarray,
    parts: int,
) -> tuple:
    """count/weight [p + 1, BUCKETS]: boundary vertices of each partition by (score, hsel) bucket, and in row
    p the untouched vertices with edges by (deg, hseed) bucket; weights are residual rows."""
    count = np.zeros((parts + 1, BUCKETS), np.int64)
    weight = np.zeros((parts + 1, BUCKETS), np.int64)
    for v in range(resid.shape[0]):
        if resid[v] <= 0:
            continue
        any_part = False
        bsel = key_bucket(score[v], hsel[v])
        for k in range(parts):
            if kernels._bit(bits, v, k):
                any_part = True
                count[k, bsel] += 1
                weight[k, bsel] += resid[v]
        if not any_part:
            b = seed_bucket(deg[v], hseed[v])
            count[parts, b] += 1
            weight[parts, b] += resid[v]
    return count, weight


def shard_summary(state: dict[str, np.ndarray], parts: int, round_seed: int, seed: int) -> tuple:
    """A shard's O(p x buckets) selection summary (see ``_summary``); the score is the residual degree."""
    return _summary(*_vertex_inputs(state, round_seed, seed), parts)


def _vertex_inputs(
    state: dict[str, np.ndarray], round_seed: int, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """What the selection kernels read of a shard's vertices: score (the residual degree), degree, residual
    degree, bitsets, and the round's and the seed order's vertex hashes."""
    ids = state["ids"]
    hsel, hseed = kernels.vertex_hash(ids, round_seed), kernels.vertex_hash(ids, seed)
    return state["resid"], state["deg"], state["resid"], state["bits"], hsel, hseed


def boundary_thresholds(count: np.ndarray, weight: np.ndarray, nsel: np.ndarray, cap: np.ndarray) -> np.ndarray:
    """Per partition k the bucket bound t_k: k claims its boundary vertices in buckets < t_k.

    The bucket holding the nsel-th lowest key is included whole (the selection is nsel vertices rounded up
    to a bucket), then cut where the residual rows pass ``cap`` (finite caps), keeping at least the first
    non-empty bucket, as the driver's selection keeps one vertex."""
    parts = len(nsel)
    t = np.zeros(parts, np.int64)
    for k in range(parts):
        cc = np.cumsum(count[k])
        if cc[-1] == 0 or nsel[k] <= 0:
            continue
        t[k] = int(np.searchsorted(cc, min(nsel[k], cc[-1]))) + 1
        if np.isfinite(cap[k]):
            first = int(np.searchsorted(cc, 1)) + 1
            cut = int(np.searchsorted(np.cumsum(weight[k]), cap[k], side="right"))
            t[k] = max(first, min(t[k], cut))
    return t


def seed_ranges(
    count: np.ndarray, weight: np.ndarray, order: np.ndarray, budget: np.ndarray, most: np.ndarray
) -> np.ndarray:
    """[p, 2] bucket ranges [lo, hi) of the seed histogram (row p of the summary) for the partitions in
    ``order`` (rank order), one after the other: each takes whole buckets until its seeds' residual rows reach
    ``budget[k]`` or their number ``most[k]`` (at least one non-empty bucket while any is left)."""
    out = np.zeros((len(budget), 2), np.int64)
    pos = 0
    for k in order:
        lo, got, n = pos, 0, 0
        while pos < len(count) and (got < budget[k] and n < most[k] or (n == 0 and got == 0)):
            got, n, pos = got + int(weight[pos]), n + int(count[pos]), pos + 1
        out[k] = lo, pos
    return out


@njit(nogil=True, cache=True)
def _claims(
    score: np.ndarray,
    deg: np.ndarray,
    resid: np.ndarray,
    bits: np.ndarray,
    hsel: np.ndarray,
    hseed: np.ndarray,
    t: np.ndarray,
    rank: np.ndarray,
    seeds: np.ndarray,
) -> np.ndarray:
    parts = t.shape[0]
    claim = np.full(resid.shape[0], -1, np.int32)
    for v in range(resid.shape[0]):
        if resid[v] <= 0:
            continue
        bsel = key_bucket(score[v], hsel[v])
        any_part = False
        for k in range(parts):
            if kernels._bit(bits, v, k):
                any_part = True
                if bsel < t[k] and (claim[v] < 0 or rank[k] < rank[claim[v]]):
                    claim[v] = k
        if not any_part:
            b = seed_bucket(deg[v], hseed[v])
            for k in range(parts):
                if seeds[k, 0] <= b < seeds[k, 1]:
                    claim[v] = k
    return claim


def shard_claims(
    state: dict[str, np.ndarray],
    t: np.ndarray,
    rank: np.ndarray,
    seeds: np.ndarray,
    round_seed: int,
    seed: int,
) -> np.ndarray:
    """int32 claim per vertex of the shard: the best-ranked partition whose threshold its key is under, or
    the partition whose seed range holds an untouched vertex; a pure function of the shard and the
    O(p) thresholds, so every task reading the shard computes the same claims."""
    return _claims(
        *_vertex_inputs(state, round_seed, seed),
        np.asarray(t, np.int64),
        np.asarray(rank, np.int32),
        np.asarray(seeds, np.int64),
    )


def write_deltas(d: StoreURI, task: int, ranges: ShardRanges, delta: tuple) -> None:
    """A task's delta (vert, vpart, cnt, pcnt), split by the shard of vert, one file per shard it touches."""
    vert, vpart, cnt, pcnt = (np.asarray(x) for x in delta[:4])
    write_split(d, task, ranges, {"vert": vert, "vpart": vpart.astype(np.int32), "cnt": cnt, "pcnt": pcnt})


def write_split(d: StoreURI, task: int, ranges: ShardRanges, cols: dict[str, np.ndarray]) -> None:
    """Per-vertex rows (column ``vert`` first) split by shard: ``d/s<shard>-c<task>.arrow``, written whole."""
    sh = ranges.of(cols["vert"])
    for s in np.unique(sh):
        m = sh == s
        _write_ipc(d / f"s{int(s):05d}-c{task:05d}.arrow", pa.table({c: a[m] for c, a in cols.items()}))


def read_split(d: StoreURI, names: list[str], s: int) -> list[pa.Table]:
    """Shard s's files among ``names`` (of :func:`write_split` under d), in name order."""
    return [_read_ipc(d / n) for n in sorted(n for n in names if n.startswith(f"s{s:05d}-"))]


@njit(nogil=True, cache=True)
def score_classes(x: np.ndarray) -> np.ndarray:
    """``score_class`` of every element (any shape)."""
    flat = x.ravel()
    out = np.empty(flat.shape[0], np.int64)
    for i in range(flat.shape[0]):
        out[i] = score_class(flat[i])
    return out.reshape(x.shape)


def _write_ipc(uri: StoreURI, tab: pa.Table) -> None:
    def write(f: object) -> None:
        with pa.ipc.new_file(f, tab.schema) as w:
            w.write_table(tab)

    write_whole(uri, write)


def _read_ipc(uri: StoreURI) -> pa.Table:
    with open_input(uri) as src:
        return pa.ipc.open_file(src).read_all()


def write_rows(uri: StoreURI, cols: dict[str, np.ndarray]) -> None:
    """Per-row columns (equal lengths) written sparse: only the rows with a nonzero value, with their row
    number ``_row``. Why: a shard's dense votes have a row per vertex with edges, most of them all zero in
    a round (no pair of the vertex could move)."""
    n = len(next(iter(cols.values())))
    nz = np.zeros(n, np.bool_)
    for a in cols.values():
        nz |= a != 0
    rows = np.flatnonzero(nz)
    _write_ipc(uri, pa.table({"_row": rows.astype(np.int64), **{c: a[rows] for c, a in cols.items()}}))


def read_rows(uri: StoreURI, n: int) -> dict[str, np.ndarray]:
    """The dense columns of :func:`write_rows`' file, ``n`` rows (absent rows zero; writable)."""
    t = _read_ipc(uri)
    rows = t.column("_row").to_numpy()
    out = {}
    for c in t.column_names[1:]:
        a = t.column(c).to_numpy()
        out[c] = np.zeros(n, a.dtype)
        out[c][rows] = a
    return out


def state_columns(st: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A shard's state as columns: ids, resid, deg, bits words ``b<w>``, pair counts ``c<k>`` (when kept)."""
    cols = {"ids": st["ids"], "resid": st["resid"], "deg": st["deg"]}
    cols.update({f"b{w}": st["bits"][:, w] for w in range(st["bits"].shape[1])})
    if "counts" in st:
        cols.update({f"c{k}": st["counts"][:, k] for k in range(st["counts"].shape[1])})
    return cols


def state_arrays(cols: dict[str, np.ndarray], parts: int, counts: bool) -> dict[str, np.ndarray]:
    """The inverse of :func:`state_columns`; every array a new, writable one (a task updates its state in place)."""
    words = (parts + 63) // 64
    st = {c: cols[c].astype(np.int64) for c in ("ids", "resid", "deg")}
    st["bits"] = np.stack([cols[f"b{w}"] for w in range(words)], axis=1).astype(np.uint64, copy=False)
    if counts:
        st["counts"] = np.stack([cols[f"c{k}"] for k in range(parts)], axis=1).astype(np.int32, copy=False)
    return st


@dataclass(frozen=True)
class ShardFiles:
    """Where a sharded state lives and its shape; picklable (what a task needs to read or write a shard)."""

    root: StoreURI
    ranges: ShardRanges
    parts: int
    counts: bool

    def delta_dir(self, r: int) -> StoreURI:
        return self.root / "vdelta" / f"r{r:05d}"

    def state_uri(self, r: int, s: int) -> StoreURI:
        return self.root / "vstate" / f"r{r:05d}" / f"s{s:05d}.arrow"

    def empty(self, n: int = 0) -> dict[str, np.ndarray]:
        """A state of n vertices, every value zero (ids too: the caller sets them)."""
        st = {"ids": np.zeros(n, np.int64), "resid": np.zeros(n, np.int64), "deg": np.zeros(n, np.int64)}
        st["bits"] = np.zeros((n, (self.parts + 63) // 64), np.uint64)
        if self.counts:
            st["counts"] = np.zeros((n, self.parts), np.int32)
        return st

    def read(self, r: int, s: int) -> dict[str, np.ndarray]:
        """Shard s's state after round r (r < 0: before any), inside a task; the driver reads it only in tests."""
        if r < 0:
            return self.empty()
        t = _read_ipc(self.state_uri(r, s))
        return state_arrays({c: t.column(c).to_numpy() for c in t.column_names}, self.parts, self.counts)

    def grown(self, st: dict[str, np.ndarray], verts: list[np.ndarray]) -> dict[str, np.ndarray]:
        """``st`` with a zero row for each vertex of ``verts`` it lacks (the split's degrees add them; after
        round 0 every delta names known vertices, checked by binary search without a sort)."""
        new = np.concatenate([np.zeros(0, np.int64), *verts])
        if len(st["ids"]):
            new = new[st["ids"][np.minimum(np.searchsorted(st["ids"], new), len(st["ids"]) - 1)] != new]
        if not len(new):
            return st
        ids = np.union1d(st["ids"], new)
        out = self.empty(len(ids))
        out["ids"] = ids
        at = np.searchsorted(ids, st["ids"])
        for c, a in st.items():
            if c != "ids":
                out[c][at] = a
        return out

    def merge_shard(
        self, prev: int, r: int, s: int, names: list[str], round_seed: int, seed: int, moves: bool = False
    ) -> tuple:
        """Task s of :meth:`VertexShards.merge`: (replicas added per partition, count, weight); with ``moves``
        (the relocation's deltas) the shard's replicas per partition and empty summaries."""
        tabs = read_split(self.delta_dir(r), names, s)
        st = self.grown(self.read(prev, s), [t.column("vert").to_numpy() for t in tabs])
        gain = np.zeros(self.parts, np.int64)
        for t in tabs:
            vert, vpart, cnt, pcnt = (t.column(c).to_numpy() for c in ("vert", "vpart", "cnt", "pcnt"))
            loc, deg = np.searchsorted(st["ids"], vert), vpart < 0
            if moves:  # relocation: pairs leave (pcnt < 0) and enter partitions; residual degrees stay 0
                kernels.add_counts(st["counts"], loc, vpart, pcnt, 1)
                continue
            add = np.bincount(loc[deg], weights=cnt[deg], minlength=len(st["deg"])).astype(np.int64)
            st["deg"] += add
            st["resid"] += add
            kernels.apply_delta(st["bits"], st["resid"], gain, loc[~deg], vpart[~deg], cnt[~deg])
            if "counts" in st:
                kernels.add_counts(st["counts"], loc[~deg], vpart[~deg], pcnt[~deg], 1)
        if moves:
            st["bits"] = pack_bits(st["counts"] > 0)
            gain = (st["counts"] > 0).sum(axis=0).astype(np.int64)  # the shard's |V_k| part, not a gain
        _write_ipc(self.state_uri(r, s), pa.table(state_columns(st)))
        if moves:
            return gain, np.zeros((self.parts + 1, 0), np.int64), np.zeros((self.parts + 1, 0), np.int64)
        return gain, *shard_summary(st, self.parts, round_seed, seed)


class CellView:
    """The two shards of a cell as one local id space (shard a's rows, then shard b's), read in a task."""

    def __init__(self, files: ShardFiles, r: int, sa: int, sb: int) -> None:
        assert sa <= sb, (sa, sb)  # so the two shards' ids, one after the other, ascend
        self.states = [files.read(r, sa)] + ([files.read(r, sb)] if sb != sa else [])
        self.ids = self.col("ids")
        self._rows: IdRows | None = None

    def col(self, c: str) -> np.ndarray:
        return np.concatenate([s[c] for s in self.states])

    def local(self, v: np.ndarray) -> np.ndarray:
        """The rows of vertex ids ``v`` (each must be a vertex with edges of one of the two shards)."""
        if self._rows is None:  # a table of rows while the ids are dense (30x a binary search on random ids)
            self._rows = IdRows(self.ids, TABLE_SPAN)
        loc = self._rows.find(v)
        if len(loc) and (loc < 0).any():
            raise ValueError("a vertex of the cell's rows is not in its shards (the shard state is stale)")
        return loc

    def globals(self, loc: np.ndarray) -> np.ndarray:
        return self.ids[loc]

    def claims(self, t: np.ndarray, rank: np.ndarray, seeds: np.ndarray, round_seed: int, seed: int) -> np.ndarray:
        return np.concatenate([shard_claims(s, t, rank, seeds, round_seed, seed) for s in self.states])


class VertexShards:
    """The sharded state of one expansion on the driver: where it lives and the round (no per-vertex array)."""

    def __init__(self, spark: SparkSession, files: ShardFiles) -> None:
        self.spark, self.files = spark, files
        self.round = -1  # no state written yet; merge(0) builds round 0 from the degree deltas

    def merge(
        self, r: int, round_seed: int, seed: int, moves: bool = False
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One Spark job: every shard applies round r's deltas to its state after the previous round and
        writes its state after round r; returns the replicas added per partition and the summed selection
        summary (count, weight [p + 1, BUCKETS]) for the round seeded ``round_seed``. Drops the previous
        round's state and round r's deltas once every task has run."""
        f, prev = self.files, self.round
        d = f.delta_dir(r)
        names = store_for(d).names(d)
        out = run_tasks(
            self.spark, f.ranges.shards, lambda s: f.merge_shard(prev, r, s, names, round_seed, seed, moves)
        )
        gain = np.zeros(f.parts, np.int64)
        count = np.zeros((f.parts + 1, 0 if moves else BUCKETS), np.int64)
        weight = np.zeros_like(count)
        for g, c, w in out:  # O(p x buckets) each
            gain += g
            count += c
            weight += w
        if prev >= 0:
            store_for(f.root).delete(f.root / "vstate" / f"r{prev:05d}")
        store_for(d).delete(d)
        self.round = r
        return gain, count, weight

    def driver_bytes(self) -> int:
        """Bytes of numpy arrays this object holds on the driver (none; a test keeps it so)."""
        return sum(v.nbytes for v in vars(self).values() if isinstance(v, np.ndarray))
