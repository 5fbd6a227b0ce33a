"""Staged edge rows -> the published edge table: vids, policies, dense eids and degrees, in numpy tasks.

Why files: a global Spark sort of the edge rows (for dense eids) plus two endpoint joins moved every
row through three shuffles and the JVM. Here the rows stay as Arrow files under the version's staging
prefix in the dataset's store (a shared disk, or an object store the tasks open themselves, ``storeio``)
and every step is one Spark job of numpy tasks:

1. ``bucket``: per staged file, endpoints -> vids (``RankMap`` lookup, or vids from a join), the
   self-loop and missing-endpoint checks, undirected doubling, then the rows are split by source-vid
   range into buckets ``b<k>/`` (and, for the in-degrees, their destinations by destination range);
2. ``sort``: per bucket, sort by (src, dst, etype, weight, ts), apply the duplicate policy; with
   ``keep`` the bucket sizes are known after step 1, so this task also writes the final Parquet file
   (eid = bucket offset + position) and counts the degrees of its vid range; otherwise
3. ``write``: per bucket, the same final write once the sizes after the policy are known.

The result equals a global sort by (src, dst, etype, weight, ts): buckets are vid ranges, in order.
Files appear whole (``storeio.open_atomic``), with names fixed by the task, so a retried task rewrites
the same content.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from glisp_spark.tasks import run_tasks
from spark_jobs.ingest.storeio import join, list_files, make_dirs, read_ipc_file, read_npy, write_ipc, write_npy
from spark_jobs.ingest.storeio import write_parquet as write_parquet_file

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_TARGET_BUCKET_ROWS = 4_000_000
DegreeFreq = dict[str, tuple[np.ndarray, np.ndarray]]  # "out"|"in"|"total" -> (degree values, vertex counts)


def _buckets(values: np.ndarray, bounds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(order grouping ``values`` by vid range, rows per range)."""
    b = (np.searchsorted(bounds, values, side="right") - 1).astype(np.int64)
    nb = len(bounds) - 1
    small = np.int16 if nb < (1 << 15) else np.int32  # 16-bit keys: numpy's stable sort is a radix sort
    return np.argsort(b.astype(small), kind="stable"), np.bincount(b, minlength=nb).astype(np.int64)


@dataclass(frozen=True)
class EdgePlan:
    """What the edge tasks need to know (pickled into each task)."""

    stage: str  # staging prefix (a local path or a URI string)
    out: str  # the edge table's directory (inside the version's attempt), a local path or a URI string
    num_vertices: int
    bounds: tuple[int, ...]  # vid lower bound of each bucket, then num_vertices
    directed: bool
    drop_loops: bool
    duplicates: str  # keep | merge | drop
    has_w: bool
    has_ts: bool
    etype_const: tuple[tuple[int, int], ...]  # (source index, code) for tables with one edge type
    etype_codes: tuple[tuple[str, int], ...]  # edge type name -> code
    src_vtype: tuple[tuple[int, int], ...] = ()  # (source index, vertex type code) of typed tables
    dst_vtype: tuple[tuple[int, int], ...] = ()
    src_names: tuple[str, ...] = ()  # configured src/dst column of each source, for messages
    dst_names: tuple[str, ...] = ()

    @property
    def nb(self) -> int:
        return len(self.bounds) - 1


def bucket_bounds(num_vertices: int, rows: int, parallelism: int, files: int = 0) -> tuple[int, ...]:
    """Equal vid ranges: ``files`` buckets if given, else about 4M rows each and at least one per core."""
    nb = files or max(parallelism, -(-rows // _TARGET_BUCKET_ROWS))
    nb = max(1, min(nb, max(1, num_vertices)))
    return tuple(int(x) for x in np.linspace(0, num_vertices, nb + 1).round().astype(np.int64))


def read_ipc(paths: list[str]) -> pa.Table | None:
    """Staged Arrow IPC files as one table (None without files)."""
    tabs = [read_ipc_file(p) for p in paths]
    if not tabs:
        return None
    return pa.concat_tables(tabs, promote_options="permissive") if len(tabs) > 1 else tabs[0]


def column_values(t: pa.Table, name: str, dtype: type[np.generic], fill: float) -> np.ndarray:
    """Column ``name`` of ``t`` as numpy ``dtype``, nulls (or a missing column) as ``fill``."""
    if name not in t.column_names:
        return np.full(t.num_rows, fill, dtype=dtype)
    c = t.column(name)
    if c.null_count:
        c = c.fill_null(fill)
    return c.to_numpy().astype(dtype, copy=False)


def per_source(si: np.ndarray, mapping: dict[int, int], default: int) -> np.ndarray | int:
    """The value of each row's source (``si``); one int when no source has its own."""
    if not mapping:
        return default
    out = np.full(len(si), default, dtype=np.int64)
    for s, v in mapping.items():
        out[si == s] = v
    return out


def etype_codes(t: pa.Table, si: np.ndarray, plan: EdgePlan) -> np.ndarray:
    """Edge type code of each staged row: from its _et name, or its source's constant type."""
    import pyarrow.compute as pc

    out = np.full(t.num_rows, -1, dtype=np.int32)
    const = dict(plan.etype_const)
    for s, code in const.items():
        out[si == s] = code
    if "_et" in t.column_names:
        names = dict(plan.etype_codes)
        et = t.column("_et")
        has = ~np.asarray(pc.is_null(et).to_numpy(zero_copy_only=False))
        if has.any():
            enc = pc.dictionary_encode(et.combine_chunks())
            lut = np.array([names.get(x, -1) for x in enc.dictionary.to_pylist()], dtype=np.int32)
            idx = enc.indices.fill_null(0).to_numpy()
            out[has] = lut[idx[has]] if len(lut) else -1
    return out


@dataclass
class BucketResult:
    rows: np.ndarray  # rows per bucket
    loops: int = 0  # self-loops among the mapped rows (before any drop)
    missing: dict[tuple[int, str], int] = field(
        default_factory=dict
    )  # (fid, column) -> rows whose endpoint is not a vertex
    times: dict[str, float] = field(default_factory=dict)  # activity -> seconds in the task


def _carried(plan: EdgePlan) -> list[str]:
    """The columns a bucket row carries besides src and dst (a single edge type is not carried)."""
    out = ["etype"] if len(plan.etype_codes) > 1 else []
    out += [c for c, on in (("weight", plan.has_w), ("ts", plan.has_ts), ("rowpos", plan.duplicates == "drop")) if on]
    return out


def bucket_rows(
    src: np.ndarray, dst: np.ndarray, t: pa.Table, si: np.ndarray, keep: np.ndarray, plan: EdgePlan, tag: str
) -> BucketResult:
    """Step 1 after the vid lookup: loops, doubling, split by source-vid range, write the buckets."""
    res = BucketResult(rows=np.zeros(plan.nb, dtype=np.int64))
    make = {
        "etype": lambda: etype_codes(t, si, plan),
        "weight": lambda: column_values(t, "_w", np.float32, 1.0),
        "ts": lambda: column_values(t, "_ts", np.int64, 0),
        "rowpos": lambda: column_values(t, "_rowpos", np.int64, 0),
    }
    cols = {"src": src, "dst": dst, **{c: make[c]() for c in _carried(plan)}}
    if not keep.all():
        cols = {k: v[keep] for k, v in cols.items()}
    loops = cols["src"] == cols["dst"]
    res.loops = int(loops.sum())
    if plan.drop_loops and res.loops:
        cols = {k: v[~loops] for k, v in cols.items()}
    if not plan.directed:  # one canonical row per edge plus its reverse (not for self-loops)
        s, d = cols.pop("src"), cols.pop("dst")
        a, b = np.minimum(s, d), np.maximum(s, d)
        r = a != b
        rest = {k: np.concatenate([v, v[r]]) for k, v in cols.items()}
        cols = {"src": np.concatenate([a, b[r]]), "dst": np.concatenate([b, a[r]]), **rest}
    bounds = np.asarray(plan.bounds, dtype=np.int64)
    order, res.rows = _buckets(cols["src"], bounds)
    cols = {k: v[order] for k, v in cols.items()}
    ends = np.cumsum(res.rows)
    for k in np.flatnonzero(res.rows):
        lo, hi = ends[k] - res.rows[k], ends[k]
        bucket = pa.table({c: v[lo:hi] for c, v in cols.items()})
        write_ipc(join(plan.stage, "buckets", f"b{k:05d}", f"{tag}.arrow"), bucket)
    if plan.directed and plan.duplicates == "keep":  # these rows are final: stage their in-degree slices
        _write_dst_slices(cols["dst"], bounds, plan, tag)
    return res


def _write_dst_slices(dst: np.ndarray, bounds: np.ndarray, plan: EdgePlan, tag: str) -> None:
    """Destinations split by vid range, as int32 offsets into the range (for the in-degrees)."""
    order, cnt = _buckets(dst, bounds)
    ends = np.cumsum(cnt)
    sd = dst[order]
    for k in np.flatnonzero(cnt):
        part = (sd[ends[k] - cnt[k] : ends[k]] - bounds[k]).astype(np.int32)
        write_npy(join(plan.stage, "indeg", f"b{k:05d}", f"{tag}.npy"), part)


def _sorted_order(cols: dict[str, np.ndarray], lo: int, n: int, by_rowpos: bool) -> np.ndarray:
    """Row order by (src, dst, etype, weight, ts), or (src, dst, etype, rowpos) for the drop policy."""
    src, dst = cols["src"], cols["dst"]
    if len(src) == 0:
        return np.zeros(0, dtype=np.int64)
    key = (src - lo) * np.int64(max(n, 1)) + dst  # fits: (bucket width) * n < 2**63 for n < 3e9
    ties = [cols["etype"]] if "etype" in cols and np.any(cols["etype"] != cols["etype"][0]) else []
    if by_rowpos:
        ties.append(cols["rowpos"])
    else:
        ties += [cols[c] for c in ("weight", "ts") if c in cols]
    if not ties:  # rows equal in key are equal in every column: any order among them will do
        return np.argsort(key)
    return np.lexsort([*reversed(ties), key])


def _apply_policy(cols: dict[str, np.ndarray], duplicates: str) -> dict[str, np.ndarray]:
    """Rows sorted by (src, dst, etype, ...): merge (sum weights, earliest ts) or drop (keep the first)."""
    if duplicates == "keep" or len(cols["src"]) == 0:
        return cols
    s, d = cols["src"], cols["dst"]
    new = np.ones(len(s), dtype=bool)
    new[1:] = (s[1:] != s[:-1]) | (d[1:] != d[:-1])
    if "etype" in cols:
        e = cols["etype"]
        new[1:] |= e[1:] != e[:-1]
    first = np.flatnonzero(new)
    out = {k: v[first] for k, v in cols.items() if k != "rowpos"}
    if duplicates == "merge":
        if "weight" in cols:
            out["weight"] = np.add.reduceat(cols["weight"].astype(np.float64), first).astype(np.float32)
        if "ts" in cols:
            out["ts"] = np.minimum.reduceat(cols["ts"], first)
    return out


def _degree_freq(deg: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    v, c = np.unique(deg, return_counts=True)
    return v.astype(np.int64), c.astype(np.int64)


@dataclass
class BucketWritten:
    """A bucket's final Parquet file: its rows, self-loops, rows per edge type, degree frequencies, task times."""

    k: int
    rows: int
    loops: int
    etype_rows: np.ndarray
    freq: DegreeFreq
    times: dict[str, float]


@dataclass
class BucketSorted:
    """A bucket sorted and its duplicate policy applied, restaged until the sizes give the eid offsets."""

    k: int
    rows: int
    times: dict[str, float]


def _finish(cols: dict[str, np.ndarray], k: int, offset: int, plan: EdgePlan) -> BucketWritten:
    """Write bucket ``k``'s final rows (eids from ``offset``) and count its vid range's degrees."""
    t0 = time.process_time()
    lo, hi = plan.bounds[k], plan.bounds[k + 1]
    n = len(cols["src"])
    table = {
        "eid": np.arange(offset, offset + n, dtype=np.int64),
        "src": cols["src"],
        "dst": cols["dst"],
        "etype": cols["etype"].astype(np.int32) if "etype" in cols else np.zeros(n, np.int32),
    }
    if plan.has_w:
        table["weight"] = cols["weight"].astype(np.float32)
    if plan.has_ts:
        table["ts"] = cols["ts"]
    if n or k == 0:  # bucket 0 always writes, so an empty table still has its schema
        _write_parquet(join(plan.out, f"part-{k:05d}.parquet"), pa.table(table))
    t1 = time.process_time()
    out_deg = np.bincount(cols["src"] - lo, minlength=hi - lo)
    if plan.directed:
        in_deg = np.zeros(hi - lo, dtype=np.int64)
        for f in list_files(join(plan.stage, "indeg", f"b{k:05d}"), ".npy"):
            in_deg += np.bincount(read_npy(f), minlength=hi - lo)
    else:
        in_deg = out_deg
    return BucketWritten(
        k=k,
        rows=n,
        loops=int(np.sum(cols["src"] == cols["dst"])),
        etype_rows=np.bincount(table["etype"], minlength=len(plan.etype_codes) or 1),
        freq={"out": _degree_freq(out_deg), "in": _degree_freq(in_deg), "total": _degree_freq(out_deg + in_deg)},
        times={"write": t1 - t0, "degrees": time.process_time() - t1},
    )


def _write_parquet(path: str, tab: pa.Table) -> None:
    """The final edge file: eid and src delta-encoded (they ascend), the edge type as a dictionary."""
    write_parquet_file(
        path,
        tab,
        compression="snappy",
        use_dictionary=["etype"],
        column_encoding={"eid": "DELTA_BINARY_PACKED", "src": "DELTA_BINARY_PACKED"},
    )


def _bucket_cols(k: int, plan: EdgePlan) -> dict[str, np.ndarray]:
    """Bucket ``k``'s rows from every map task's file (empty columns when it got none)."""
    t = read_ipc(list_files(join(plan.stage, "buckets", f"b{k:05d}"), ".arrow"))
    names = ["src", "dst", *_carried(plan)]
    if t is None:
        dts = {"src": np.int64, "dst": np.int64, "etype": np.int32, "weight": np.float32, "ts": np.int64}
        return {c: np.zeros(0, dtype=dts.get(c, np.int64)) for c in names}
    return {c: t.column(c).to_numpy() for c in names}


def _sorted_bucket(k: int, plan: EdgePlan) -> dict[str, np.ndarray]:
    """Bucket ``k``'s rows sorted, with the duplicate policy applied."""
    cols = _bucket_cols(k, plan)
    order = _sorted_order(cols, plan.bounds[k], plan.num_vertices, plan.duplicates == "drop")
    return _apply_policy({c: v[order] for c, v in cols.items()}, plan.duplicates)


def sort_and_write_bucket(k: int, plan: EdgePlan, offset: int) -> BucketWritten:
    """Step 2 when the eid offset is known (policy "keep"): sort bucket ``k`` and write it final."""
    t0 = time.process_time()
    cols = _sorted_bucket(k, plan)
    sort_s = time.process_time() - t0
    res = _finish(cols, k, offset, plan)
    res.times["sort"] = sort_s
    return res


def sort_bucket(k: int, plan: EdgePlan) -> BucketSorted:
    """Step 2: sort bucket ``k``, apply the duplicate policy and restage it (and its in-degree slices)."""
    t0 = time.process_time()
    cols = _sorted_bucket(k, plan)
    sort_s = time.process_time() - t0
    write_ipc(join(plan.stage, "sorted", f"b{k:05d}.arrow"), pa.table(cols))
    if plan.directed:
        _write_dst_slices(cols["dst"], np.asarray(plan.bounds, dtype=np.int64), plan, f"s{k:05d}")
    return BucketSorted(
        k=k, rows=len(cols["src"]), times={"sort": sort_s, "restage": time.process_time() - t0 - sort_s}
    )


def write_bucket(k: int, plan: EdgePlan, offset: int) -> BucketWritten:
    """Step 3: the final write of a bucket sorted by step 2."""
    t = read_ipc_file(join(plan.stage, "sorted", f"b{k:05d}.arrow"))
    return _finish({c: t.column(c).to_numpy() for c in t.column_names}, k, offset, plan)


def _prepare_dirs(plan: EdgePlan) -> None:
    """The edge table's local directory, made on the driver (an object store has no directories)."""
    make_dirs(plan.out)


def sort_and_write_buckets(spark: SparkSession, plan: EdgePlan, offsets: list[int]) -> list[BucketWritten]:
    """One Spark job: every bucket sorted and written final, results in bucket order."""
    _prepare_dirs(plan)
    return run_tasks(spark, plan.nb, lambda k: sort_and_write_bucket(k, plan, offsets[k]))


def sort_buckets(spark: SparkSession, plan: EdgePlan) -> list[BucketSorted]:
    """One Spark job: every bucket sorted and restaged, results in bucket order."""
    _prepare_dirs(plan)
    return run_tasks(spark, plan.nb, lambda k: sort_bucket(k, plan))


def write_buckets(spark: SparkSession, plan: EdgePlan, offsets: list[int]) -> list[BucketWritten]:
    """One Spark job: every sorted bucket written final, results in bucket order."""
    _prepare_dirs(plan)
    return run_tasks(spark, plan.nb, lambda k: write_bucket(k, plan, offsets[k]))
