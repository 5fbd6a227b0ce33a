"""Edge-cut by METIS (the DistDGL baseline): owner(v) = METIS k-way partition of the undirected graph, and
every edge row goes to the owner of its source, so each vertex's out-neighbourhood lives wholly on its owner.

Why it exists: the hash edge-cut (``edgecut``) spreads hubs evenly, so it cannot show the load skew that
the GLISP paper reports for DistDGL, which partitions with METIS for locality. This run is served exactly
like ``edgecut`` (the sampling client's ``routing="owner"`` mode sends a frontier vertex only to its owner).

METIS input: the undirected simple graph over all ``n`` vertices (isolated ones included): pairs
(min, max) with self-loops dropped and duplicates merged, both directions in the adjacency. Balance the
DistDGL way: two constraints per vertex, [1, out-edge rows] (owned vertices and the edge rows each owner
stores are both balanced). pymetis's ``part_graph`` always passes ncon=1, so the two-constraint call goes
through ctypes to ``METIS_PartGraphKway`` of the METIS library that pymetis bundles (exported by its
extension module); where that symbol is missing it falls back to one constraint, weight 1 + out-edge rows
(which balances the sum and, on R-MAT, leaves ~1.5x more vertices on one owner), and params say which.
Seeded (METIS option ``seed``), and the adjacency is built in a canonical order (neighbours sorted), so a
run is reproducible whatever order Spark delivers the pairs in.

Where it runs: METIS needs the whole graph in one process, by nature. The pairs are aggregated by Spark
(column expressions), then ONE Spark task (``coalesce(1)`` + ``mapInArrow``) builds the CSR (numba
counting sort), calls METIS and yields the owner table (vid, part), which is written to the staging
directory and read back (so that task runs once); the edge rows then join it on ``src``. Nothing but a
few numbers returns to the driver. ``partition.metis_max_edges`` caps the pairs that one process takes.

Like ``edgecut``, it deliberately breaks the contract's pair SHOULD: the two rows of an undirected pair go
to the owners of their own sources.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
from numba import njit
from pyspark.sql import functions as F

from glisp_core.config import PartitionConfig
from glisp_core.errors import ConfigError, StageError
from glisp_spark.tables import read_parquet, write_parquet
from glisp_spark.worker_heap import freeze_worker_heap
from spark_jobs.partition.base import PartitionContext, Partitioner, PartitionResult

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

OWNER_SCHEMA = "vid long, part int, metis_cut long, metis_prep_s double, metis_s double"
BALANCE = {
    2: "two constraints [1, out-edge rows] (DistDGL), METIS_PartGraphKway via ctypes",
    1: "one constraint: vertex weight = 1 + out-edge rows (pymetis part_graph, ncon=1)",
}
METIS_OK = 1
_OUT_BATCH = 1 << 20  # owner rows per Arrow batch yielded by the METIS task


@njit(nogil=True, cache=True)
def csr_from_sorted_pairs(lo: np.ndarray, hi: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric CSR (xadj, adjncy) of pairs lo < hi sorted by (lo, hi); each neighbour list comes out sorted.

    Counting sort: first every vertex receives its smaller neighbours (pairs with hi = v, in increasing lo),
    then its larger ones (pairs with lo = v, in increasing hi).
    """
    xadj = np.zeros(n + 1, np.int64)
    for i in range(lo.shape[0]):
        xadj[lo[i] + 1] += 1
        xadj[hi[i] + 1] += 1
    for v in range(n):
        xadj[v + 1] += xadj[v]
    cur = xadj[:n].copy()
    adj = np.empty(2 * lo.shape[0], np.int64)
    for i in range(lo.shape[0]):
        v = hi[i]
        adj[cur[v]] = lo[i]
        cur[v] += 1
    for i in range(lo.shape[0]):
        v = lo[i]
        adj[cur[v]] = hi[i]
        cur[v] += 1
    return xadj, adj


def _kway_ctypes() -> Any:
    """``METIS_PartGraphKway`` of pymetis's bundled METIS as a ctypes function, or None where not exported."""
    import ctypes

    try:
        import pymetis
        from pymetis import _internal

        lib = ctypes.CDLL(_internal.__file__)
        fn, defaults = lib.METIS_PartGraphKway, lib.METIS_SetDefaultOptions
        noptions = int(_internal.Options._len())  # type: ignore[attr-defined]  # pybind11 method the stub omits
        keys = (int(pymetis.OptionKey.SEED), int(pymetis.OptionKey.NUMBERING))
    except (ImportError, OSError, AttributeError):
        return None
    idx = pymetis.zero_copy_dtype()
    ptr = ctypes.POINTER(ctypes.c_int64 if idx.itemsize == 8 else ctypes.c_int32)
    fn.argtypes = [ptr] * 8 + [ctypes.c_void_p] * 2 + [ptr] * 3
    fn.restype = ctypes.c_int
    defaults.argtypes, defaults.restype = [ptr], ctypes.c_int
    return fn, defaults, ptr, idx, noptions, keys


def multi_constraint_available() -> bool:
    """Whether this environment can run METIS with two constraints (else: one, weight 1 + rows)."""
    return _kway_ctypes() is not None


def kway_multi(xadj: np.ndarray, adjncy: np.ndarray, vwgt: np.ndarray, parts: int, seed: int) -> tuple[np.ndarray, int]:
    """METIS k-way with ``vwgt.shape[1]`` balance constraints; returns (part per vertex, edge cut)."""
    found = _kway_ctypes()
    if found is None:
        raise RuntimeError("metis: METIS_PartGraphKway is not exported by pymetis here (got no symbol)")
    fn, defaults, ptr, idx, noptions, (seed_key, numbering_key) = found
    n, ncon = vwgt.shape
    xadj, adjncy = np.ascontiguousarray(xadj, idx), np.ascontiguousarray(adjncy, idx)
    vwgt = np.ascontiguousarray(vwgt, idx)
    options = np.empty(noptions, idx)
    defaults(options.ctypes.data_as(ptr))
    options[seed_key], options[numbering_key] = seed, 0
    part = np.empty(n, idx)
    scalars = [np.array([v], idx) for v in (n, ncon, parts, 0)]  # nvtxs, ncon, nparts, edgecut (out)
    nvtxs, nc, nparts, cut = (a.ctypes.data_as(ptr) for a in scalars)
    arrays = [a.ctypes.data_as(ptr) for a in (xadj, adjncy, vwgt)]
    rc = fn(
        nvtxs, nc, *arrays, None, None, nparts, None, None, options.ctypes.data_as(ptr), cut, part.ctypes.data_as(ptr)
    )
    if rc != METIS_OK:
        raise RuntimeError(f"metis: METIS_PartGraphKway failed on {n:,} vertices, {parts} parts (got status {rc})")
    return part.astype(np.int32), int(scalars[3][0])


def metis_owners(
    lo: np.ndarray,
    hi: np.ndarray,
    n_lo: np.ndarray,
    n_hi: np.ndarray,
    n: int,
    parts: int,
    seed: int,
    ncon: int = 2,
) -> tuple[np.ndarray, int, float, float]:
    """METIS k-way owners of ``n`` vertices from aggregated pairs; returns (owner, edge cut, prep s, metis s).

    ``ncon`` 2: constraints [1, out-edge rows] (kway_multi); 1: weight 1 + out-edge rows (pymetis part_graph).

    A row (lo, hi, n_lo, n_hi) is one unordered vertex pair with lo <= hi and its edge-row counts by
    source (n_lo rows leave lo, n_hi leave hi; a self-loop has lo == hi and only n_lo). Self-loops only
    weigh; the adjacency holds each pair lo < hi once in each direction.
    """
    import pymetis

    t0 = time.perf_counter()
    if len(lo) and (min(int(lo.min()), int(hi.min())) < 0 or max(int(lo.max()), int(hi.max())) >= n):
        raise ValueError(f"metis: edge endpoints must be dense vertex ids in [0, {n}) (got {lo.min()}..{hi.max()})")
    rows = (np.bincount(lo, weights=n_lo, minlength=n) + np.bincount(hi, weights=n_hi, minlength=n)).astype(np.int64)
    idx = pymetis.zero_copy_dtype()
    keep = lo < hi
    key = lo[keep] * np.int64(n) + hi[keep]  # canonical order whatever order the pairs arrived in
    key.sort()
    a, b = np.divmod(key, np.int64(n))
    del key
    xadj, adjncy = csr_from_sorted_pairs(a, b, n)
    xadj, adjncy = xadj.astype(idx, copy=False), adjncy.astype(idx, copy=False)
    prep_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    if ncon == 2:
        owner, _ = kway_multi(xadj, adjncy, np.stack([np.ones(n, np.int64), rows], axis=1), parts, seed)
    else:
        res = pymetis.part_graph(
            parts,
            adjacency=pymetis.CSRAdjacency(xadj, adjncy),
            vweights=(rows + 1).astype(idx),
            recursive=False,  # k-way, as DistDGL (pymetis would pick recursive bisection for parts <= 8)
            options=pymetis.Options(seed=int(seed)),
        )
        owner = np.asarray(res.vertex_part, dtype=np.int32)
    metis_s = time.perf_counter() - t0
    cut = int(np.count_nonzero(owner[a] != owner[b]))
    return owner, cut, prep_s, metis_s


def _metis_task(
    n: int, parts: int, seed: int, ncon: int
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The mapInArrow function of the single METIS task: all pair batches in, the owner table out."""

    def fn(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        freeze_worker_heap()
        cols: dict[str, list[np.ndarray]] = {"lo": [], "hi": [], "n_lo": [], "n_hi": []}
        for b in batches:
            for name, chunks in cols.items():
                chunks.append(b.column(b.schema.get_field_index(name)).to_numpy(zero_copy_only=False))
        lo, hi, n_lo, n_hi = (
            np.concatenate(c).astype(np.int64, copy=False) if c else np.zeros(0, np.int64) for c in cols.values()
        )
        owner, cut, prep_s, metis_s = metis_owners(lo, hi, n_lo, n_hi, n, parts, seed, ncon)
        for start in range(0, n, _OUT_BATCH):
            part = owner[start : start + _OUT_BATCH]
            k = len(part)
            yield pa.RecordBatch.from_arrays(
                [
                    pa.array(np.arange(start, start + k, dtype=np.int64)),
                    pa.array(part),
                    pa.array(np.full(k, cut, np.int64)),
                    pa.array(np.full(k, prep_s)),
                    pa.array(np.full(k, metis_s)),
                ],
                names=["vid", "part", "metis_cut", "metis_prep_s", "metis_s"],
            )

    return fn


def pair_table(edges: DataFrame) -> DataFrame:
    """(lo, hi, n_lo, n_hi): one row per unordered pair (self-loops included) with its edge rows by source."""
    lo, hi = F.least("src", "dst"), F.greatest("src", "dst")
    from_lo = (F.col("src") == lo).cast("long")
    return (
        edges.select(lo.alias("lo"), hi.alias("hi"), from_lo.alias("f"))
        .groupBy("lo", "hi")
        .agg(F.sum("f").alias("n_lo"), F.sum(1 - F.col("f")).alias("n_hi"))
    )


class Metis(Partitioner):
    name = "metis"

    def __init__(self, cfg: PartitionConfig) -> None:
        super().__init__(cfg)
        self.ncon = 2 if multi_constraint_available() else 1

    def params(self) -> dict:
        return {"owner": "metis k-way", "balance": BALANCE[self.ncon]}

    def partition(self, ctx: PartitionContext) -> PartitionResult:
        if ctx.parts == 1 or ctx.num_edges == 0 or ctx.num_vertices == 0:
            alloc = ctx.edges.select("eid", "src", "dst", F.lit(0).cast("int").alias("part"))
            owned = [ctx.num_vertices] + [0] * (ctx.parts - 1)
            return PartitionResult(alloc, counts={"metis_edge_cut": 0, "owned_vertices_per_part": owned})
        try:
            import pymetis  # noqa: F401  (fail here, clearly, rather than inside the Spark task)
        except ImportError as e:
            raise StageError(f"metis: needs the pymetis package (pip install 'pymetis>=2025.1') (got {e})") from None
        pairs = pair_table(ctx.edges)
        limit = ctx.cfg.metis_max_edges
        if ctx.num_edges > limit:  # pairs <= edge rows: count them only when the rows alone exceed the cap
            npairs = pairs.where(F.col("lo") < F.col("hi")).count()
            if npairs > limit:
                raise ConfigError(
                    "partition",
                    "metis_max_edges",
                    f"METIS needs the whole graph in one process; at most {limit:,} undirected pairs allowed, "
                    f"raise the limit only if one executor has the memory (got {npairs:,} pairs)",
                )
        t0 = time.perf_counter()
        owner_path = ctx.staging / "metis_owner"
        task = _metis_task(ctx.num_vertices, ctx.parts, ctx.seed, self.ncon)
        write_parquet(pairs.coalesce(1).mapInArrow(task, OWNER_SCHEMA), owner_path)
        task_s = time.perf_counter() - t0
        table = read_parquet(ctx.spark, owner_path)
        got = table.count()
        if got != ctx.num_vertices:
            raise StageError(f"metis: the owner table must hold one row per vertex, {ctx.num_vertices:,} (got {got:,})")
        summary = table.select("metis_cut", "metis_prep_s", "metis_s").limit(1).collect()[0]
        per_part = {int(r["part"]): int(r["count"]) for r in table.groupBy("part").count().collect()}
        owned = [per_part.get(k, 0) for k in range(ctx.parts)]
        ctx.log(f"metis: edge cut {summary.metis_cut:,} pairs, METIS {summary.metis_s:.1f}s, owned {owned}")
        owner = table.select(F.col("vid").alias("src"), "part")
        alloc = ctx.edges.join(owner, on="src", how="inner").select("eid", "src", "dst", "part")
        return PartitionResult(
            alloc,
            timings={
                "metis_task_s": round(task_s, 3),
                "metis_prep_s": round(float(summary.metis_prep_s), 3),
                "metis_s": round(float(summary.metis_s), 3),
            },
            counts={"metis_edge_cut": int(summary.metis_cut), "owned_vertices_per_part": owned},
        )
