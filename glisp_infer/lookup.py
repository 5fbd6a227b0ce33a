"""Embeddings by original id for a serving process: :class:`EmbeddingLookup`.

A recommendation or fraud service keeps one reader for its life and asks it for batches of ids::

    from glisp_infer.lookup import EmbeddingLookup

    lookup = EmbeddingLookup("g", run="m-pds", root="s3://bucket/glisp")  # follows the graph's LATEST
    emb = lookup.get(["u1", "u7", "u42"])       # (3, d) float32, rows in the order asked
    lookup.version                               # the version that answered

What it holds per version: the run's id map (original id -> row, from the stage's ``index/`` Parquet, as a
pandas hash index: one vectorized probe per batch), the open Zarr array of the layer, and an LRU of decoded
chunks (``cache_bytes``), so that a batch costs a hash probe and a gather once its chunks are in memory. Each
call checks ``LATEST`` at most every ``recheck_s`` seconds (one small read); only when it names another version
does the reader open that version's run (the id map and the array) and swap it in whole, so a call never sees
half of each. Calls may come from several threads. Unknown ids are an error naming them, or NaN rows with
``missing="nan"``.
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np

from glisp_core.dataset.layout import ORIG_ID, VTYPE, DatasetVersion, resolve_dataset
from glisp_core.dataset.manifest import read_manifest
from glisp_core.dataset.versions import read_latest
from glisp_core.errors import GlispError, StageError
from glisp_core.storage.store import store_for
from glisp_infer.store import layer_name, open_array, store_url

SEP = "\x1f"  # between vertex type and original id in the typed key


class _Version:
    """One version's run: the id index, the array and its chunk cache (immutable but for the cache)."""

    def __init__(self, dv: DatasetVersion, run: str | None, layer: int, cache_bytes: int) -> None:
        import pandas as pd

        man = read_manifest(dv)
        name = run or man.latest_run("infer")
        if name is None:
            raise StageError(f"{dv}: no inference run published; run 'glisp infer' first")
        rec = man.stage(f"infer/{name}")
        self.dv, self.run = dv, name
        path = dv.path / rec.path
        store = store_for(path / "index")
        t = store.read_table(path / "index", columns=[ORIG_ID, VTYPE, "row"]).to_pandas()
        orig = t[ORIG_ID].astype(str)
        self.rows = t["row"].to_numpy(np.int64)
        self.typed = pd.Index((t[VTYPE].astype(str) + SEP + orig).to_numpy(object))
        dup = orig.duplicated(keep=False).to_numpy()
        self.by_id = pd.Index(orig.to_numpy(object)[~dup])
        self.by_id_rows = self.rows[~dup]
        self.ambiguous = set(orig[dup])
        layers = int(rec.counts["layers"])
        self.arr = open_array(store_url(dv, path), layer_name(layer % (layers + 1)))
        self.chunk_rows = int(self.arr.chunks[0])
        self.dim = int(self.arr.shape[1])
        self.cache: OrderedDict[int, np.ndarray] = OrderedDict()
        self.cache_chunks = max(1, cache_bytes // max(1, self.chunk_rows * self.dim * 4))
        self.lock = threading.Lock()

    def row_of(self, ids: Sequence[Any], vtype: str | None) -> np.ndarray:
        """Rows of ``ids`` (-1 where unknown); an id of several types without ``vtype`` is an error."""
        keys = np.array([str(x) for x in ids], object)
        if vtype is not None:
            pos = self.typed.get_indexer(np.array([f"{vtype}{SEP}{k}" for k in keys], object))
            return np.where(pos >= 0, self.rows[pos], -1)
        many = [k for k in keys[:1000] if k in self.ambiguous] if self.ambiguous else []
        if many:
            raise GlispError(f"ids {many[:3]} name vertices of several types; pass vtype=")
        pos = self.by_id.get_indexer(keys)
        return np.where(pos >= 0, self.by_id_rows[pos], -1)

    def gather(self, rows: np.ndarray) -> np.ndarray:
        """The array's ``rows``, each chunk decoded once and kept (LRU) for later calls."""
        out = np.empty((len(rows), self.dim), np.float32)
        chunk = rows // self.chunk_rows
        for c in np.unique(chunk).tolist():
            sel = np.flatnonzero(chunk == c)
            out[sel] = self._chunk(c)[rows[sel] - c * self.chunk_rows]
        return out

    def _chunk(self, c: int) -> np.ndarray:
        with self.lock:
            got = self.cache.get(c)
            if got is not None:
                self.cache.move_to_end(c)
                return got
        block = np.asarray(self.arr[c * self.chunk_rows : (c + 1) * self.chunk_rows], np.float32)
        with self.lock:
            self.cache[c] = block
            while len(self.cache) > self.cache_chunks:
                self.cache.popitem(last=False)
        return block


class EmbeddingLookup:
    """Batches of original ids -> rows of an inference run's layer, following the graph's ``LATEST``.

    ``graph``: a graph name under ``root``, a graph's directory or URI, or one version (then it is pinned:
    ``follow=False``). ``run``: the inference run (default: each version's latest). ``layer``: default the last.
    """

    def __init__(
        self,
        graph: str | os.PathLike[str],
        run: str | None = None,
        root: str | os.PathLike[str] = "data",
        layer: int = -1,
        recheck_s: float = 1.0,
        cache_bytes: int = 1 << 30,
        follow: bool = True,
    ) -> None:
        dv = resolve_dataset(graph, root)
        self.graph_dir = dv.path.parent
        self.run, self.layer, self.recheck_s, self.cache_bytes = run, layer, recheck_s, cache_bytes
        self.follow = follow
        self.opens = 0  # versions opened so far (the first included)
        self._state = self._open(dv)
        self._checked = time.monotonic()
        self._swap = threading.Lock()

    def _open(self, dv: DatasetVersion) -> _Version:
        st = _Version(dv, self.run, self.layer, self.cache_bytes)
        self.opens += 1
        return st

    @property
    def version(self) -> str:
        return self._state.dv.version

    def refresh(self) -> bool:
        """Re-read ``LATEST`` now; open its version if it moved. Returns whether it did."""
        self._checked = time.monotonic()
        v = read_latest(self.graph_dir)
        if not v or v == self._state.dv.version:
            return False
        with self._swap:
            if v != self._state.dv.version:
                self._state = self._open(DatasetVersion(self.graph_dir.parent, self.graph_dir.name, v))
        return True

    def get(self, ids: Sequence[Any], vtype: str | None = None, missing: str = "error") -> np.ndarray:
        """(len(ids), d) float32 rows in the order asked; ``missing="nan"`` gives NaN rows for unknown ids."""
        if self.follow and time.monotonic() - self._checked >= self.recheck_s:
            self.refresh()
        st = self._state  # one version answers the whole batch
        rows = st.row_of(ids, vtype)
        bad = rows < 0
        if bad.any() and missing != "nan":
            gone = [str(ids[i]) for i in np.flatnonzero(bad)[:3]]
            raise GlispError(
                f"{st.dv}/infer/{st.run}: {int(bad.sum())} ids are not vertices of the graph (got e.g. {gone})"
            )
        out = st.gather(np.where(bad, 0, rows))
        out[bad] = np.nan
        return out
