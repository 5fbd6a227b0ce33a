"""Original ids <-> vertex ids through ``ingest/idmap``, so that users speak their own ids at the edges.

Ingest maps every (vertex type, original id) to a dense ``vid``; training, the sampling service and
inference work on vids. :class:`IdMap` is the way back and forth::

    ids = IdMap.load(dv)
    vids = ids.to_vids(["paper-17", "paper-4"])      # IdError naming unknown ids
    ids.to_orig(vids)                                # array(['paper-17', 'paper-4'], dtype=object)

Original ids are strings or integers (``schema.id_type``); integers given for a string-id graph (or
digit strings for an integer-id graph) are converted, anything else is an error, never a guess. In a
typed graph the same original id may name vertices of several types: pass ``vertex_type`` then.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from glisp_core.dataset.layout import ORIG_ID, VID, VTYPE, DatasetVersion
from glisp_core.dataset.manifest import read_manifest
from glisp_core.errors import GlispError

if TYPE_CHECKING:
    import pyarrow as pa


class IdError(GlispError):
    """Original ids that the dataset does not have, or that are ambiguous across vertex types."""


def _examples(values: Sequence[Any], k: int = 3) -> str:
    return ", ".join(repr(v) for v in list(values)[:k])


@dataclass
class IdMap:
    orig: Any  # pyarrow Array of original ids, indexed by vid (string or int64)
    vtype: np.ndarray  # int32 vertex type code per vid
    vertex_types: list[str]
    id_type: str  # "int" | "string"
    unique: bool  # every original id names one vertex (no id shared by two vertex types)
    source: str = "ingest/idmap"

    @classmethod
    def load(cls, dv: DatasetVersion) -> IdMap:
        """Read ``ingest/idmap`` (vid, orig_id, vtype) of a published dataset version."""
        import pyarrow.compute as pc

        schema = read_manifest(dv).schema
        t = dv.store.read_table(dv.idmap, columns=[VID, ORIG_ID, VTYPE]).sort_by(VID)  # any store
        n = len(t)
        vid = t[VID].to_numpy()
        if n and not (vid[0] == 0 and vid[-1] == n - 1):
            raise GlispError(f"{dv.idmap}: vids are not dense 0..{n - 1} (got {vid[0]}..{vid[-1]})")
        orig = t[ORIG_ID].combine_chunks()
        return cls(
            orig=orig,
            vtype=t[VTYPE].to_numpy().astype(np.int32),
            vertex_types=list(schema.get("vertex_types") or ["v0"]),
            id_type=str(schema.get("id_type", "string")),
            unique=pc.count_distinct(orig).as_py() == n,
            source=str(dv.idmap),
        )

    @property
    def num_vertices(self) -> int:
        return len(self.orig)

    def _as_orig_type(self, ids: Any) -> pa.Array:
        import pyarrow as pa

        arr = pa.array(list(ids) if not isinstance(ids, (pa.Array, np.ndarray)) else ids)
        want = self.orig.type
        if arr.type == want:
            return arr
        if pa.types.is_floating(arr.type) or pa.types.is_boolean(arr.type):
            raise IdError(
                f"original ids: expected {self.id_type} ids (got {arr.type}, e.g. {_examples(arr.to_pylist())})"
            )
        try:
            return arr.cast(want)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            raise IdError(
                f"original ids: {self.source} holds {self.id_type} ids; these are not (got e.g. "
                f"{_examples(arr.to_pylist())})"
            ) from None

    def to_vids(self, ids: Any, vertex_type: str | None = None) -> np.ndarray:
        """Vertex ids of original ``ids`` (in order); IdError naming the unknown or ambiguous ones."""
        import pyarrow.compute as pc

        want = self._as_orig_type(ids)
        if vertex_type is not None:
            if vertex_type not in self.vertex_types:
                raise IdError(f"vertex_type: {vertex_type!r} is not one of {self.vertex_types}")
            cand = np.flatnonzero(self.vtype == self.vertex_types.index(vertex_type))
            pos = pc.index_in(want, value_set=self.orig.take(cand)).fill_null(-1).to_numpy()
            out = np.where(pos >= 0, cand[np.maximum(pos, 0)] if len(cand) else -1, -1).astype(np.int64)
        else:
            if not self.unique:
                raise IdError(
                    f"original ids: {self.source} has ids shared by several vertex types "
                    f"({self.vertex_types}); pass vertex_type"
                )
            out = pc.index_in(want, value_set=self.orig).fill_null(-1).to_numpy().astype(np.int64)
        found = out >= 0
        if not found.all():
            missing = want.take(np.flatnonzero(~found)[:3]).to_pylist()
            where = f" of type {vertex_type!r}" if vertex_type else ""
            raise IdError(
                f"original ids: {int((~found).sum())} of {len(want)} are not vertices{where} of this dataset "
                f"({self.source}; got e.g. {_examples(missing)})"
            )
        return out

    def to_orig(self, vids: Any) -> np.ndarray:
        """Original ids of vertex ids (object array of str for string ids, int64 otherwise)."""
        v = np.asarray(vids)
        if v.size and (v.dtype.kind not in "iu" or v.min() < 0 or v.max() >= self.num_vertices):
            raise IdError(
                f"vertex ids: expected integers in [0, {self.num_vertices}) (got e.g. {_examples(v.tolist())})"
            )
        taken = self.orig.take(v.astype(np.int64))
        out: np.ndarray = taken.to_numpy(zero_copy_only=False)
        return out
