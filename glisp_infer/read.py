"""Read the embeddings and predictions of an inference run by the user's own vertex ids::

    from glisp_infer.read import InferenceRun, read_embeddings, read_predictions
    run = InferenceRun.open("cora", root="data")        # the latest infer/<run> of the latest version under data/
    emb = run.embeddings([31336, 1061127])               # (2, d) float32, rows in the order asked
    h1 = run.embeddings(ids, layer=1)                    # any layer; 0 = the features
    run.layer(2)                                         # the zarr.Array itself
    read_embeddings("cora", [31336], root="data")        # one call each
    read_predictions("cora", [31336, 1061127], root="data")  # pandas: orig_id, vtype, vid, label, prediction, score

``root`` is the dataset root (``dataset.root``, default ``data``); ``dataset`` a graph name, graph/version or a
version directory.

Ids are the original ids of ingest (strings or integers); on a graph with several vertex types, pass
``vtype`` when an id names vertices of several types. Unknown or ambiguous ids are an error that
names them.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from glisp_core.dataset.layout import ORIG_ID, VID, VTYPE, DatasetVersion, resolve_dataset
from glisp_core.dataset.manifest import read_manifest
from glisp_core.errors import GlispError, StageError
from glisp_core.storage.store import store_for
from glisp_infer.store import layer_name, open_array, read_rows


class InferenceRun:
    """A published ``infer/<run>`` stage."""

    def __init__(self, dv: DatasetVersion, run: str) -> None:
        from glisp_infer.store import store_url

        self.dv, self.run = dv, run
        rec = read_manifest(dv).stage(f"infer/{run}")
        self.record = rec
        self.path = dv.path / rec.path
        self.url = store_url(dv, self.path)
        self.layers = int(rec.counts["layers"])

    @classmethod
    def open(cls, dataset: str | os.PathLike[str], run: str | None = None, root: str = "data") -> InferenceRun:
        dv = resolve_dataset(dataset, root)
        if run is None:
            run = read_manifest(dv).latest_run("infer")
            if run is None:
                raise StageError(f"{dv}: no inference run published; run 'glisp infer' first")
        return cls(dv, run)

    def layer(self, i: int = -1) -> Any:
        """The Zarr array of layer ``i`` (negative counts from the last)."""
        i = i % (self.layers + 1)
        return open_array(self.url, layer_name(i))

    def rows(self, ids: Sequence[Any], vtype: str | None = None) -> np.ndarray:
        """The row of each original id, in the order given."""
        import pyarrow.compute as pc
        import pyarrow.dataset as ds

        keys = [str(x) for x in ids]
        index = self.path / "index"
        store = store_for(index)
        tbl = ds.dataset(store.at(index), filesystem=store.fs, format="parquet")
        flt = pc.field(ORIG_ID).cast("string").isin(keys)
        if vtype is not None:
            flt = flt & (pc.field(VTYPE) == vtype)
        t = tbl.to_table(columns=[ORIG_ID, VTYPE, "row"], filter=flt)
        found: dict[str, list[int]] = {}
        for k, r in zip(t.column(ORIG_ID).cast("string").to_pylist(), t.column("row").to_pylist(), strict=True):
            found.setdefault(k, []).append(int(r))
        missing = [k for k in keys if k not in found]
        if missing:
            raise GlispError(
                f"{self.path / 'index'}: {len(missing)} ids are not vertices of the graph (got e.g. {missing[:3]})"
            )
        many = [k for k in keys if len(found[k]) > 1]
        if many:
            raise GlispError(f"ids {many[:3]} name vertices of several types; pass vtype=")
        return np.array([found[k][0] for k in keys], np.int64)

    def predictions(self, ids: Sequence[Any] | None = None, vtype: str | None = None) -> Any:
        """The rows of ``predictions/`` (node task) for original ``ids`` in the order asked (all rows for None), as a
        pandas DataFrame with the columns of ``glisp_core.dataset.layout.PREDICTION_COLUMNS``; ``orig_id`` keeps the
        ingest's id type. Ids are matched whatever their Python type (``17`` and ``"17"`` name the same vertex)."""
        import pyarrow.dataset as ds

        path = self.path / "predictions"
        store = store_for(path)
        if not store.is_dir(path):
            raise StageError(f"{self.path}: no predictions/ (a {self.record.params.get('task')} task run)")
        t = ds.dataset(store.at(path), filesystem=store.fs, format="parquet").to_table()
        if ids is None:
            return t.to_pandas().sort_values(VID).reset_index(drop=True)
        want = self.vids(ids, vtype)
        df = t.to_pandas().set_index(VID, drop=False)
        return df.loc[want].reset_index(drop=True)

    def vids(self, ids: Sequence[Any], vtype: str | None = None) -> np.ndarray:
        """The dense vertex id of each original id, in the order given."""
        import pyarrow.compute as pc
        import pyarrow.dataset as ds

        keys = [str(x) for x in ids]
        index = self.path / "index"
        store = store_for(index)
        flt = pc.field(ORIG_ID).cast("string").isin(keys)
        if vtype is not None:
            flt = flt & (pc.field(VTYPE) == vtype)
        t = ds.dataset(store.at(index), filesystem=store.fs, format="parquet").to_table(
            columns=[ORIG_ID, VID], filter=flt
        )
        found = dict(zip(t.column(ORIG_ID).cast("string").to_pylist(), t.column(VID).to_pylist(), strict=False))
        missing = [k for k in keys if k not in found]
        if missing:
            raise GlispError(f"{index}: {len(missing)} ids are not vertices of the graph (got e.g. {missing[:3]})")
        return np.array([found[k] for k in keys], np.int64)

    def embeddings(self, ids: Sequence[Any], layer: int = -1, vtype: str | None = None) -> np.ndarray:
        """Rows of layer ``layer`` (default: the last) for the original ids ``ids``."""
        vals, _ = read_rows(self.layer(layer), self.rows(ids, vtype))
        return vals


def read_embeddings(
    dataset: str | os.PathLike[str],
    ids: Sequence[Any],
    run: str | None = None,
    layer: int = -1,
    root: str | Path = "data",
    vtype: str | None = None,
) -> np.ndarray:
    """One call: the embeddings of original ``ids`` from an inference run (see :class:`InferenceRun`); ``root`` is
    the dataset root (``dataset.root``)."""
    return InferenceRun.open(dataset, run, str(root)).embeddings(ids, layer, vtype)


def read_predictions(
    dataset: str | os.PathLike[str],
    ids: Sequence[Any] | None = None,
    run: str | None = None,
    root: str | Path = "data",
    vtype: str | None = None,
) -> Any:
    """One call: the predictions of original ``ids`` (all for None) as a pandas DataFrame (see
    :meth:`InferenceRun.predictions`); ``root`` is the dataset root (``dataset.root``)."""
    return InferenceRun.open(dataset, run, str(root)).predictions(ids, vtype)
