"""Vertex keys: a 64-bit hash of ``"<vertex type name>\\x1f<original id as text>"``, over Arrow buffers.

The key is pandas' ``hash_array(..., categorize=False)`` of that text (SipHash-2-4 of the UTF-8 bytes with
pandas' default key, then its 64-bit mix), the function earlier builds computed through pandas, so a key an
earlier version wrote stays the key of the same vertex. Why not pandas: it hashes Python strings, one object per
vertex and three per concatenation (about 1.8 GB at 8.4M vertices, on the driver); here numba reads the bytes
of one Arrow string array, and the keys are computed in the tasks that write them (:func:`write_keys`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from numba import njit

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

    from glisp_core.dataset.layout import DatasetVersion

SEP = "\x1f"
_KEY = b"0123456789123456"  # pandas' default hash_key
_K0 = np.uint64(int.from_bytes(_KEY[:8], "little"))
_K1 = np.uint64(int.from_bytes(_KEY[8:], "little"))


@njit(inline="always", nogil=True, cache=True)
def _rotl(x: np.uint64, b: int) -> np.uint64:  # pragma: no cover - compiled
    return (x << np.uint64(b)) | (x >> np.uint64(64 - b))


@njit(inline="always", nogil=True, cache=True)
def _round(v0, v1, v2, v3):  # pragma: no cover - compiled
    v0 += v1
    v1 = _rotl(v1, 13) ^ v0
    v0 = _rotl(v0, 32)
    v2 += v3
    v3 = _rotl(v3, 16) ^ v2
    v0 += v3
    v3 = _rotl(v3, 21) ^ v0
    v2 += v1
    v1 = _rotl(v1, 17) ^ v2
    v2 = _rotl(v2, 32)
    return v0, v1, v2, v3


@njit(nogil=True, cache=True)
def _siphash(data, lo, hi, k0, k1):  # pragma: no cover - compiled
    """SipHash-2-4 of ``data[lo:hi]``."""
    v0 = k0 ^ np.uint64(0x736F6D6570736575)
    v1 = k1 ^ np.uint64(0x646F72616E646F6D)
    v2 = k0 ^ np.uint64(0x6C7967656E657261)
    v3 = k1 ^ np.uint64(0x7465646279746573)
    n = hi - lo
    end = lo + n - n % 8
    i = lo
    while i < end:
        m = np.uint64(0)
        for j in range(8):
            m |= np.uint64(data[i + j]) << np.uint64(8 * j)
        v3 ^= m
        v0, v1, v2, v3 = _round(v0, v1, v2, v3)
        v0, v1, v2, v3 = _round(v0, v1, v2, v3)
        v0 ^= m
        i += 8
    b = np.uint64(n & 0xFF) << np.uint64(56)
    for j in range(hi - end):
        b |= np.uint64(data[end + j]) << np.uint64(8 * j)
    v3 ^= b
    v0, v1, v2, v3 = _round(v0, v1, v2, v3)
    v0, v1, v2, v3 = _round(v0, v1, v2, v3)
    v0 ^= b
    v2 ^= np.uint64(0xFF)
    for _ in range(4):
        v0, v1, v2, v3 = _round(v0, v1, v2, v3)
    return v0 ^ v1 ^ v2 ^ v3


@njit(nogil=True, cache=True)
def _hash_strings(offsets, data, k0, k1):  # pragma: no cover - compiled
    """pandas' hash of every string ``data[offsets[i]:offsets[i + 1]]``: SipHash, then its 64-bit mix."""
    out = np.empty(len(offsets) - 1, np.uint64)
    for i in range(len(out)):
        z = _siphash(data, offsets[i], offsets[i + 1], k0, k1)
        z ^= z >> np.uint64(30)
        z *= np.uint64(0xBF58476D1CE4E5B9)
        z ^= z >> np.uint64(27)
        z *= np.uint64(0x94D049BB133111EB)
        z ^= z >> np.uint64(31)
        out[i] = z
    return out


def text_keys(text: pa.Array) -> np.ndarray:
    """The key of every string of an Arrow string array without nulls."""
    import pyarrow as pa

    text = text.cast(pa.large_string())
    if text.null_count:
        raise ValueError("vertex keys: the text of a vertex is null")
    _, offs, data = text.buffers()
    offsets = np.frombuffer(offs, np.int64)[text.offset : text.offset + len(text) + 1]
    raw = np.frombuffer(data, np.uint8) if data is not None else np.zeros(0, np.uint8)
    return _hash_strings(offsets, raw, _K0, _K1)


def vertex_keys(vtype_names: Any, orig_ids: Any) -> np.ndarray:
    """The key of each vertex from its type name and original id (an integer id hashes as its decimal text, so
    an id type change between versions keeps the keys)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    names, orig = (_arrow(x) for x in (vtype_names, orig_ids))
    return text_keys(pc.binary_join_element_wise(names.cast(pa.string()), orig.cast(pa.string()), SEP))


def _arrow(values: Any) -> pa.Array:
    import pyarrow as pa

    if isinstance(values, pa.ChunkedArray):
        return values.combine_chunks()
    return values if isinstance(values, pa.Array) else pa.array(np.asarray(values))


def write_keys(spark: SparkSession, dv: DatasetVersion, url: str, array: str) -> int:
    """Write every vertex's key into the by-vid array ``array`` of the run's store ``url``, in Spark tasks: each
    task computes whole chunks of it from the ingest id map (rows grouped by chunk, in vid order) and writes
    them; the driver receives one count per chunk. Returns the number of vertices written."""
    from glisp_core.dataset.layout import ORIG_ID, VID, VTYPE
    from glisp_core.storage.zarr_arrays import open_array
    from glisp_spark.by_vid import write_table_by_vid

    arr = open_array(url, array)
    n = int(arr.shape[0])
    if n == 0:
        return 0
    types = key_type_names(dv)
    # the text is made in the task by Arrow from the id map's own columns; one chunk is written here, without a job
    write_table_by_vid(spark, dv.idmap, [VID, VTYPE, ORIG_ID], url, array, n, lambda b: keys_of(b, types))
    return n


def key_type_names(dv: DatasetVersion) -> list[str]:
    """The vertex type names keys are made from, by type code ("v0" for an untyped graph)."""
    from glisp_core.dataset.manifest import read_manifest

    return read_manifest(dv).schema.get("vertex_types") or ["v0"]


def keys_of(b: pa.RecordBatch | pa.Table, types: list[str], code: str = "") -> np.ndarray:
    """The keys of an id map's rows: the type name of their type code (column ``code``, the id map's own by
    default) and their original id."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from glisp_core.dataset.layout import ORIG_ID, VTYPE

    return vertex_keys(pc.take(pa.array(types), b.column(code or VTYPE)), b.column(ORIG_ID))
