"""Vertex degrees of the edge rows, computed in Spark and returned as one O(|V|) numpy array."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from pyspark.sql import functions as F

from glisp_core.errors import BadInputError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def degree_array(edges: DataFrame, num_vertices: int, source: str = "ingest/edges") -> np.ndarray:
    """deg[v] = number of edge rows with v as src plus rows with v as dst (a self-loop counts twice).

    A hash aggregate with map-side partial counts, so a hub's millions of rows never meet in one task
    before being reduced. Vertex ids outside 0..num_vertices-1 are an inconsistent ingest: fail.
    """
    ends = edges.select(F.explode(F.array("src", "dst")).alias("vid"))
    t = ends.groupBy("vid").agg(F.count(F.lit(1)).alias("d")).toArrow()
    vid = t.column("vid").to_numpy()
    d = t.column("d").to_numpy()
    bad = (vid < 0) | (vid >= num_vertices)
    if bad.any():
        raise BadInputError(
            source,
            "src/dst",
            int(bad.sum()),
            len(vid),
            f"name vertex ids outside 0..{num_vertices - 1}",
            examples=vid[bad][:3].tolist(),
            hint="re-run 'glisp ingest' (vertex ids must be dense)",
        )
    deg = np.zeros(num_vertices, np.int64)
    deg[vid] = d
    return deg
