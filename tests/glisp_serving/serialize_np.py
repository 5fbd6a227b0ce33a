"""Publish ``serialize/<run>`` for a published partition run in one process (numpy + the format writer).

The Spark job (spark_jobs.serialize) calls the same ``write_partition`` once per partition inside a
task; this builds the same per-partition inputs with numpy so that the sampling tests and the
benchmark do not pay for Spark jobs on a 2-core machine. Master rule: an interior vertex is mastered
by its partition; a boundary vertex by ``parts[v % |parts|]``; an isolated one by ``v % P``.
"""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq

from glisp_core.dataset.layout import DatasetVersion
from glisp_core.dataset.manifest import Manifest
from glisp_core.dataset.publish import StagePublisher
from glisp_core.partition_format import write_partition


def serialize_numpy(dv: DatasetVersion, run: str) -> list[int]:
    """Write every partition of ``run``; returns the bytes of each partition's files."""
    man = Manifest.read(dv.manifest_path)
    schema = man.schema
    e = pq.read_table(dv.edges).sort_by("eid")
    src, dst = e["src"].to_numpy(), e["dst"].to_numpy()
    eid = e["eid"].to_numpy()
    etype = e["etype"].to_numpy()
    weight = e["weight"].to_numpy() if "weight" in e.column_names else None
    ts = e["ts"].to_numpy() if "ts" in e.column_names else None
    a = pq.read_table(dv.assignment(run)).sort_by("eid")
    part = a["part"].to_numpy().astype(np.int64)
    num_parts = int(man.stage(f"partition/{run}").params["parts"])
    v = pq.read_table(dv.vertices).sort_by("vid")
    n = int(schema["num_vertices"])
    vtype = v["vtype"].to_numpy()
    labels = v["label"].to_numpy(zero_copy_only=False)
    labels = np.where(np.isnan(labels.astype(np.float64)), -1, labels).astype(np.int64) if v["label"].null_count < n \
        else None  # fmt: skip
    split = v["split"].to_numpy()
    feats = None
    if schema.get("feature_dim"):
        f = pq.read_table(dv.features).sort_by("vid")
        feats = np.stack(f["feat"].to_numpy(zero_copy_only=False)).astype(np.float32)
    out_deg = np.bincount(src, minlength=n)
    in_deg = np.bincount(dst, minlength=n)
    # replica sets as CSR over vids
    key = np.unique(np.concatenate([src * num_parts + part, dst * num_parts + part]))
    rv, rp = key // num_parts, key % num_parts
    rptr = np.searchsorted(rv, np.arange(n + 1))
    nrep = np.diff(rptr)
    master = np.where(nrep > 0, rp[np.minimum(rptr[:-1] + np.arange(n) % np.maximum(nrep, 1), len(rp) - 1)],
                      np.arange(n) % num_parts)  # fmt: skip
    params = {"partition": run, "parts": num_parts, "writer": "numpy-fixture"}
    pub = StagePublisher(dv, f"serialize/{run}", dv.serialized(run), params, depends=["ingest", f"partition/{run}"])
    sizes = []
    with pub:
        for k in range(num_parts):
            ek = np.flatnonzero(part == k)
            has = np.zeros(n, bool)
            has[src[ek]] = True
            has[dst[ek]] = True
            has |= (nrep == 0) & (master == k)
            vids = np.flatnonzero(has)
            cnt = np.where(nrep[vids] > 0, nrep[vids], 1)
            vptr = np.zeros(len(vids) + 1, np.int64)
            np.cumsum(cnt, out=vptr[1:])
            take = np.repeat(rptr[vids] - vptr[:-1], cnt) + np.arange(vptr[-1])
            rparts = np.where(np.repeat(nrep[vids] > 0, cnt), rp[np.minimum(take, len(rp) - 1)], k)
            mine = vids[master[vids] == k]
            w = write_partition(
                pub.tmp / f"part-{k:05d}", part_id=k, num_parts=num_parts, vertex_gids=vids,
                out_degree=out_deg[vids], in_degree=in_deg[vids], replica_ptr=vptr, replica_parts=rparts,
                master=master[vids], vtype=vtype[vids], src=src[ek], dst=dst[ek], etype=etype[ek],
                weight=None if weight is None else weight[ek], ts=None if ts is None else ts[ek], edge_key=eid[ek],
                edge_types=list(schema["edge_types"]), vertex_types=list(schema["vertex_types"]), master_gids=mine,
                features=None if feats is None else feats[mine], labels=None if labels is None else labels[mine],
                split=split[mine], feature_dim=int(schema.get("feature_dim", 0)), directed=bool(schema["directed"]),
            )  # fmt: skip
            sizes.append(w.total_bytes)
        pub.commit(counts={"parts": num_parts, "bytes_per_part": sizes})
    return sizes
