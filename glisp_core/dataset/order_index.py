"""The lookup arrays of an inference order, published by the reorder stage beside its table (Zarr, ``_index/``).

Layerwise inference asks the order, per vertex id, for the vertex's partition and positions, and per partition
for its vertices in order. Answering that from the Parquet table would take a shuffle in every inference run;
the reorder stage writes the answers once, as arrays any task reads by slices::

    part      int32 (n,) by vertex id: the vertex's inference partition
    part_pos  int64 (n,) by vertex id: its position among its partition's vertices (the order within it)
    pos       int64 (n,) by vertex id: its position in the global order
    vid       int64 (n,) by partition-major position: partition k's vertices from sum(counts[:k]), by part_pos

The directory's name starts with ``_`` so that Spark's and pyarrow's readers of the table skip it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from glisp_core.errors import GlispError
from glisp_core.storage.uri import StoreURI
from glisp_core.storage.zarr_arrays import open_array, open_group

INDEX_DIR = "_index"
CHUNK = 1 << 18  # entries per chunk (2 MiB of int64): one writer task per chunk
BY_VID = {"part": "int32", "part_pos": "int64", "pos": "int64"}
BY_PART = "vid"
CACHED_CHUNKS = 32  # chunks of the by-vertex-id arrays a process keeps (64 MiB at most)


def index_url(stage_dir: StoreURI) -> str:
    """The Zarr group of the reorder stage at ``stage_dir``."""
    return str(stage_dir / INDEX_DIR)


def partition_starts(counts: list[int] | tuple[int, ...]) -> np.ndarray:
    """Where each partition's vertices begin in ``vid`` (int64)."""
    return np.r_[0, np.cumsum(counts, dtype=np.int64)[:-1]].astype(np.int64) if len(counts) else np.zeros(0, np.int64)


def create_index(url: str, n: int, counts: list[int]) -> None:
    """The group and its four arrays (metadata only: the writer's tasks fill the chunks)."""
    g = open_group(url, mode="w")
    g.attrs["counts"] = [int(c) for c in counts]
    chunks = (min(CHUNK, max(n, 1)),)
    cfg = {"write_empty_chunks": True}
    for name, dtype in (*BY_VID.items(), (BY_PART, "int64")):
        g.create_array(name, shape=(n,), chunks=chunks, dtype=dtype, fill_value=-1, compressors=None, config=cfg)


@functools.lru_cache(maxsize=64)
def _array(url: str, name: str) -> Any:
    """One array, opened once per process (its metadata is a read of the store)."""
    return open_array(url, name)


@functools.lru_cache(maxsize=CACHED_CHUNKS)
def _chunk(url: str, name: str, j: int, n: int) -> np.ndarray:
    """Chunk ``j`` of a by-vertex-id array, kept by the process (2 MiB at most; read-only, as it is shared)."""
    a = np.asarray(_array(url, name)[j * CHUNK : min((j + 1) * CHUNK, n)])
    a.flags.writeable = False
    return a


@dataclass(frozen=True)
class OrderIndex:
    """Reads of one order's arrays; small and picklable (tasks open the arrays themselves)."""

    url: str
    counts: tuple[int, ...]

    @property
    def starts(self) -> tuple[int, ...]:
        """Where each partition's vertices begin in ``vid``."""
        return tuple(int(x) for x in partition_starts(self.counts))

    def vertices(self, part: int) -> np.ndarray:
        """Partition ``part``'s vertices in the order (its rows, first to last)."""
        a = self.starts[part]
        vids = np.asarray(_array(self.url, BY_PART)[a : a + self.counts[part]], np.int64)
        if len(vids) and int(vids.min()) < 0:
            raise GlispError(f"{self.url}/{BY_PART}: unwritten entries in partition {part}'s range (incomplete index)")
        return vids

    def pos(self, vids: np.ndarray) -> np.ndarray:
        """The vertices' positions in the global order."""
        return self._get("pos", vids)

    def rows(self, vids: np.ndarray, row_starts: tuple[int, ...] | np.ndarray) -> np.ndarray:
        """The vertices' rows in an array where partition k's rows begin at ``row_starts[k]``."""
        return self.locate(vids, row_starts)[1]

    def locate(self, vids: np.ndarray, row_starts: tuple[int, ...] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The vertices' partitions, and their rows as :meth:`rows` gives them."""
        part = self._get("part", vids)
        return part, np.asarray(np.asarray(row_starts, np.int64)[part] + self._get("part_pos", vids), np.int64)

    def _get(self, name: str, vids: np.ndarray) -> np.ndarray:
        """``name`` at ``vids``: from this process's copies of the chunks they fall in when those are few (the
        arrays are immutable once published; tasks of a run ask the same chunks again and again), else one
        orthogonal selection of the array."""
        vids = np.asarray(vids, np.int64)
        if not len(vids):
            return np.zeros(0, np.int64)
        n = sum(self.counts)
        if int(vids.min()) < 0 or int(vids.max()) >= n:
            raise GlispError(f"{self.url}/{name}: vertex ids outside [0, {n}) asked for")
        cid = vids // CHUNK
        chunks = np.flatnonzero(np.bincount(cid))
        if len(chunks) <= CACHED_CHUNKS:
            out = np.empty(len(vids), np.int64)
            for j in chunks:
                sel = cid == j
                out[sel] = _chunk(self.url, name, int(j), n)[vids[sel] - int(j) * CHUNK]
        else:
            out = np.asarray(_array(self.url, name).get_orthogonal_selection(vids), np.int64)
        if int(out.min()) < 0:
            bad = vids[out < 0][:3].tolist()
            raise GlispError(f"{self.url}/{name}: no entry for vertex ids {bad} (incomplete index)")
        return out
