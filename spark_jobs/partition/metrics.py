"""Write a partitioning's outputs and measure them in Spark, from the written assignment and replicas.

Definitions (GLISP notes, section 1): |E_i| counts ingested edge rows (an undirected edge is two rows,
both in the same partition); V_i is the set of endpoints of E_i;
RF = sum_i |V_i| / |V| over vertices with at least one edge; VB = max_i |V_i| / mean_i |V_i|;
EB = max_i |E_i| / mean_i |E_i|; interior fraction = share of vertices (with an edge) held by one partition.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from pyspark.sql import functions as F

from glisp_core.errors import StageError


def write_outputs(spark: Any, alloc: Any, out: Path, parts: int, num_edges: int) -> tuple[dict, dict]:
    """Write ``assignment/`` and ``replicas/`` under ``out``; return (counts, metrics)."""
    assignment = str(out / "assignment")
    replicas = str(out / "replicas")
    alloc = alloc.persist()  # written twice (assignment, replicas); computed once
    alloc.select("eid", "part").write.mode("overwrite").parquet(assignment)
    pairs = alloc.select(F.col("src").alias("vid"), "part").unionAll(alloc.select(F.col("dst").alias("vid"), "part"))
    (
        pairs.groupBy("vid")
        .agg(F.sort_array(F.collect_set("part")).alias("parts"))
        .write.mode("overwrite")
        .parquet(replicas)
    )
    alloc.unpersist()
    return measure(spark, out, parts, num_edges)


def measure(spark: Any, out: Path, parts: int, num_edges: int) -> tuple[dict, dict]:
    """Counts and quality metrics of a written partitioning (assignment + replicas)."""
    a = spark.read.parquet(str(out / "assignment"))
    r = spark.read.parquet(str(out / "replicas"))
    e = a.groupBy("part").count().toArrow()
    epp = np.zeros(parts, np.int64)
    epp[e.column("part").to_numpy()] = e.column("count").to_numpy()
    if int(epp.sum()) != num_edges:
        raise StageError(f"partition assignment holds {int(epp.sum()):,} rows, ingest/edges {num_edges:,} (got a mismatch)")
    v = r.select(F.explode("parts").alias("part")).groupBy("part").count().toArrow()
    vpp = np.zeros(parts, np.int64)
    vpp[v.column("part").to_numpy()] = v.column("count").to_numpy()
    row = r.agg(F.count(F.lit(1)).alias("n"), F.sum((F.size("parts") == 1).cast("long")).alias("interior")).collect()[0]
    n_active = int(row["n"] or 0)
    interior = int(row["interior"] or 0)
    metrics = quality(epp, vpp, n_active)
    metrics["interior_fraction"] = round(interior / n_active, 6) if n_active else 1.0
    counts = {
        "parts": parts,
        "edges": num_edges,
        "vertices_with_edges": n_active,
        "edges_per_part": epp.tolist(),
        "vertices_per_part": vpp.tolist(),
    }
    return counts, metrics


def quality(edges_per_part: np.ndarray, vertices_per_part: np.ndarray, active_vertices: int) -> dict[str, float]:
    """RF, VB, EB exactly as GLISP Table II (notes section 1)."""
    epp = np.asarray(edges_per_part, np.float64)
    vpp = np.asarray(vertices_per_part, np.float64)
    p = len(epp)
    rf = vpp.sum() / active_vertices if active_vertices else 1.0
    eb = epp.max() / (epp.sum() / p) if epp.sum() else 1.0
    vb = vpp.max() / (vpp.sum() / p) if vpp.sum() else 1.0
    return {"rf": round(float(rf), 6), "vb": round(float(vb), 6), "eb": round(float(eb), 6)}
