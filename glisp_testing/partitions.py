"""Partition-contract fixtures and brute-force partition checks for serialize tests (numpy, no Spark).

``publish_partition`` writes ``partition/<run>/{assignment,replicas}`` for a given per-edge part array
exactly as the partition contract says, so serialize can be tested on any assignment (including
adversarial ones) before or without a real partitioner. ``check_reader`` compares every reader query
with a brute-force scan of the edges the partition should hold.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from glisp_core.dataset.layout import DatasetVersion
from glisp_core.dataset.publish import StagePublisher


def replica_sets(src: np.ndarray, dst: np.ndarray, part: np.ndarray, n: int, num_parts: int) -> list[np.ndarray]:
    """parts(v) for every vid (empty for isolated vertices): sorted partitions holding an edge of v."""
    v = np.concatenate([src, dst]).astype(np.int64)
    p = np.concatenate([part, part]).astype(np.int64)
    key = np.unique(v * num_parts + p)
    vids, parts = key // num_parts, key % num_parts
    bounds = np.searchsorted(vids, np.arange(n + 1))
    return [parts[bounds[i] : bounds[i + 1]].astype(np.int32) for i in range(n)]


def publish_partition(
    dv: DatasetVersion,
    part: np.ndarray,
    num_parts: int,
    run: str | None = None,
    algorithm: str = "fixture",
    counts: dict | None = None,
) -> str:
    """Publish stage ``partition/<run>`` holding this per-edge assignment (edges in eid order); ``counts`` are
    added to its record's (a refresh's ``incremental`` counts, as the partition stage writes them)."""
    tbl = pq.read_table(dv.edges, columns=["eid", "src", "dst"]).sort_by("eid")
    src, dst = tbl["src"].to_numpy(), tbl["dst"].to_numpy()
    part = np.asarray(part, np.int32)
    assert len(part) == len(src)
    run = run or f"{algorithm}-p{num_parts}"
    n = int(max(src.max(initial=-1), dst.max(initial=-1)) + 1)
    reps = replica_sets(src, dst, part, n, num_parts)
    have = [i for i in range(n) if len(reps[i])]
    params = {"algorithm": algorithm, "parts": num_parts, "seed": 0, "digest": int(part.astype(np.int64).sum())}
    pub = StagePublisher(dv, f"partition/{run}", params, depends=["ingest"])
    store = dv.store
    with pub:
        store.write_table(pa.table({"eid": tbl["eid"], "part": part}), pub.tmp / "assignment" / "part-00000.parquet")
        store.write_table(
            pa.table(
                {"vid": np.asarray(have, np.int64), "parts": pa.array([reps[i] for i in have], pa.list_(pa.int32()))}
            ),
            pub.tmp / "replicas" / "part-00000.parquet",
        )
        epp = np.bincount(part, minlength=num_parts)
        vpp = (
            np.bincount(np.concatenate([r for r in reps if len(r)]), minlength=num_parts)
            if have
            else np.zeros(num_parts)
        )
        pub.commit(
            counts={
                "parts": num_parts,
                "edges_per_part": epp.tolist(),
                "vertices_per_part": vpp.tolist(),
                **(counts or {}),
            },
            metrics={"rf": float(vpp.sum() / max(len(have), 1))},
        )
    return run


def read_ingest(dv: DatasetVersion) -> dict[str, np.ndarray]:
    """The ingest edges as numpy columns in eid order."""
    t = pq.read_table(dv.edges).sort_by("eid")
    return {c: t[c].to_numpy() for c in t.column_names}


def check_reader(
    r,
    src: np.ndarray,
    dst: np.ndarray,
    etype: np.ndarray,
    *,
    num_vertices_global: int,
    out_deg: np.ndarray,
    in_deg: np.ndarray,
    reps: list[np.ndarray],
    weight: np.ndarray | None = None,
    ts: np.ndarray | None = None,
) -> None:
    """Assert that every query of reader ``r`` agrees with a brute-force scan of its edges (global ids)."""
    n, m = r.num_vertices, r.num_edges
    gid = np.asarray(r.global_id)
    assert len(src) == m and (np.diff(gid) > 0).all()
    # to_local / to_global round trip, absent ids -> -1
    assert np.array_equal(r.to_local(gid), np.arange(n))
    assert np.array_equal(r.to_global(np.arange(n)), gid)
    absent = np.setdiff1d(np.arange(-2, num_vertices_global + 3), gid)
    assert (r.to_local(absent) == -1).all()
    # the edge list rebuilt from the CSR equals the partition's edges (as a multiset, with attributes)
    e_src = r.edge_src(np.arange(m))
    e_dst = np.asarray(r.out_nbr, np.int64)
    e_type = r.edge_type(np.arange(m))
    got = [gid[e_src], gid[e_dst], e_type]
    want = [src, dst, etype]
    if weight is not None:
        got.append(np.asarray(r.weight))
        want.append(weight)
    if ts is not None:
        got.append(np.asarray(r.timestamp))
        want.append(ts)
    o1, o2 = np.lexsort(got[::-1]), np.lexsort(want[::-1])
    for a, b in zip(got, want, strict=True):
        assert np.array_equal(np.asarray(a)[o1], np.asarray(b)[o2])
    # CSR order: (src, etype, dst)
    assert (np.diff(np.lexsort((e_dst, e_type, e_src))) == 1).all()
    lids = np.arange(n)
    s, e = r.out_range(lids)
    assert np.array_equal(e - s, np.bincount(e_src, minlength=n))
    in_eid = np.asarray(r.in_eid, np.int64)
    assert np.array_equal(np.sort(in_eid), np.arange(m))
    si, ei = r.in_range(lids)
    for v in range(n):
        seg = in_eid[si[v] : ei[v]]
        assert (e_dst[seg] == v).all()
        assert len(seg) == int((e_dst == v).sum())
        k = np.lexsort((e_src[seg], e_type[seg]))
        assert (np.diff(k) == 1).all() if len(k) else True
    for t in range(r.num_edge_types + 1):  # one past the last type: always empty
        s, e = r.out_range(lids, t)
        si, ei = r.in_range(lids, t)
        for v in range(n):
            want_out = np.flatnonzero((e_src == v) & (e_type == t))
            assert np.array_equal(np.arange(s[v], e[v]), want_out)
            want_in = np.sort(np.flatnonzero((e_dst == v) & (e_type == t)))
            assert np.array_equal(np.sort(in_eid[si[v] : ei[v]]), want_in)
    # type index: types present per vertex with cumulative ends
    ptr, ids, ends = r.out_type_index(lids)
    for v in range(n):
        ts_v = np.unique(e_type[e_src == v])
        assert np.array_equal(ids[ptr[v] : ptr[v + 1]], ts_v)
        for t, end in zip(ids[ptr[v] : ptr[v + 1]], ends[ptr[v] : ptr[v + 1]], strict=True):
            assert end == np.flatnonzero((e_src == v) & (e_type <= t)).max() + 1
    assert (r.out_range(np.array([-1]))[1] == 0).all()
    # global degrees and replica bits
    assert np.array_equal(np.asarray(r.out_degree), out_deg[gid])
    assert np.array_equal(np.asarray(r.in_degree), in_deg[gid])
    bits = r.replicas(lids)
    for v in range(n):
        want_parts = reps[gid[v]] if len(reps[gid[v]]) else np.array([r.part_id])
        assert np.array_equal(np.flatnonzero(bits[v]), want_parts)
        assert bits[v, r.part_id]


def open_all(dir_: Path, num_parts: int, verify: bool = True) -> list:
    from glisp_core.partition_format import open_partition

    return [open_partition(Path(dir_) / f"part-{k:05d}", verify=verify) for k in range(num_parts)]
