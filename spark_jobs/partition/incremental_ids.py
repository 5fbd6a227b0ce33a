"""Which vertex and edge type of the base version is which of the new one, for a partition refresh.

A vertex of the base version and one of the new are the same when their vertex type name and original id are
(compared as text when the id type changed); an edge type, when its name is. Two forms of the vertex map:

- :func:`vid_map`, a numpy array built in this process, for the in-process refresh (whose graph is bounded by
  ``partition.incremental_local_edges``);
- :func:`vids_unchanged`, for the Spark refresh: whether the map is the identity (then nothing is written);
- :func:`write_vid_map`, for the Spark refresh otherwise: one left join of both id maps in Spark, written by tasks as a
  by-vid Zarr array in the refresh's staging (:func:`glisp_spark.by_vid.write_by_vid`) and read whole by the
  tasks that rewrite the base's edge rows (:func:`vid_map_of`, once per Python worker). The driver receives one
  count per chunk of vids: nothing per vertex.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from glisp_core.dataset.manifest import read_manifest
from glisp_core.storage.store import store_for

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

    from glisp_core.dataset.layout import DatasetVersion

VMAP = "vmap"  # the Zarr array of the Spark refresh's vertex map: base vid -> new vid, -1 where gone
VMAP_CHUNK = 1 << 18  # vids per chunk: a writing task holds whole chunks


def _ids_as_text(base: DatasetVersion, new: DatasetVersion) -> bool:
    return read_manifest(base).schema.get("id_type") != read_manifest(new).schema.get("id_type")


def _type_names(dv: DatasetVersion) -> list[str]:
    return list(read_manifest(dv).schema.get("vertex_types") or ["v0"])


def id_frame(dv: DatasetVersion, as_str: bool, types: list[str]) -> pd.DataFrame:
    """vid, vertex type (`vt`: its index in ``types``, -1 for a type not there) and original id (`orig`, as text
    when `as_str`) of every vertex of `dv`. Types as integers: a column of names would be one Python object
    per vertex."""
    codes = np.array([types.index(t) if t in types else -1 for t in _type_names(dv)], np.int32)
    t = store_for(dv.idmap).read_table(dv.idmap, columns=["vid", "orig_id", "vtype"]).to_pandas()
    return pd.DataFrame(
        {
            "vid": t["vid"].to_numpy(np.int64),
            "vt": codes[t["vtype"].to_numpy()],
            "orig": t["orig_id"].astype(str) if as_str else t["orig_id"],
        }
    )


def vid_map(base: DatasetVersion, new: DatasetVersion) -> np.ndarray:
    """base vid -> new vid of the vertex with the same (vertex type, original id); -1 where it is gone.
    In this process: for the in-process refresh only."""
    as_str, types = _ids_as_text(base, new), _type_names(new)
    ob, on = id_frame(base, as_str, types), id_frame(new, as_str, types)
    both = ob.merge(on, on=["vt", "orig"], suffixes=("_b", "_n"))
    out = np.full(int(read_manifest(base).schema["num_vertices"]), -1, np.int64)
    out[both["vid_b"].to_numpy()] = both["vid_n"].to_numpy()
    return out


def etype_map(base: DatasetVersion, new: DatasetVersion) -> np.ndarray:
    """base edge type code -> new code of the same name; -1 where the type is gone (a few names)."""
    names_b = read_manifest(base).schema.get("edge_types") or ["e0"]
    names_n = list(read_manifest(new).schema.get("edge_types") or ["e0"])
    return np.array([names_n.index(t) if t in names_n else -1 for t in names_b], np.int64)


def is_identity(m: np.ndarray) -> bool:
    return bool(np.array_equal(m, np.arange(len(m), dtype=m.dtype)))


def _named_ids(spark: SparkSession, dv: DatasetVersion, as_text: bool) -> DataFrame:
    """(vid, vertex type name, original id) of every vertex of ``dv``, in Spark."""
    from pyspark.sql import functions as F

    from glisp_core.dataset.layout import ORIG_ID, VID, VTYPE
    from glisp_spark.tables import read_parquet

    names = F.array(*[F.lit(t) for t in _type_names(dv)])
    ids = read_parquet(spark, dv.idmap).select(VID, F.element_at(names, F.col(VTYPE) + 1).alias(VTYPE), ORIG_ID)
    return ids.withColumn(ORIG_ID, F.col(ORIG_ID).cast("string")) if as_text else ids


def vids_unchanged(spark: SparkSession, base: DatasetVersion, new: DatasetVersion, base_n: int, new_n: int) -> bool:
    """Whether every base vertex is at its own vid in the new version (the same type name and original id
    there): then the vertex map is the identity and need not be written. Ingest numbers vertices by a total
    order of their ids, so a snapshot that changes edges only, or appends vertices whose ids sort last, keeps
    them. One anti-join of both id maps on (vid, type, id) in Spark, its shuffle keyed by vid; ``base_n`` and
    ``new_n`` are the versions' vertex counts (fewer in the new one: some vertex left)."""
    from glisp_core.dataset.layout import ORIG_ID, VID, VTYPE

    if new_n < base_n:
        return False
    as_text = _ids_as_text(base, new)
    b, m = _named_ids(spark, base, as_text), _named_ids(spark, new, as_text)
    return b.join(m, [VID, VTYPE, ORIG_ID], "left_anti").limit(1).count() == 0


def write_vid_map(spark: SparkSession, base: DatasetVersion, new: DatasetVersion, url: str) -> int:
    """Write the vertex map (array :data:`VMAP` in the Zarr group ``url``) in Spark tasks; returns how many base
    vids keep their own id in the new version (all of them: no vertex was removed or renumbered)."""
    from glisp_core.dataset.layout import ORIG_ID, VID, VTYPE
    from glisp_core.storage.zarr_arrays import open_group
    from glisp_spark.by_vid import write_by_vid

    n = int(read_manifest(base).schema["num_vertices"])
    g = open_group(url, mode="w")
    g.create_array(
        VMAP, shape=(n,), chunks=(min(VMAP_CHUNK, max(n, 1)),), dtype="int64", fill_value=-1,
        config={"write_empty_chunks": True},
    )  # fmt: skip
    if n == 0:
        return 0
    as_text = _ids_as_text(base, new)
    b = _named_ids(spark, base, as_text)
    m = _named_ids(spark, new, as_text).withColumnRenamed(VID, "new_vid")
    rows = b.join(m, [VTYPE, ORIG_ID], "left").select(VID, "new_vid")
    where = f"{base.idmap} joined with {new.idmap} (a vertex twice in the new id map adds a row)"
    return write_by_vid(rows, url, VMAP, n, _new_vid, where, _kept_own_id)


def _new_vid(b: pa.RecordBatch) -> np.ndarray:
    return b.column("new_vid").fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)


def _kept_own_id(vids: np.ndarray, new: np.ndarray) -> int:
    return int((vids == new).sum())


@functools.lru_cache(maxsize=2)
def vid_map_of(url: str) -> np.ndarray:
    """The whole vertex map :func:`write_vid_map` wrote (read once per Python worker and refresh)."""
    from glisp_core.storage.zarr_arrays import open_array

    return np.asarray(open_array(url, VMAP)[:], np.int64)
