"""Per-layer metrics of an inference run, summed over its tasks, as the manifest records them.

Times are task seconds summed over partitions (CPU-like; the layer's wall time is ``wall_s``).
``fill_over_model`` is the paper's Table V ratio: static-cache filling against the model pass
(reading rows through the dynamic cache plus the slice itself). Sampling is reported on its own.
With the halo exchange (``glisp_infer.halo``) part of the filling moves elsewhere: the plan job splits the
samples by source partition (``needs_s``) and the previous layer's tasks write the pushed rows
(``halo_write_s``); ``exchange_over_model`` charges all of it, ``(fill + needs + previous halo_write) / model``.
"""

from __future__ import annotations

from typing import Any

SUMS = (
    "rows",
    "vertices",
    "chunks_written",
    "bytes_written",
    "raw_bytes",
    "total_s",
    "cpu_s",
    "write_s",
    "sample_s",
    "fill_s",
    "read_s",
    "compute_s",
    "model_s",
    "fill_chunks",
    "chunk_reads",
    "dynamic_hits",
    "dynamic_misses",
    "static_hits",
    "static_lookups",
    "static_rows",
    "static_foreign_rows",
    "static_bytes",
    "sampled_edges",
    "interior",
    "boundary",
    "evictions",
    "not_admitted",
    "halo_rows",
    "halo_rows_written",
    "halo_write_s",
    "needs_s",
    "affected",
    "work",
    "affected_work",
    "recomputed",
    "recomputed_scattered",
    "copied",
    "copy_s",
    "copy_chunks",
    "signature_s",
    "batches",
    "projected",
)


def _ratio(a: float, b: float) -> float:
    return round(a / b, 4) if b else 0.0


def summarize_layer(res: list[dict[str, Any]]) -> dict[str, Any]:
    d: dict[str, Any] = {}
    for k in SUMS:
        if any(k in r for r in res):
            v = sum(r.get(k, 0) for r in res)
            d[k] = round(v, 3) if isinstance(v, float) else v
    d["compression_ratio"] = _ratio(d.get("raw_bytes", 0), d.get("bytes_written", 0))
    d["attempts_per_part"] = [int(r["attempt"]) + 1 for r in res]
    d["wall_s"] = round(max((r.get("wall_s", 0.0) for r in res), default=0.0), 3)
    if "chunk_reads" in d:
        d["dynamic_hit_ratio"] = _ratio(d["dynamic_hits"], d["chunk_reads"])
        d["fill_over_model"] = _ratio(d["fill_s"], d["model_s"])
        d["cache_capacity_per_part"] = [int(r["cache_capacity"]) for r in res]
        d["static_chunks_per_part"] = [int(r["static_chunks"]) for r in res]
        d["cache_share_max"] = max((_ratio(r["cache_capacity"], r["static_chunks"]) for r in res), default=0.0)
        d["fanout_per_part"] = [int(r["fanout"]) for r in res]
        d["batch_edges_max"] = max((int(r.get("batch_edges_max", 0)) for r in res), default=0)
        d["own_rows_local"] = sum(bool(r.get("own_rows_local")) for r in res)
        d["read_in_place"] = sum(bool(r.get("read_in_place")) for r in res)  # tasks serving rows from the pages
        d["shadow_hit_ratio"] = shadow_ratios(res)
    return d


def shadow_ratios(res: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    reads = sum(r["chunk_reads"] for r in res)
    out: dict[str, dict[str, float]] = {}
    for pol in ("fifo", "lru", "fifo_all", "lru_all"):
        fracs = res[0]["shadow_hits"][pol] if res else {}
        out[pol] = {f: _ratio(sum(r["shadow_hits"][pol][f] for r in res), reads) for f in fracs}
    return out


def summarize_layers(per_layer: list[list[dict[str, Any]]]) -> dict[str, Any]:
    """``layers``: one dict per layer; the totals over layers 1..K at the top level."""
    layers = {f"layer{i}": summarize_layer(res) for i, res in enumerate(per_layer)}
    for i in range(1, len(per_layer)):
        d = layers[f"layer{i}"]
        d["exchange_s"] = round(d["fill_s"] + d.get("needs_s", 0) + layers[f"layer{i - 1}"].get("halo_write_s", 0), 3)
        d["exchange_over_model"] = _ratio(d["exchange_s"], d["model_s"])
    model = [layers[f"layer{i}"] for i in range(1, len(per_layer))]
    tot = {
        k: sum(d.get(k, 0) for d in model)
        for k in (
            "fill_s",
            "model_s",
            "sample_s",
            "read_s",
            "compute_s",
            "write_s",
            "chunk_reads",
            "dynamic_hits",
            "fill_chunks",
            "exchange_s",
            "halo_rows",
            "not_admitted",
        )
    }
    task_cpu = sum(d.get("cpu_s", 0) for d in layers.values())
    written = sum(d["bytes_written"] for d in layers.values())
    raw = sum(d["raw_bytes"] for d in layers.values())
    flat = [r for res in per_layer[1:] for r in res]
    return {
        "chunk_reads": tot["chunk_reads"],
        "fill_chunks": tot["fill_chunks"],
        "dynamic_hit_ratio": _ratio(tot["dynamic_hits"], tot["chunk_reads"]),
        "not_admitted": tot["not_admitted"],
        "fill_over_model": _ratio(tot["fill_s"], tot["model_s"]),
        "exchange_over_model": _ratio(tot["exchange_s"], tot["model_s"]),
        "exchange_s": round(tot["exchange_s"], 3),
        "halo_rows": tot["halo_rows"],
        "sample_over_model": _ratio(tot["sample_s"], tot["model_s"]),
        "fill_s": round(tot["fill_s"], 3),
        "model_s": round(tot["model_s"], 3),
        "sample_s": round(tot["sample_s"], 3),
        "write_s": round(tot["write_s"], 3),
        "task_cpu_s": round(task_cpu, 3),
        "bytes_written": written,
        "compression_ratio": _ratio(raw, written),
        "cache_share_max": max((d.get("cache_share_max", 0.0) for d in model), default=0.0),
        "shadow_hit_ratio": shadow_ratios(flat) if flat else {},
        "retried_tasks": sum(1 for res in per_layer for r in res if r["attempt"] > 0),
        "layers": layers,
    }
