"""File-backed Spark rounds of the neighbour expansion: the unallocated edge rows never enter the JVM.

Why: a DataFrame round (``mapInArrow`` over a cached remainder) moves every unallocated row JVM ->
Python -> JVM, re-caches it and needs lineage truncation; measured 5-20 s per round at 8.4M rows on
local[2]. Here the remainder lives as uncompressed Arrow IPC files in the stage's staging directory
(memory-mapped on read), split into ``tasks`` groups. One round is ONE Spark job over the group
indices (``glisp_spark.tasks.run_tasks``): each task memory-maps its group's files, runs
the numba round kernel with the broadcast state, writes its still-unallocated rows to the next round's
file and its allocated rows to Parquet under ``alloc/``, and returns only the aggregated vertex-level
delta (vertex, partition, incidences) and rows per partition. Nothing row-level goes through the JVM or
to the driver.

Files are written whole (``staging.write_whole``), with names fixed by (round, group): a retried or
speculative task rewrites the same content (decisions are a pure function of the broadcast state), so
the result does not depend on task attempts. The files live under the run's staging prefix in the
dataset's store (:mod:`spark_jobs.partition.staging`): every executor opens the store itself, so a
cluster needs no shared disk when the root is an object store.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from glisp_core.errors import BadInputError
from glisp_core.storage.store import store_for
from glisp_core.storage.uri import StoreURI
from glisp_spark.tasks import iter_tasks, run_tasks
from glisp_spark.worker_heap import freeze_worker_heap
from spark_jobs.partition import components, kernels, relocate
from spark_jobs.partition.clusters import packed_rows
from spark_jobs.partition.staging import open_input, parquet_names, write_whole

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from spark_jobs.partition.state import ExpansionState

EDGE_PA = pa.schema([("eid", pa.int64()), ("src", pa.int64()), ("dst", pa.int64())])
ALLOC_PA = pa.schema([("eid", pa.int64()), ("src", pa.int64()), ("dst", pa.int64()), ("part", pa.int32())])
SPLIT_SCHEMA = "kind int, a long, b long, c long"  # 0: (vid, degree, -); 1: sample (eid, src, dst); 2: bad id


def _atomic_write_ipc(uri: StoreURI, table: pa.Table) -> None:
    def write(f: Any) -> None:
        with pa.ipc.new_file(f, EDGE_PA) as w:
            w.write_table(table)

    write_whole(uri, write)


def _atomic_write_parquet(uri: StoreURI, table: pa.Table) -> None:
    """An allocation file, written once a round and read twice (the relocation's votes, then its moves).

    Why no dictionary and, on a disk, no compression: 4.2M rows took 0.50 s to write and 0.51 s to read with
    pyarrow's defaults and snappy, 0.13 s and 0.11 s plain (112 MB against 39 MB); in a bucket the bytes
    cost more than the CPU, so there snappy stays, ``src`` (rows come by their smaller endpoint) delta-encoded."""
    if uri.is_local:
        opts: dict[str, Any] = {"compression": "none", "use_dictionary": False}
    else:
        opts = {"compression": "snappy", "use_dictionary": False, "column_encoding": {"src": "DELTA_BINARY_PACKED"}}
    write_whole(uri, lambda f: pq.write_table(table, f, **opts))


def _delete(uris: list[StoreURI]) -> None:
    for u in uris:
        store_for(u).delete(u)


def _drop_rounds(files: list[StoreURI]) -> None:
    """Remove the round directories holding ``files`` (they hold nothing else): one bulk delete per round."""
    for d in sorted({f.parent for f in files}, key=str):
        store_for(d).delete(d)


def read_ipc(paths: list[StoreURI]) -> dict[str, np.ndarray]:
    """Read (memory-map, on a disk) and concatenate edge files (eid, src, dst) into int64 arrays."""
    tabs = []
    for p in paths:
        with open_input(p) as src:
            tabs.append(pa.ipc.open_file(src).read_all())
    t = pa.concat_tables(tabs) if tabs else EDGE_PA.empty_table()
    return {c: t.column(c).to_numpy().astype(np.int64, copy=False) for c in ("eid", "src", "dst")}


class FileRounds:
    """The unallocated remainder as ``tasks`` groups of Arrow IPC files; see the module docstring."""

    def __init__(self, spark: SparkSession, staging: StoreURI, alloc_dir: StoreURI, tasks: int) -> None:
        self.spark = spark
        self.dir = staging / "rest"
        self.results = staging / "results"  # the jobs' task results, spilled (``iter_tasks``): they grow with |V|
        self.alloc_dir = alloc_dir
        self.tasks = tasks
        self.groups: list[list[StoreURI]] = [[] for _ in range(tasks)]
        self.round = 0
        self.stride = 1  # the count sample's stride (split): a round reports which sample rows it allocated
        self.jobs: list[dict[str, Any]] = []  # per Spark job after the split: kind, seconds, broadcast bytes
        self.shared: frozenset[StoreURI] = frozenset()  # the split's files while restarts read them: never dropped

    def restart(self, start: int) -> FileRounds:
        """An expansion of its own over the split's files (kept for every start), with its rounds and its
        allocation under ``start-<j>/`` of the staging prefix; the Spark jobs are counted with this one's."""
        base = self.dir.parent / f"start-{start:02d}"
        fresh = FileRounds(self.spark, base, base / "alloc", self.tasks)
        fresh.groups = [list(g) for g in self.groups]
        fresh.stride, fresh.jobs = self.stride, self.jobs
        fresh.shared = frozenset(p for g in self.groups for p in g)
        return fresh

    def drop_split(self) -> None:
        """Remove the split's files once every start has run."""
        _drop_rounds([p for g in self.groups for p in g])

    def discard(self) -> None:
        """Remove this start's rounds and allocation (a start that was not kept)."""
        assert self.shared, "only a restart's own files are discarded"
        store_for(self.dir.parent).delete(self.dir.parent)

    # ---- first pass: split the ingested edges into files, count degrees, take the count sample ------
    def split(
        self, edges: DataFrame, num_vertices: int, stride: int, source: str = "ingest/edges"
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """One Spark job over the ingested edges: files + degree array + the rows with eid % stride == 0.

        Degrees are partial bincounts per task, summed on the driver (O(|V|) per task, never edges).
        The sample (at most ``partition.count_sample_max`` rows by the choice of stride) drives the
        two-hop estimate on the driver, so a round needs no second job.
        """
        n, tasks, d0 = num_vertices, self.tasks, self.dir / "r00000"
        self.stride = stride

        def fn(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            freeze_worker_heap()
            from pyspark import TaskContext

            task = TaskContext.get()
            assert task is not None, "FileRounds.split runs inside a Spark task"
            pid = task.partitionId()
            tab = pa.Table.from_batches(list(batches), schema=EDGE_PA)
            eid, src, dst = (tab.column(c).to_numpy().astype(np.int64, copy=False) for c in ("eid", "src", "dst"))
            bad = (src < 0) | (src >= n) | (dst < 0) | (dst >= n)
            if bad.any():
                ids = np.concatenate([src[bad], dst[bad]])
                ids = ids[(ids < 0) | (ids >= n)][:3]
                yield _rows(2, ids, np.full(len(ids), int(bad.sum())), ids)
                return
            grp = (kernels.pair_keys(src, dst) % np.uint64(tasks)).astype(np.int64)
            for g in range(tasks):  # group = pair hash: all rows of a pair in one group, hubs spread out
                _atomic_write_ipc(d0 / f"g{g:05d}-i{pid:05d}.arrow", tab.filter(pa.array(grp == g)))
            deg = np.bincount(src, minlength=n) + np.bincount(dst, minlength=n)
            nz = np.flatnonzero(deg)
            yield _rows(0, nz, deg[nz], nz)
            s = eid % stride == 0
            yield _rows(1, eid[s], src[s], dst[s])

        t = edges.select("eid", "src", "dst").mapInArrow(fn, SPLIT_SCHEMA).toArrow()
        kind = t.column("kind").to_numpy()
        a, b, c = (t.column(x).to_numpy() for x in ("a", "b", "c"))
        if (kind == 2).any():
            ids = a[kind == 2]
            raise BadInputError(
                source,
                "src/dst",
                int(b[kind == 2].sum()),
                -1,
                f"name vertex ids outside 0..{n - 1}",
                examples=ids[:3].tolist(),
                hint="re-run 'glisp ingest' (vertex ids must be dense)",
            )
        deg = np.bincount(a[kind == 0], weights=b[kind == 0], minlength=n).astype(np.int64)
        s = kind == 1
        o = np.argsort(a[s], kind="stable")
        sample = {"eid": a[s][o], "src": b[s][o], "dst": c[s][o]}
        files = store_for(d0).names(d0)  # every task wrote one file per group (possibly empty)
        for g in range(tasks):
            self.groups[g] = [d0 / f for f in files if f.startswith(f"g{g:05d}-") and f.endswith(".arrow")]
        return deg, sample

    # ---- one round ------------------------------------------------------------------------------
    def run(self, state: tuple, parts: int, leftover_to: int = -1) -> tuple[tuple, np.ndarray]:
        """One round over every group (``kernels.edge_round`` with the broadcast ``state``); returns the
        delta (vert, vpart, row incidences, pair incidences, rows per partition) and the eids of the
        count-sample rows it allocated (so the driver's sample stays exactly in step)."""
        return self._pass(parts, lambda e, st, g: kernels.edge_round(e["src"], e["dst"], *st), state, leftover_to)

    def place(self, home: np.ndarray, parts: int) -> tuple[tuple, np.ndarray]:
        """A packed start as one job: every row both of whose endpoints have the same ``home`` goes there
        (``clusters.packed_rows``); returns the delta and the count-sample eids placed, as ``run`` does."""
        return self._pass(parts, lambda e, b, g: packed_rows(e["src"], e["dst"], b[0]), (home,), -1, kind="packed")

    def finish(self, st: ExpansionState, finish_args: tuple) -> tuple:
        """The finishing pass as one Spark job: each group places its rows with ``kernels.finish_greedy``
        from the broadcast state and the algorithm's ``finish_args`` (deg, cap, lam_e, lam_v, eps), within
        its quota of each partition's room (so the capacity holds)."""
        deg, cap, lam_e, lam_v, eps = finish_args
        quota = kernels.group_quota(cap - st.ecount, self.tasks, st.rounds)
        state = (deg, st.bits, st.ecount, st.vcount, quota, lam_e, lam_v, eps)

        def fin(e: dict, b: tuple, g: int) -> np.ndarray:
            deg, bits, ecount, vcount, quota, lam_e, lam_v, eps = b
            ec = ecount.copy()
            return kernels.finish_greedy(
                e["src"], e["dst"], deg, bits.copy(), ec, vcount.copy(), ec + quota[g], lam_e, lam_v, eps
            )

        return self._pass(st.parts, fin, state, -1, kind="finish")[0]

    def _pass(
        self,
        parts: int,
        decide: Callable[[dict[str, np.ndarray], tuple, int], np.ndarray],
        state: tuple,
        leftover_to: int,
        kind: str = "round",
        sink: Callable[[int, dict[str, np.ndarray], np.ndarray, tuple], Any] | None = None,
    ) -> tuple[tuple, np.ndarray]:
        """One Spark job over every group: decide each unallocated row, write the rest and the allocated.

        With ``sink`` (the sharded state, ``sharded.py``) each task hands its delta to ``sink(g, rows, part,
        delta)`` instead of returning it; the job then returns the sinks' results, one per group."""
        self.round += 1
        r = self.round
        nxt = self.dir / f"r{r:05d}"
        groups, alloc, stride = self.groups, self.alloc_dir, self.stride
        t0, bc = time.perf_counter(), self.spark.sparkContext.broadcast(state)

        def task(g: int) -> tuple[Any, np.ndarray, int]:
            e = read_ipc(groups[g])
            if r == 1:  # the split wrote the group in input order; later rounds keep canonical order
                o = kernels.canonical_order(e["src"], e["dst"], e["eid"])
                e = {c: a[o] for c, a in e.items()}
            if leftover_to >= 0:
                part = np.full(len(e["eid"]), leftover_to, np.int32)
            else:
                part = decide(e, bc.value, g)
            delta = kernels.incidence_delta(e["src"], e["dst"], part, parts)
            done = part >= 0
            di, ri = np.flatnonzero(done), np.flatnonzero(~done)  # one mask pass, not one per column
            rest = pa.table({x: e[x][ri] for x in ("eid", "src", "dst")}, schema=EDGE_PA)
            _atomic_write_ipc(nxt / f"g{g:05d}.arrow", rest)
            staged = _nbytes(e) + rest.nbytes
            eid = e["eid"][di]
            if len(di):
                out = pa.table([eid, e["src"][di], e["dst"][di], part[di]], schema=ALLOC_PA)
                _atomic_write_parquet(alloc / f"r{r:05d}-g{g:05d}.parquet", out)
                staged += out.nbytes
            if sink is not None:
                return sink(g, e, part, delta), np.empty(0, np.int64), staged
            return delta, eid[eid % stride == 0], staged

        out = run_tasks(self.spark, self.tasks, task, self.results)
        self._record(kind if leftover_to < 0 else "leftover", t0, state, sum(o[2] for o in out))
        bc.unpersist()
        old = [p for grp in groups for p in grp if p not in self.shared]
        self.groups = [[nxt / f"g{g:05d}.arrow"] for g in range(self.tasks)]
        _drop_rounds(old)
        if sink is not None:
            return tuple(o[0] for o in out), np.empty(0, np.int64)
        return merge_deltas([o[0] for o in out], parts), np.concatenate([o[1] for o in out])

    def _record(self, kind: str, t0: float, state: tuple, staged: int) -> None:
        """A job's record: kind, seconds, bytes broadcast, and the bytes of edge rows its tasks read and wrote
        in the staging store (rows pass between rounds through files there, not through a Spark shuffle;
        in-memory sizes, an upper bound of a compressed file's; the sharded mode's shard files not counted)."""
        nbytes = sum(a.nbytes for a in state if isinstance(a, np.ndarray))
        self.jobs.append(
            {
                "kind": kind,
                "s": round(time.perf_counter() - t0, 3),
                "broadcast_bytes": int(nbytes),
                "staged_bytes": int(staged),
            }
        )

    def fetch(self) -> dict[str, np.ndarray]:
        """The (bounded) remainder, read once by the driver for the local finish; the files are removed."""
        paths = [p for grp in self.groups for p in grp]
        e = read_ipc(paths)
        _drop_rounds([p for p in paths if p not in self.shared])
        return e

    # ---- refinement over the allocated rows ---------------------------------------------------------
    def write_allocated(self, rows: dict[str, np.ndarray] | None) -> None:
        """Write the rows the driver allocated (the local finish) into the allocation files, one per group."""
        if rows is None or len(rows["eid"]) == 0:
            return
        grp = (kernels.pair_keys(rows["src"], rows["dst"]) % np.uint64(self.tasks)).astype(np.int64)
        for g in range(self.tasks):
            s = grp == g
            if s.any():
                cols = [rows["eid"][s], rows["src"][s], rows["dst"][s], rows["part"][s].astype(np.int32)]
                _atomic_write_parquet(self.alloc_dir / f"local-g{g:05d}.parquet", pa.table(cols, schema=ALLOC_PA))

    def relocation_votes(self, state: tuple[np.ndarray, np.ndarray, np.ndarray], parts: int) -> Iterator[tuple]:
        """One read-only Spark job: each group's ``relocate.relocation_votes`` (keys, counts) from the
        broadcast (bits, leaf, light), yielded group by group (the driver adds them up as they come)."""
        t0, bc, alloc = time.perf_counter(), self.spark.sparkContext.broadcast(state), self.alloc_dir

        def task(g: int) -> tuple:
            e = read_allocated(alloc, g)[1]
            bits, leaf, light = bc.value
            return relocate.relocation_votes(e["src"], e["dst"], e["part"], bits, leaf, light, parts), _nbytes(e)

        staged = 0
        for votes, nbytes in iter_tasks(self.spark, self.tasks, task, self.results):
            staged += nbytes
            yield votes
        self._record("relocation_votes", t0, state, staged)
        bc.unpersist()

    def evacuate(self, state: tuple, parts: int) -> tuple[tuple, tuple, int]:
        """One relocation move pass as one Spark job: each group re-reads its allocated rows, moves some with
        ``relocate.evacuate_round`` (broadcast state) and rewrites them as one file. Returns the deltas of
        the moved rows (taken out, put in) and how many rows moved."""

        def decide(e: dict[str, np.ndarray], b: tuple) -> np.ndarray:
            return relocate.evacuate_round(e["src"], e["dst"], e["part"], *b)

        return self._rewrite("relocate", state, decide, parts)

    def move_components(self, vertices: np.ndarray, dest: np.ndarray, parts: int) -> tuple[tuple, tuple, int]:
        """Every row of a moved component (its source among ``vertices``) into that vertex's ``dest``, as
        ``evacuate`` does (``components.reassign``); the broadcast is the moved vertices only."""

        def decide(e: dict[str, np.ndarray], b: tuple) -> np.ndarray:
            return components.reassign(e["src"], e["part"], *b)

        return self._rewrite("components", (vertices, dest), decide, parts)

    def _rewrite(
        self, kind: str, state: tuple, decide: Callable[[dict[str, np.ndarray], tuple], np.ndarray], parts: int
    ) -> tuple[tuple, tuple, int]:
        """One Spark job: each group's allocated rows get ``decide(rows, broadcast state)`` as their partitions
        and are rewritten as one file; the moved rows' deltas (out, in) and their number come back."""
        self.round += 1
        r, alloc = self.round, self.alloc_dir
        t0, bc = time.perf_counter(), self.spark.sparkContext.broadcast(state)

        def task(g: int) -> tuple[tuple, tuple, int, int]:
            paths, e = read_allocated(alloc, g)
            new = decide(e, bc.value)
            moved = new != e["part"]
            out = pa.table([e["eid"], e["src"], e["dst"], new], schema=ALLOC_PA)
            target = alloc / f"f{r:05d}-g{g:05d}.parquet"
            _atomic_write_parquet(target, out)
            _delete([p for p in paths if p != target])  # a retried task read the file its first attempt wrote
            return (
                kernels.incidence_delta(e["src"][moved], e["dst"][moved], e["part"][moved], parts),
                kernels.incidence_delta(e["src"][moved], e["dst"][moved], new[moved], parts),
                int(moved.sum()),
                _nbytes(e) + out.nbytes,
            )

        out = run_tasks(self.spark, self.tasks, task, self.results)
        self._record(kind, t0, state, sum(o[3] for o in out))
        bc.unpersist()
        return (
            merge_deltas([o[0] for o in out], parts),
            merge_deltas([o[1] for o in out], parts),
            sum(o[2] for o in out),
        )

    def candidate_rows(self, cand: np.ndarray, limit: int) -> dict[str, np.ndarray] | None:
        """Every allocated row touching a vertex of ``cand`` (src, dst, part), read by one Spark job, or None
        once they pass ``limit`` rows (the whole-component pass is then left out)."""
        t0, bc, alloc = time.perf_counter(), self.spark.sparkContext.broadcast(np.packbits(cand)), self.alloc_dir
        n = len(cand)

        def task(g: int) -> tuple[dict[str, np.ndarray], int]:
            e = read_allocated(alloc, g)[1]
            mask = np.unpackbits(bc.value, count=n).astype(bool)
            keep = mask[e["src"]] | mask[e["dst"]]
            return {c: e[c][keep] for c in ("src", "dst", "part")}, _nbytes(e)

        got, staged = collect_rows(iter_tasks(self.spark, self.tasks, task, self.results), limit)
        self._record("component_rows", t0, (bc.value,), staged)
        bc.unpersist()
        return got


def collect_rows(
    results: Iterator[tuple[dict[str, np.ndarray], int]], limit: int
) -> tuple[dict[str, np.ndarray] | None, int]:
    """The tasks' row columns concatenated (None once they pass ``limit`` rows: the rest are read and dropped,
    never held) and the bytes the tasks staged."""
    got: list[dict[str, np.ndarray]] = []
    rows = staged = 0
    for part_rows, nbytes in results:
        staged += nbytes
        rows += len(part_rows["src"])
        if rows <= limit:
            got.append(part_rows)
    if rows > limit:
        return None, staged
    return {c: np.concatenate([x[c] for x in got]) for c in got[0]}, staged  # one result per task, at least one


def _nbytes(cols: dict[str, np.ndarray]) -> int:
    return int(sum(a.nbytes for a in cols.values()))


def read_allocated(alloc: StoreURI, g: int) -> tuple[list[StoreURI], dict[str, np.ndarray]]:
    """Group g's allocation files and their rows (eid, src, dst, part) in canonical order."""
    paths = [alloc / f for f in parquet_names(alloc) if f.endswith(f"-g{g:05d}.parquet")]
    store = store_for(alloc)
    t = pa.concat_tables([ALLOC_PA.empty_table()] + [store.read_table(p, schema=ALLOC_PA) for p in paths])
    e = {c: t.column(c).to_numpy() for c in ("eid", "src", "dst", "part")}
    if kernels.in_canonical_order(e["src"], e["dst"], e["eid"]):  # one file a relocation round wrote
        return paths, e
    o = kernels.canonical_order(e["src"], e["dst"], e["eid"])
    return paths, {c: a[o] for c, a in e.items()}


def merge_deltas(deltas: list[tuple], parts: int) -> tuple:
    """Concatenate the per-task deltas (a vertex may appear once per task; the driver adds them up)."""
    if not deltas:
        z = np.empty(0, np.int64)
        return z, z.astype(np.int32), z, z, np.zeros(parts, np.int64)
    return (
        np.concatenate([d[0] for d in deltas]),
        np.concatenate([d[1] for d in deltas]),
        np.concatenate([d[2] for d in deltas]),
        np.concatenate([d[3] for d in deltas]),
        np.sum([d[4] for d in deltas], axis=0).astype(np.int64),
    )


def _rows(kind: int, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [
            pa.array(np.full(len(a), kind, np.int32)),
            pa.array(np.asarray(a, np.int64)),
            pa.array(np.asarray(b, np.int64)),
            pa.array(np.asarray(c, np.int64)),
        ],
        names=["kind", "a", "b", "c"],
    )
