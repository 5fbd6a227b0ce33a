"""Open a serialized partition with np.memmap and answer vectorised structure queries.

``open_partition`` checks meta.json (format name and version), that every field file exists with
exactly the recorded size, and (``verify=True``) each file's checksum; any mismatch is a
FormatError naming the file. Queries are O(1) (CSR offsets) or O(log n) (binary search) per vertex;
the type-restricted ranges scan a vertex's few type segments in a numba kernel.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from glisp_core.errors import FormatError
from glisp_core.partition_format.spec import (
    FIELD_BY_NAME,
    FORMAT_NAME,
    FORMAT_VERSION,
    META_FILE,
    SUPPORTED_VERSIONS,
    TYPE_INDEX_FIELDS,
)

_SORTED_LOOKUP_MIN = 512  # positions_in sorts a batch at least this long before the binary search


def positions_in(table: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Position of each of ``ids`` in the sorted, unique ``table``; -1 where absent.

    A large batch is looked up in sorted order: numpy's binary search starts from the previous answer
    when the keys ascend, and the probes then walk ``table`` in order. On a 131k-vertex partition,
    77k random ids take 4.7 ms this way against 12.7 ms unsorted, sort included.
    """
    g = np.asarray(ids, np.int64)
    n = len(table)
    if n == 0:
        return np.full(g.shape, -1, np.int64)
    flat = g.reshape(-1)
    order = np.argsort(flat) if flat.size >= _SORTED_LOOKUP_MIN else None
    keys = flat if order is None else flat[order]
    pos = np.minimum(np.searchsorted(table, keys), n - 1)
    found = np.where(table[pos] == keys, pos, -1).astype(np.int64, copy=False)
    if order is not None:
        out = np.empty_like(found)
        out[order] = found
        found = out
    return found.reshape(g.shape)


_REQUIRED_META = ("part_id", "num_parts", "num_vertices", "num_edges", "edge_types", "vertex_types", "fields")


def _hash_file(path: Path, algo: str) -> str:
    h = hashlib.new(algo)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 23), b""):
            h.update(block)
    return h.hexdigest()


class PartitionReader:
    """Read-only view of one partition; array attributes are np.memmap views (see CONTRACTS.md)."""

    def __init__(self, path: str | os.PathLike[str], verify: bool = True) -> None:
        self.path = Path(path)
        meta_path = self.path / META_FILE
        try:
            meta = json.loads(meta_path.read_text())
        except FileNotFoundError:
            raise FormatError(
                f"{meta_path}: partition meta file not found (is {self.path} a serialized partition?)"
            ) from None
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise FormatError(f"{meta_path}: not valid JSON ({e})") from None
        if not isinstance(meta, dict) or meta.get("format") != FORMAT_NAME:
            got = meta.get("format") if isinstance(meta, dict) else type(meta).__name__
            raise FormatError(f"{meta_path}: expected format {FORMAT_NAME!r} (got {got!r})")
        ver = meta.get("format_version")
        if ver not in SUPPORTED_VERSIONS:
            raise FormatError(
                f"{meta_path}: format version {ver!r}, this reader supports {', '.join(map(str, SUPPORTED_VERSIONS))}; "
                "re-run 'glisp serialize'"
            )
        missing = [k for k in _REQUIRED_META if k not in meta]
        if missing:
            raise FormatError(f"{meta_path}: missing keys {missing} (got keys {sorted(meta)})")
        self.meta: dict[str, Any] = meta
        self.format_version: int = int(ver)
        self.part_id: int = int(meta["part_id"])
        self.num_parts: int = int(meta["num_parts"])
        self.num_vertices: int = int(meta["num_vertices"])
        self.num_edges: int = int(meta["num_edges"])
        self.edge_type_names: list[str] = list(meta["edge_types"])
        self.vertex_type_names: list[str] = list(meta["vertex_types"])
        self.num_edge_types: int = len(self.edge_type_names)
        self.weighted: bool = bool(meta.get("weighted", False))
        self.timestamped: bool = bool(meta.get("timestamped", False))
        self.feature_dim: int = int(meta.get("feature_dim", 0))
        self.directed: bool = bool(meta.get("directed", True))
        self.edge_id_shift: int = int(meta.get("edge_id_shift", 40))
        self._arrays: dict[str, np.ndarray] = {}
        algo = meta.get("checksum_algo", "sha256")
        for name, fm in meta["fields"].items():
            self._arrays[name] = self._open_field(name, fm, algo, verify)
        required = [f.name for f in FIELD_BY_NAME.values() if not f.optional]
        if meta.get("type_index"):
            required += list(TYPE_INDEX_FIELDS)
        absent = [f for f in required if f not in self._arrays]
        if absent:
            raise FormatError(f"{meta_path}: required fields {absent} are not listed (got {sorted(self._arrays)})")
        self._check_shapes(meta_path)
        a = self._arrays
        self.global_id = a["global_id"]
        self.out_indptr, self.out_nbr = a["out_indptr"], a["out_nbr"]
        self.in_indptr, self.in_eid = a["in_indptr"], a["in_eid"]
        self.out_degree, self.in_degree = a["out_degree"], a["in_degree"]
        self.partition_bits = a["partition_bits"]
        self.master: np.ndarray | None = a.get("master")
        self.vtype_start, self.vtype_code = a["vtype_start"], a["vtype_code"]
        self.weight: np.ndarray | None = a.get("weight")
        self.timestamp: np.ndarray | None = a.get("timestamp")
        self.num_master: int = int(meta.get("num_master", 0))
        self._master_gids: np.ndarray | None = None
        self.features: np.ndarray | None = a.get("features")
        self.labels: np.ndarray | None = a.get("labels")
        self.split: np.ndarray | None = a.get("split")
        self.has_type_index = bool(meta.get("type_index")) and "out_type_ptr" in a
        self._implicit: dict[str, np.ndarray] = {}

    # ---------------------------------------------------------------- loading
    def _open_field(self, name: str, fm: dict[str, Any], algo: str, verify: bool) -> np.ndarray:
        spec = FIELD_BY_NAME.get(name)
        fpath = self.path / str(fm.get("file", f"{name}.bin"))
        if spec is None:
            raise FormatError(f"{fpath}: unknown field {name!r} for format version {self.format_version}")
        try:
            dtype = np.dtype(fm["dtype"])
            shape = tuple(int(x) for x in fm["shape"])
            nbytes = int(fm["nbytes"])
        except (KeyError, TypeError, ValueError) as e:
            raise FormatError(f"{fpath}: bad field entry in meta.json ({e!r})") from None
        if dtype.str not in spec.dtypes:
            raise FormatError(f"{fpath}: dtype {dtype.str} not allowed for field {name!r} (expected {spec.dtypes})")
        if int(np.prod(shape, dtype=np.int64)) * dtype.itemsize != nbytes:
            raise FormatError(f"{fpath}: shape {shape} x {dtype.str} does not match nbytes {nbytes}")
        try:
            size = fpath.stat().st_size
        except FileNotFoundError:
            raise FormatError(f"{fpath}: field file {name!r} is missing") from None
        if size != nbytes:
            raise FormatError(f"{fpath}: field {name!r} is truncated or padded: expected {nbytes} bytes (got {size})")
        if verify and "checksum" in fm:
            got = _hash_file(fpath, algo)
            if got != fm["checksum"]:
                raise FormatError(
                    f"{fpath}: checksum mismatch for field {name!r}: the file is corrupt (got {algo} {got[:16]}...)"
                )
        if nbytes == 0:
            arr = np.zeros(shape, dtype)
            arr.flags.writeable = False
            return arr
        return np.memmap(fpath, dtype=dtype, mode="r", shape=shape)

    def _check_shapes(self, meta_path: Path) -> None:
        n, m = self.num_vertices, self.num_edges
        a = self._arrays
        want = {
            "global_id": (n,),
            "out_indptr": (n + 1,),
            "out_nbr": (m,),
            "in_indptr": (n + 1,),
            "in_eid": (m,),
            "out_degree": (n,),
            "in_degree": (n,),
            "master": (n,),
            "weight": (m,),
            "timestamp": (m,),
            "partition_bits": (n, (self.num_parts + 7) // 8),
            "out_type_ptr": (n + 1,),
            "in_type_ptr": (n + 1,),
        }
        k = int(self.meta.get("num_master", 0))
        want.update(labels=(k,), split=(k,), features=(k, self.feature_dim))
        for name, shape in want.items():
            if name in a and a[name].shape != shape:
                raise FormatError(f"{self.path / FIELD_BY_NAME[name].file}: shape {a[name].shape}, expected {shape}")

    # ---------------------------------------------------------------- ids
    def to_local(self, gids: np.ndarray) -> np.ndarray:
        """Local id of each global id, -1 where absent."""
        return positions_in(self.global_id, gids)

    def to_global(self, lids: np.ndarray) -> np.ndarray:
        return np.asarray(self.global_id[np.asarray(lids, np.int64)], np.int64)

    def edge_global_id(self, eids: np.ndarray) -> np.ndarray:
        """Global edge id ``(part_id << 40) | edge local id``; the Parquet copy maps it to the ingest eid."""
        return (np.int64(self.part_id) << np.int64(self.edge_id_shift)) | np.asarray(eids, np.int64)

    # ---------------------------------------------------------------- type index (implicit for 1 type)
    def _implicit_index(self, side: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One edge type: a vertex with edges has a single segment (type 0, ending at its CSR end)."""
        key = f"{side}_type_ptr"
        if key not in self._implicit:
            indptr = np.asarray(self.out_indptr if side == "out" else self.in_indptr, np.int64)
            has = np.diff(indptr) > 0
            ptr = np.zeros(self.num_vertices + 1, np.int64)
            np.cumsum(has, out=ptr[1:])
            self._implicit[key] = ptr
            self._implicit[f"{side}_type_ids"] = np.zeros(int(ptr[-1]), np.int16)
            self._implicit[f"{side}_type_end"] = indptr[1:][has]
        return self._implicit[key], self._implicit[f"{side}_type_ids"], self._implicit[f"{side}_type_end"]

    def _index(self, side: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if self.has_type_index:
            a = self._arrays
            return a[f"{side}_type_ptr"], a[f"{side}_type_ids"], a[f"{side}_type_end"]
        return self._implicit_index(side)

    @property
    def out_type_ptr(self) -> np.ndarray:
        return self._index("out")[0]

    @property
    def out_type_ids(self) -> np.ndarray:
        return self._index("out")[1]

    @property
    def out_type_end(self) -> np.ndarray:
        return self._index("out")[2]

    @property
    def in_type_ptr(self) -> np.ndarray:
        return self._index("in")[0]

    @property
    def in_type_ids(self) -> np.ndarray:
        return self._index("in")[1]

    @property
    def in_type_end(self) -> np.ndarray:
        return self._index("in")[2]

    def _type_index_of(self, side: str, lids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        ptr, ids, end = self._index(side)
        lids = np.asarray(lids, np.int64)
        lo, hi = np.asarray(ptr[lids], np.int64), np.asarray(ptr[lids + 1], np.int64)
        cnt = hi - lo
        out_ptr = np.zeros(len(lids) + 1, np.int64)
        np.cumsum(cnt, out=out_ptr[1:])
        take = np.repeat(lo - out_ptr[:-1], cnt) + np.arange(out_ptr[-1])
        return out_ptr, np.asarray(ids[take], np.int32), np.asarray(end[take], np.int64)

    def type_index(self, side: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The whole type index of ``side`` ("out"/"in") as ``(ptr, type_ids, type_end)``: vertex v's
        type segments are ``ptr[v]:ptr[v+1]`` (implicit for a one-type partition)."""
        return self._index(side)

    def out_type_index(self, lids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For each vertex: its edge types present and their cumulative end offsets, as a CSR
        ``(ptr (len+1,), type_ids, type_end)``: vertex i's segments are ``ptr[i]:ptr[i+1]``."""
        return self._type_index_of("out", lids)

    def in_type_index(self, lids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """As out_type_index, with ends as positions into ``in_eid``."""
        return self._type_index_of("in", lids)

    # ---------------------------------------------------------------- ranges
    def _range(self, side: str, lids: np.ndarray, etype: int | None) -> tuple[np.ndarray, np.ndarray]:
        lids = np.asarray(lids, np.int64)
        indptr = self.out_indptr if side == "out" else self.in_indptr
        if etype is None:
            safe = np.where(lids < 0, 0, lids)
            start = np.asarray(indptr[safe], np.int64)
            end = np.asarray(indptr[safe + 1], np.int64)
            neg = lids < 0
            if neg.any():
                start[neg] = 0
                end[neg] = 0
            return start, end
        if not self.has_type_index:
            start, end = self._range(side, lids, None)
            if etype != 0:
                end = start.copy()
            return start, end
        from glisp_core.partition_format.kernels import typed_range

        ptr, ids, tend = self._index(side)
        return typed_range(lids, np.int64(etype), indptr, ptr, ids, tend)

    def out_range(self, lids: np.ndarray, etype: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """[start, end) edge local ids of the out-edges (of type ``etype``) of each vertex; empty for lid -1."""
        return self._range("out", lids, etype)

    def in_range(self, lids: np.ndarray, etype: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """[start, end) positions into ``in_eid`` of the in-edges (of type ``etype``) of each vertex."""
        return self._range("in", lids, etype)

    def edge_src(self, eids: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.out_indptr, np.asarray(eids, np.int64), side="right").astype(np.int64) - 1

    def edge_dst(self, eids: np.ndarray) -> np.ndarray:
        return np.asarray(self.out_nbr[np.asarray(eids, np.int64)], np.int64)

    def edge_type(self, eids: np.ndarray) -> np.ndarray:
        eids = np.asarray(eids, np.int64)
        if not self.has_type_index:
            return np.zeros(len(eids), np.int32)
        from glisp_core.partition_format.kernels import edge_type_of

        ptr, ids, end = self._index("out")
        return edge_type_of(eids, self.edge_src(eids), ptr, ids, end)

    # ---------------------------------------------------------------- vertices
    def replicas(self, lids: np.ndarray) -> np.ndarray:
        bits = np.asarray(self.partition_bits[np.asarray(lids, np.int64)])
        return np.unpackbits(bits, axis=1, bitorder="little", count=self.num_parts).astype(bool)

    def vertex_type(self, lids: np.ndarray) -> np.ndarray:
        run = np.searchsorted(self.vtype_start, np.asarray(lids, np.int64), side="right") - 1
        return np.asarray(self.vtype_code[run], np.int32)

    @property
    def master_gids(self) -> np.ndarray:
        """Sorted global ids mastered here (= rows of features/labels/split); derived, not stored."""
        if self._master_gids is None:
            mg = np.asarray(self.global_id[np.asarray(self.master) == self.part_id])
            if len(mg) != self.num_master:
                raise FormatError(
                    f"{self.path / 'master.bin'}: {len(mg)} vertices have master {self.part_id}, "
                    f"meta.json says num_master = {self.num_master}"
                )
            mg.flags.writeable = False
            self._master_gids = mg
        return self._master_gids

    def feature_rows(self, gids: np.ndarray) -> np.ndarray:
        """Row of each global id in the features/labels arrays, -1 where not mastered here."""
        return positions_in(self.master_gids, gids)

    def file_bytes(self) -> dict[str, int]:
        return {name: int(fm["nbytes"]) for name, fm in self.meta["fields"].items()}

    def __repr__(self) -> str:
        return (
            f"PartitionReader({str(self.path)!r}, part {self.part_id}/{self.num_parts}, "
            f"{self.num_vertices:,} vertices, {self.num_edges:,} edges)"
        )


def open_partition(path: str | os.PathLike[str], verify: bool = True) -> PartitionReader:
    """Open ``serialize/<run>/part-NNNNN``; ``verify=False`` skips hashing (sizes and version are still checked)."""
    return PartitionReader(path, verify=verify)


__all__ = ["FORMAT_VERSION", "PartitionReader", "open_partition"]
