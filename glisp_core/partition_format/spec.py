"""The on-disk GLISP partition format: version, fields, dtypes and the meta.json schema.

One partition is a directory ``part-NNNNN/`` holding one raw little-endian C-contiguous file per
field (``<field>.bin``) and ``meta.json``. The reader memory-maps each file; nothing is parsed. The
writer picks the narrowest integer dtype per field, so the dtype of a field is recorded per
partition in meta.json and never assumed (see docs/format.md for the full description).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

FORMAT_NAME = "glisp-partition"
FORMAT_VERSION = 1
SUPPORTED_VERSIONS = (1,)  # versions this reader opens; anything else is a FormatError
META_FILE = "meta.json"
CHECKSUM_ALGO = "sha256"
EDGE_ID_SHIFT = 40  # global edge id = (part_id << EDGE_ID_SHIFT) | edge_local_id


@dataclass(frozen=True)
class FieldSpec:
    """One array of a partition: its name, allowed dtypes, shape in words, footprint group, and meaning."""

    name: str
    dtypes: tuple[str, ...]  # allowed numpy dtype strings (little-endian); the writer picks the narrowest
    shape: str  # in terms of n (local vertices), m (local edges), t (type segments), r (vtype runs), k, d, P
    group: str  # "structure" | "edge_attr" | "vertex_data"
    optional: bool
    meaning: str

    @property
    def file(self) -> str:
        return f"{self.name}.bin"


_IDX = ("<i4", "<i8")
FIELDS: tuple[FieldSpec, ...] = (
    FieldSpec("global_id", ("<i8",), "(n,)", "structure", False, "sorted global ids; local id = position"),
    FieldSpec("out_indptr", _IDX, "(n+1,)", "structure", False, "out-CSR offsets over edge local ids"),
    FieldSpec("out_nbr", _IDX, "(m,)", "structure", False, "local id of each edge's dst, sorted by (src, etype, dst)"),
    FieldSpec("in_indptr", _IDX, "(n+1,)", "structure", False, "in-CSR offsets into in_eid"),
    FieldSpec("in_eid", _IDX, "(m,)", "structure", False, "edge local ids grouped by dst, sorted by (dst, etype, src)"),
    FieldSpec("out_type_ptr", _IDX, "(n+1,)", "structure", True, "per vertex: its segment range in out_type_ids/end"),
    FieldSpec("out_type_ids", ("<i2", "<i4"), "(t_out,)", "structure", True, "edge type of each out segment"),
    FieldSpec("out_type_end", _IDX, "(t_out,)", "structure", True, "exclusive end edge local id of each out segment"),
    FieldSpec("in_type_ptr", _IDX, "(n+1,)", "structure", True, "per vertex: its segment range in in_type_ids/end"),
    FieldSpec("in_type_ids", ("<i2", "<i4"), "(t_in,)", "structure", True, "edge type of each in segment"),
    FieldSpec("in_type_end", _IDX, "(t_in,)", "structure", True, "exclusive end position in in_eid of each segment"),
    FieldSpec("out_degree", _IDX, "(n,)", "structure", False, "GLOBAL out-degree of each local vertex"),
    FieldSpec("in_degree", _IDX, "(n,)", "structure", False, "GLOBAL in-degree of each local vertex"),
    FieldSpec("partition_bits", ("|u1",), "(n, ceil(P/8))", "structure", False, "bit k (little) = replica on part k"),
    FieldSpec("master", ("<i2", "<i4"), "(n,)", "structure", False, "master partition of each local vertex"),
    FieldSpec("vtype_start", _IDX, "(r,)", "structure", False, "first local id of each run of equal vertex type"),
    FieldSpec("vtype_code", ("<i2", "<i4"), "(r,)", "structure", False, "vertex type code of each run"),
    FieldSpec("weight", ("<f4",), "(m,)", "edge_attr", True, "edge weight by edge local id"),
    FieldSpec("timestamp", ("<i8",), "(m,)", "edge_attr", True, "edge timestamp by edge local id"),
    FieldSpec(
        "features", ("<f4",), "(k, d)", "vertex_data", True, "features of the vertices mastered here, in local id order"
    ),
    FieldSpec("labels", ("<i8",), "(k,)", "vertex_data", True, "labels of the mastered vertices, -1 = none"),
    FieldSpec("split", ("|i1",), "(k,)", "vertex_data", True, "0 train, 1 val, 2 test, -1 none"),
)
FIELD_BY_NAME: dict[str, FieldSpec] = {f.name: f for f in FIELDS}
TYPE_INDEX_FIELDS = ("out_type_ptr", "out_type_ids", "out_type_end", "in_type_ptr", "in_type_ids", "in_type_end")

# master_gids (the rows of features/labels/split) is not stored: it is global_id[master == part_id].

# meta.json top-level keys (all required unless noted):
META_KEYS = {
    "format": "str, always 'glisp-partition'",
    "format_version": "int, FORMAT_VERSION of the writer",
    "part_id": "int, this partition",
    "num_parts": "int, P",
    "num_vertices": "int, n: local vertices (replicas + isolated vertices mastered here)",
    "num_edges": "int, m: local directed edges",
    "num_master": "int, k: vertices whose master is this partition",
    "edge_types": "list[str], etype code -> name (global, same in every partition)",
    "vertex_types": "list[str], vtype code -> name",
    "directed": "bool, from the ingest schema",
    "weighted": "bool, weight field present",
    "timestamped": "bool, timestamp field present",
    "feature_dim": "int, d (0 = no features field)",
    "type_index": "bool, the *_type_* fields are stored (false when the graph has one edge type)",
    "edge_id_shift": "int, global edge id = (part_id << edge_id_shift) | edge local id",
    "checksum_algo": "str, 'sha256' over each field's file bytes",
    "fields": "{name: {file, dtype, shape, nbytes, checksum}} for every stored field",
    "extra": "dict, optional free-form provenance (stage, run, master rule)",
}


def index_dtype(max_value: int) -> np.dtype:
    """Narrowest of int32/int64 holding ``max_value`` (offsets, local ids, degrees)."""
    return np.dtype("<i4") if max_value < 2**31 else np.dtype("<i8")


def code_dtype(max_value: int) -> np.dtype:
    """Narrowest of int16/int32 for small codes (edge/vertex types, partition ids)."""
    return np.dtype("<i2") if max_value < 2**15 else np.dtype("<i4")


def bits_width(num_parts: int) -> int:
    return (num_parts + 7) // 8
