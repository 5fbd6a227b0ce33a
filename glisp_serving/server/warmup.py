"""Kernel warm-up: every numba kernel variant compiled (or loaded from numba's cache) before serving.

A server warms the kernels twice: on a tiny synthetic partition shaped like the real one, before the real
one is opened (so the runtime's memory is measured apart from the partition's, see memory.py), and on the
real partition once opened (:func:`warm_up`, also run for every version a reload opens).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from glisp_core.config import ServeConfig
from glisp_sampling.gather import PartitionSampler
from glisp_serving.server.memory import release_free_heap


def warm_up(engine: PartitionSampler) -> None:
    """Compile (or load from numba's cache) every kernel variant on this partition's dtypes."""
    r = engine.r
    if r.num_vertices == 0:
        return
    seeds = np.array(r.global_id[: min(8, r.num_vertices)], np.int64)
    # numba specialises on dtype and writability: ids decoded from the wire are read-only int32 or
    # int64 (np.frombuffer); the in-process sampler passes writable int64
    both = [seeds, np.frombuffer(seeds.tobytes(), np.int64)]
    if engine.id_dtype == np.int32:
        both.append(np.frombuffer(seeds.astype(np.int32).tobytes(), np.int32))
    methods = ["uniform", "uniform_exact", "replace"] + (["weighted"] if engine.weight is not None else [])
    for ids in both:
        for m in methods:
            for d in ("out", "in"):
                engine.gather(ids, fanout=2, method=m, direction=d, edge_ids=True)
                if engine.timestamp is not None:  # a bound every edge meets, so the fill kernel runs too
                    engine.gather(ids, fanout=2, method=m, direction=d, max_time=np.iinfo(np.int64).max)
        if len(r.edge_type_names) > 1:
            for d in ("out", "in"):
                engine.gather(ids, type_fanouts=[(r.edge_type_names[0], 2)], method="uniform", direction=d)
    with engine._lock:  # warm-up is not served work
        engine.requests = engine.vertices_served = engine.edges_served = 0
        engine.busy_s = 0.0


def synthetic_partition(meta: dict[str, Any], out_dir: Path) -> Path:
    """A 16-vertex partition with the same attributes as ``meta`` (types, weights, timestamps, features).

    Its arrays get the same (narrowest) dtypes as any partition under 2^31 edges, so warming the kernels
    on it compiles or loads from numba's cache the specialisations the real partition will use.
    """
    from glisp_core.partition_format import write_partition

    rng = np.random.default_rng(0)
    n, m = 16, 64
    gids = np.arange(n, dtype=np.int64)
    src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
    ntypes = max(1, len(meta.get("edge_types", [])))
    d = int(meta.get("feature_dim", 0))
    num_parts = int(meta.get("num_parts", 1))
    write_partition(
        out_dir,
        part_id=0,
        num_parts=num_parts,
        vertex_gids=gids,
        out_degree=np.bincount(src, minlength=n),
        in_degree=np.bincount(dst, minlength=n),
        replica_ptr=np.arange(n + 1),
        replica_parts=np.zeros(n, np.int32),
        master=np.zeros(n, np.int32),
        vtype=np.zeros(n, np.int32),
        src=src,
        dst=dst,
        etype=rng.integers(0, ntypes, m).astype(np.int32),
        weight=rng.uniform(0.5, 2.0, m).astype(np.float32) if meta.get("weighted") else None,
        ts=rng.integers(0, 100, m).astype(np.int64) if meta.get("timestamped") else None,
        edge_types=list(meta.get("edge_types") or ["e0"]),
        vertex_types=list(meta.get("vertex_types") or ["v0"]),
        master_gids=gids,
        features=np.zeros((n, d), np.float32) if d else None,
        labels=np.zeros(n, np.int64) if "labels" in meta.get("fields", {}) else None,
        split=np.zeros(n, np.int8) if "split" in meta.get("fields", {}) else None,
        feature_dim=d,
        directed=bool(meta.get("directed", True)),
    )
    return out_dir


def warm_up_synthetic(part_dir: Path, cfg: ServeConfig) -> None:
    """Run every kernel once on a synthetic partition shaped like ``part_dir``, then free it."""
    from glisp_core.partition_format.spec import META_FILE

    try:
        meta = json.loads((part_dir / META_FILE).read_text())
    except (OSError, ValueError):
        return  # open_partition reports the unreadable meta.json with a FormatError naming the file
    warm_up_shaped(meta, cfg)


# every attribute a partition may have: what serve-cluster's fork server warms before forking any server
EVERY_ATTRIBUTE: dict[str, Any] = {
    "edge_types": ["e0", "e1"],
    "weighted": True,
    "timestamped": True,
    "feature_dim": 4,
    "fields": {"labels": {}, "split": {}},
}


def warm_up_shaped(meta: dict[str, Any], cfg: ServeConfig) -> None:
    """Run every kernel once on a synthetic partition with ``meta``'s attributes, then free it."""
    import shutil
    import tempfile

    from glisp_core.partition_format import open_partition

    tmp = Path(tempfile.mkdtemp(prefix="glisp-warmup-"))
    try:
        engine = PartitionSampler(
            open_partition(synthetic_partition(meta, tmp / "part-00000"), verify=False),
            threads=cfg.threads,
            chunk=cfg.chunk,
            dense_id_map_mb=cfg.dense_id_map_mb,
        )
        warm_up(engine)
        engine.features(engine.global_id[:4])
        engine.close()
        del engine
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    release_free_heap()
