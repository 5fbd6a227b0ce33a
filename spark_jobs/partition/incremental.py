"""Incremental refresh of a vertex-cut partitioning: apply a snapshot's edge changes to the previous one.

With ``partition.incremental = true`` and a previous version of the graph holding a published
``partition/<run>`` of the same algorithm and p (the *base*), the new version is not re-partitioned
from scratch:

1. **Match** the new version's edge rows to the base's by original ids (vids differ between
   versions): the map base vid -> new vid pairs the vertices of the same type name and original id
   (:mod:`spark_jobs.partition.incremental_ids`); base rows are rewritten into new vids and both sides go
   through one sorted-merge kernel (:mod:`spark_jobs.partition.incremental_match`) that pairs the k-th
   base row of a key (src, dst, edge type) with the k-th new row in eid order (duplicates match one to
   one). Where a graph fits one process (its edge sets and id maps each within
   ``incremental_local_edges`` rows) this process runs it over all rows read with pyarrow; above that the
   id map is a Spark join and each Spark task runs the match over the pairs hashed to it
   (:mod:`spark_jobs.partition.incremental_spark`), with the same result.
2. **Kept** rows keep their base partition; **removed** rows are simply not in the new edge set.
3. **Added** rows of an unordered pair that still has a kept row join that row's partition (the
   partition contract keeps a pair's rows together; same kernel). The other added rows go, grouped by
   pair in a seeded random order (in place, or streamed through the driver in the Spark path),
   through a capped HDRF score against the current replica sets
   (:func:`spark_jobs.partition.incremental_place.place_capped`): prefer
   partitions holding both / one endpoint, weighted toward the lower-degree endpoint as in HDRF,
   plus a balance term; a partition whose edge count would pass the hard capacity
   ``ceil((1 + incremental_epsilon) * |E| / p)`` is never chosen. The replica sets and sizes are
   updated after every pair, so the placement is exactly sequential HDRF over the added
   edges; in the Spark path the driver holds the state of the vertices the placed rows touch (bounded
   by ``partition.state_auto_mb``: past it the refresh declines) and one chunk of added rows at a time,
   never the edge set nor anything per vertex of the graph.
4. The result is written and measured like any partition run (``metrics.write_outputs``); when its
   VB or EB passes ``incremental_max_vb`` / ``incremental_max_eb``, or its RF grew past
   ``incremental_max_rf_growth`` x the RF of the last full run it descends from, or the capacity
   cannot be met, ``job.run_partition`` discards it and runs the configured algorithm from scratch.
   The stage record's ``counts.incremental`` says which path ran, why, and from which base.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from glisp_core.config import Config, PartitionConfig
from glisp_core.dataset.layout import DatasetVersion, list_versions
from glisp_core.dataset.manifest import StageRecord, read_manifest
from glisp_core.dataset.versions import read_latest
from glisp_core.storage.uri import StoreURI
from spark_jobs.partition import incremental_match
from spark_jobs.partition.expansion import local_degrees
from spark_jobs.partition.incremental_ids import etype_map, is_identity, vid_map
from spark_jobs.partition.incremental_place import Done, Laps, Placed, bits_of, place_capped
from spark_jobs.partition.incremental_spark import refresh_spark
from spark_jobs.partition.metrics import write_outputs, write_outputs_local
from spark_jobs.partition.staging import read_columns

if TYPE_CHECKING:
    from spark_jobs.partition.base import PartitionContext

# ---- choosing the base -------------------------------------------------------------------------


def _usable_base(root: StoreURI, graph: str, version: str, stage: str, cfg: Config) -> StageRecord | None:
    dv = DatasetVersion(root, graph, version)
    try:
        m = read_manifest(dv)
        rec = m.stage(stage)
    except Exception:  # missing, stale or unreadable: not a base
        return None
    ok = rec.params.get("algorithm") == cfg.partition.algorithm and rec.params.get("parts") == cfg.partition.parts
    return rec if ok else None


def find_base(cfg: Config, dv: DatasetVersion, run: str) -> tuple[DatasetVersion, StageRecord] | None:
    """The version whose ``partition/<run>`` the refresh of ``dv`` starts from, or None.

    ``partition.incremental_base`` names it explicitly; otherwise the base recorded by an earlier
    refresh of ``dv`` (so a re-run has the same fingerprint and is a no-op), else the graph's
    ``LATEST``, else its newest other version, in each case only when it holds a published run of
    the same algorithm and p.
    """
    stage = f"partition/{run}"
    pc = cfg.partition
    candidates: list[str | None]
    if pc.incremental_base:
        candidates = [pc.incremental_base]
    else:
        prev = read_manifest(dv).stages.get(stage)
        recorded = (prev.params.get("incremental") or {}).get("base_version") if prev else None
        candidates = [recorded, read_latest(dv.path.parent), *reversed(list_versions(dv.root, dv.graph))]
    for v in candidates:
        if v and v != dv.version and (rec := _usable_base(dv.root, dv.graph, v, stage, cfg)) is not None:
            return DatasetVersion(dv.root, dv.graph, v), rec
    return None


def incremental_params(cfg: Config, base: DatasetVersion, base_rec: StageRecord) -> dict[str, Any]:
    """What the refreshed stage depends on besides ingest: recorded in its params (and fingerprint)."""
    pc = cfg.partition
    return {
        "base_version": base.version,
        "base_fingerprint": base_rec.fingerprint,
        "epsilon": pc.incremental_epsilon,
        "lam": pc.incremental_lam,
        "max_vb": pc.incremental_max_vb,
        "max_eb": pc.incremental_max_eb,
        "max_rf_growth": pc.incremental_max_rf_growth,
    }


# ---- the refresh -------------------------------------------------------------------------------


def match_local(
    base: DatasetVersion, run: str, new: DatasetVersion, vmap: np.ndarray, emap: np.ndarray, seed: int
) -> dict[str, np.ndarray]:
    """The same match in this process over all rows (both sides at most ``incremental_local_edges``)."""
    b = read_columns(base.edges, ("eid", "src", "dst", "etype"))
    a = read_columns(base.assignment(run), ("eid", "part"))
    bpart = np.full(int(b["eid"].max(initial=-1)) + 1, -1, np.int32)
    bpart[a["eid"]] = a["part"]
    s, d, t = vmap[b["src"]], vmap[b["dst"]], emap[b["etype"]]
    keep = (s >= 0) & (d >= 0) & (t >= 0)
    e = read_columns(new.edges, ("eid", "src", "dst", "etype"))
    nb, m = int(keep.sum()), len(e["eid"])
    side = np.concatenate([np.zeros(nb, np.int8), np.ones(m, np.int8)])
    part = np.concatenate([bpart[b["eid"][keep]], np.full(m, -1, np.int32)])
    r = incremental_match.match(
        np.concatenate([s[keep], e["src"]]),
        np.concatenate([d[keep], e["dst"]]),
        np.concatenate([t[keep], e["etype"]]),
        side,
        np.concatenate([b["eid"][keep], e["eid"]]),
        part,
        seed,
    )
    idx = r.pop("pos") - nb  # new rows come after the base rows: 0..m-1 in order
    return {"eid": e["eid"][idx], "src": e["src"][idx], "dst": e["dst"][idx], **r}


def _done_local(r: dict[str, np.ndarray], n: int, p: int) -> Done:
    done = r["how"] != incremental_match.FRESH
    vid = np.concatenate([r["src"][done], r["dst"][done]])
    part = np.concatenate([r["part"][done], r["part"][done]])
    kept = int((r["how"] == incremental_match.KEPT).sum())
    sizes = np.bincount(r["part"][done], minlength=p).astype(np.int64)
    return Done(bits_of(vid, part, n, p), sizes, kept, int(done.sum()) - kept)


def _place_local(ctx: PartitionContext, r: dict[str, np.ndarray], st: Done, deg: np.ndarray, cap: int) -> int:
    """Place the fresh rows of ``r`` in place (``r["part"]``), in the order the Spark path streams them."""
    f = np.flatnonzero(r["how"] == incremental_match.FRESH)
    src, dst = r["src"][f], r["dst"][f]
    f = f[np.lexsort((r["eid"][f], np.maximum(src, dst), np.minimum(src, dst), r["k"][f]))]
    last = np.array([-1, -1, -1], np.int64)
    part = place_capped(
        r["src"][f], r["dst"][f], r["rows"][f], deg, st.bits, st.sizes, cap, ctx.cfg.incremental_lam, last
    )
    r["part"][f] = part
    return int((part < 0).sum())


def _refresh_local(
    ctx: PartitionContext,
    base: DatasetVersion,
    run: str,
    new: DatasetVersion,
    emap: np.ndarray,
    cap: int,
    clock: dict[str, float],
) -> Placed:
    """Map the ids, match and place in this process: the new rows (eid, src, dst, part, ...) as arrays."""
    lap = Laps(clock)
    vmap = vid_map(base, new)
    lap("ids")
    r = match_local(base, run, new, vmap, emap, ctx.seed)
    lap("match")
    st = _done_local(r, ctx.num_vertices, ctx.parts)
    deg = local_degrees(r, ctx.num_vertices)
    lap("state")
    unplaced = _place_local(ctx, r, st, deg, cap)
    lap("place")
    same_vids = is_identity(vmap)
    return Placed(r, st, unplaced, same_vids and is_identity(emap), same_vids=same_vids)


@dataclass
class Refresh:
    """What an incremental refresh measured; ``fallback`` names why a full re-partition must run."""

    counts: dict[str, Any]
    metrics: dict[str, Any]
    info: dict[str, Any] = field(default_factory=dict)
    fallback: str = ""


def refresh(
    ctx: PartitionContext, new: DatasetVersion, base: DatasetVersion, base_rec: StageRecord, run: str, out: StoreURI
) -> Refresh:
    """Partition ``new`` from ``base``'s ``partition/<run>``; writes assignment/ and replicas/ under ``out``
    (the attempt prefix, in any store).

    In this process when the base and the new version each have at most ``partition.incremental_local_edges``
    edge rows and vertices (this process then holds both edge sets: about 130 bytes per row of both at the
    peak, 1.3 GB at 5M rows each), else in Spark (nothing per vertex in the driver); both give the same
    placement (the same match kernel, the same placement order).
    """
    p, m = ctx.parts, ctx.num_edges
    bs = read_manifest(base).schema
    base_m, base_n = int(bs["num_edges"]), int(bs["num_vertices"])
    emap = etype_map(base, new)
    cap = math.ceil((1.0 + ctx.cfg.incremental_epsilon) * m / p)
    local = max(base_m, m, base_n, ctx.num_vertices) <= ctx.cfg.incremental_local_edges
    clock: dict[str, float] = {}
    if local:
        path = _refresh_local(ctx, base, run, new, emap, cap, clock)
    else:
        path = refresh_spark(ctx, base, run, new, emap, cap, clock)
    info: dict[str, Any] = {
        "base": f"{base.graph}/{base.version}",
        "base_run": run,
        "base_fingerprint": base_rec.fingerprint,
        "mode": "local" if local else "spark",
        "same_ids": path.same_ids,
        "same_vids": path.same_vids,
        "kept": path.done.kept,
        "removed": base_m - path.done.kept,
        "added": m - path.done.kept,
        "attached": path.done.attached,
        "placed": m - path.done.kept - path.done.attached,
        "capacity": cap,
        "anchor_rf": _anchor_rf(base_rec),
        **path.state,
        "seconds": {k: round(v, 2) for k, v in clock.items()},
    }
    if path.fallback or path.unplaced or path.alloc is None:
        why = path.fallback or f"{path.unplaced} added rows found no partition under the capacity {cap}"
        return Refresh({}, {}, info, why)
    t_place = time.perf_counter()
    if isinstance(path.alloc, dict):  # local: written from the arrays, no Spark job
        a = path.alloc
        counts, metrics = write_outputs_local(out, a["eid"], a["part"], p, m, path.done.bits, path.done.sizes)
    else:  # replicas/ by a group-by in Spark: the driver holds no partition sets of the graph
        counts, metrics = write_outputs(ctx.spark, path.alloc, out, p, m, persist=False)
    info["seconds"]["write"] = round(time.perf_counter() - t_place, 2)
    return Refresh(counts, metrics, info, drift(ctx.cfg, metrics, info["anchor_rf"]))


def _anchor_rf(base_rec: StageRecord) -> float:
    """RF of the last full run the base descends from (the base's own when it was a full run)."""
    inc = base_rec.counts.get("incremental") or {}
    return float(inc["anchor_rf"] if inc.get("path") == "incremental" else base_rec.metrics["rf"])


def drift(pc: PartitionConfig, metrics: dict[str, Any], anchor_rf: float) -> str:
    """Why an incremental result is not good enough to publish ("" = it is)."""
    why = []
    if metrics["vb"] > pc.incremental_max_vb:
        why.append(f"VB {metrics['vb']:.3f} > incremental_max_vb {pc.incremental_max_vb}")
    if metrics["eb"] > pc.incremental_max_eb:
        why.append(f"EB {metrics['eb']:.3f} > incremental_max_eb {pc.incremental_max_eb}")
    if pc.incremental_max_rf_growth > 0 and metrics["rf"] > pc.incremental_max_rf_growth * anchor_rf:
        why.append(
            f"RF {metrics['rf']:.3f} > incremental_max_rf_growth {pc.incremental_max_rf_growth} x RF of the "
            f"last full run {anchor_rf:.3f}"
        )
    return "; ".join(why)
