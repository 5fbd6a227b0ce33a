"""Build every field of one partition from its edge rows and vertex rows (numpy only), then write it.

Called inside a Spark task (spark_jobs.serialize.build) with one partition's rows; the driver never
holds a partition. All work is vectorised: sorts (one stable argsort of a packed key, :func:`sort_order`),
``bincount``/``cumsum`` for CSR offsets, run-length boundaries for the type index and vertex-type ranges.

The output goes to a local directory or, given a remote :class:`StoreURI`, straight to the store: each
field's bytes are streamed from the array into its object (hashed on the way), so a task never holds a
second copy of a partition nor spills one to its disk. Both ways write the same bytes.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from glisp_core.errors import GlispError
from glisp_core.id_rows import IdRows
from glisp_core.partition_format.spec import (
    CHECKSUM_ALGO,
    EDGE_ID_SHIFT,
    FIELD_BY_NAME,
    FORMAT_NAME,
    FORMAT_VERSION,
    META_FILE,
    bits_width,
    code_dtype,
    index_dtype,
)
from glisp_core.storage.uri import StoreURI


@dataclass
class WrittenPartition:
    """What ``write_partition`` wrote: sizes for the manifest, and the orders for the Parquet copies."""

    part_id: int
    num_vertices: int
    num_edges: int
    num_master: int
    field_bytes: dict[str, int] = field(default_factory=dict)
    edge_order: np.ndarray | None = None  # edge local id -> row index of the input edge arrays
    vertex_order: np.ndarray | None = None  # local id -> row index of the input vertex arrays
    meta_sha256: str = ""  # of the meta.json bytes written (which hold every field's hash)

    @property
    def total_bytes(self) -> int:
        return int(sum(self.field_bytes.values()))

    def summary(self) -> dict[str, Any]:
        return {
            "part": self.part_id,
            "vertices": self.num_vertices,
            "edges": self.num_edges,
            "master": self.num_master,
            "field_bytes": dict(self.field_bytes),
            "total_bytes": self.total_bytes,
            "meta_sha256": self.meta_sha256,
        }


def _segments(key_a: np.ndarray, key_b: np.ndarray) -> np.ndarray:
    """Start positions of runs of equal (key_a, key_b) in arrays already sorted by that pair."""
    m = len(key_a)
    if m == 0:
        return np.zeros(0, np.int64)
    change = np.empty(m, bool)
    change[0] = True
    np.not_equal(key_a[1:], key_a[:-1], out=change[1:])
    change[1:] |= key_b[1:] != key_b[:-1]
    return np.flatnonzero(change)


def _type_index(
    owner: np.ndarray, etype: np.ndarray, n: int, idx_dt: np.dtype, code_dt: np.dtype
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-vertex (types present, cumulative end) index over edges sorted by (owner, etype)."""
    starts = _segments(owner, etype)
    m = len(owner)
    ends = np.append(starts[1:], m) if len(starts) else np.zeros(0, np.int64)
    ptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(owner[starts], minlength=n), out=ptr[1:])
    return (
        ptr.astype(index_dtype(len(starts))),
        etype[starts].astype(code_dt),
        ends.astype(idx_dt),
    )


def _csr_ptr(owner: np.ndarray, n: int, dt: np.dtype) -> np.ndarray:
    ptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(owner, minlength=n), out=ptr[1:])
    return ptr.astype(dt)


def _partition_bits(n: int, num_parts: int, replica_ptr: np.ndarray, replica_parts: np.ndarray) -> np.ndarray:
    nb = bits_width(num_parts)
    rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(replica_ptr))
    parts = replica_parts.astype(np.int64)
    if len(parts) and (parts.min() < 0 or parts.max() >= num_parts):
        raise GlispError(f"replica partition ids must be in [0, {num_parts}) (got {parts.min()}..{parts.max()})")
    # bits of one vertex are distinct, so summing powers of two is the same as OR-ing them
    flat = np.bincount(rows * nb + (parts >> 3), weights=np.left_shift(1, parts & 7), minlength=n * nb)
    return flat.astype(np.uint8).reshape(n, nb)


WRITE_BLOCK = 1 << 24  # bytes handed to the output per write (an object store's stream uploads in parts)


def _write_array(open_out: Callable[[str], Any], name: str, arr: np.ndarray) -> dict[str, Any]:
    """Write one field through ``open_out(file name)`` (a binary output), hashing its bytes on the way."""
    spec = FIELD_BY_NAME[name]
    arr = np.ascontiguousarray(arr)
    dt = arr.dtype.newbyteorder("<") if arr.dtype.byteorder == ">" else arr.dtype
    arr = arr.astype(dt, copy=False)
    if dt.str not in spec.dtypes:
        raise GlispError(f"field {name!r}: dtype {dt.str} is not one of {spec.dtypes} (got {dt.str})")
    h = hashlib.new(CHECKSUM_ALGO)
    with open_out(spec.file) as f:
        if arr.nbytes:
            buf = arr.reshape(-1).data.cast("B")  # the array's memoryview: no copy
            for at in range(0, len(buf), WRITE_BLOCK):
                block = buf[at : at + WRITE_BLOCK]
                h.update(block)
                f.write(block)
    return {
        "file": spec.file,
        "dtype": dt.str,
        "shape": list(arr.shape),
        "nbytes": int(arr.nbytes),
        "checksum": h.hexdigest(),
    }


def write_partition(
    out_dir: str | os.PathLike[str] | StoreURI,
    *,
    part_id: int,
    num_parts: int,
    vertex_gids: np.ndarray,
    out_degree: np.ndarray,
    in_degree: np.ndarray,
    replica_ptr: np.ndarray,
    replica_parts: np.ndarray,
    master: np.ndarray,
    vtype: np.ndarray,
    src: np.ndarray,
    dst: np.ndarray,
    etype: np.ndarray,
    weight: np.ndarray | None = None,
    ts: np.ndarray | None = None,
    edge_key: np.ndarray | None = None,
    edge_types: list[str] | None = None,
    vertex_types: list[str] | None = None,
    master_gids: np.ndarray | None = None,
    features: np.ndarray | None = None,
    labels: np.ndarray | None = None,
    split: np.ndarray | None = None,
    feature_dim: int = 0,
    directed: bool = True,
    extra: dict[str, Any] | None = None,
    create_parent: bool = True,
) -> WrittenPartition:
    """Write partition ``part_id`` into ``out_dir`` (created; replaced atomically if it exists), a local directory
    or a prefix in a store (each object replaced whole, ``meta.json`` last).

    Vertex arrays (``vertex_gids``, degrees, ``replica_ptr``/``replica_parts`` = CSR of each vertex's
    replica set, ``master``, ``vtype``) are row-aligned, in any order. Edge arrays (``src``, ``dst`` as
    global ids, ``etype``, optional ``weight``/``ts``, optional ``edge_key`` = ingest eid used to break
    ties between parallel edges deterministically) are row-aligned, in any order. ``master_gids`` with
    ``features``/``labels``/``split`` row-aligned to it: the vertices whose master is ``part_id``.
    """
    gids, vorder = _sorted_vertices(part_id, vertex_gids)
    n = len(gids)
    et = np.asarray(etype, np.int64)
    edge_types = list(edge_types or [f"e{i}" for i in range(int(et.max(initial=0)) + 1)])
    vertex_types = list(vertex_types or ["v0"])
    arrays, eorder = _edge_arrays(part_id, gids, src, dst, et, len(edge_types), edge_key)
    m = len(eorder)
    mas = np.asarray(master, np.int64)[vorder]
    code_dt = code_dtype(max(len(edge_types), len(vertex_types)))
    arrays.update(
        _vertex_arrays(
            vorder,
            num_parts,
            out_degree,
            in_degree,
            replica_ptr,
            replica_parts,
            mas,
            vtype,
            index_dtype(max(n - 1, 0)),
            code_dt,
        )
    )
    arrays.update(_edge_values(eorder, weight, ts))
    num_master = _master_arrays(
        arrays, part_id, gids[mas == part_id], master_gids, features, labels, split, feature_dim
    )
    counts = {"num_vertices": n, "num_edges": m, "num_master": num_master}
    fdim = int(feature_dim if features is not None else 0)
    meta = _meta(part_id, num_parts, counts, edge_types, vertex_types, directed, weight, ts, fdim)
    fields, meta_hash = _publish_where(out_dir, part_id, arrays, meta, extra or {}, create_parent)
    return WrittenPartition(
        part_id=int(part_id),
        num_vertices=n,
        num_edges=m,
        num_master=num_master,
        field_bytes={k: v["nbytes"] for k, v in fields.items()},
        edge_order=eorder,
        vertex_order=vorder,
        meta_sha256=meta_hash,
    )


def _publish_where(
    out_dir: str | os.PathLike[str] | StoreURI,
    part_id: int,
    arrays: dict[str, np.ndarray],
    meta: dict[str, Any],
    extra: dict[str, Any],
    create_parent: bool,
) -> tuple[dict[str, Any], str]:
    """Publish into a store prefix (objects replaced whole, ``meta.json`` last) or a local directory (renamed
    into place): the fields' records and the meta hash."""
    if isinstance(out_dir, StoreURI) and not out_dir.is_local:
        return _publish_to_store(out_dir, arrays, meta, extra)
    return _publish(Path(out_dir), part_id, arrays, meta, extra, create_parent)


def _meta(
    part_id: int,
    num_parts: int,
    counts: dict[str, int],
    edge_types: list[str],
    vertex_types: list[str],
    directed: bool,
    weight: np.ndarray | None,
    ts: np.ndarray | None,
    feature_dim: int,
) -> dict[str, Any]:
    """meta.json's fields but ``fields`` and ``extra`` (the publish adds both)."""
    return {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "part_id": int(part_id),
        "num_parts": int(num_parts),
        **counts,
        "edge_types": edge_types,
        "vertex_types": vertex_types,
        "directed": bool(directed),
        "weighted": weight is not None,
        "timestamped": ts is not None,
        "feature_dim": feature_dim,
        "type_index": len(edge_types) > 1,
        "edge_id_shift": EDGE_ID_SHIFT,
        "checksum_algo": CHECKSUM_ALGO,
    }


def _edge_arrays(
    part_id: int,
    gids: np.ndarray,
    src: np.ndarray,
    dst: np.ndarray,
    et: np.ndarray,
    num_et: int,
    edge_key: np.ndarray | None,
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The structure fields and the edge order: edges sorted by (src, etype, dst[, key]), an edge's local id its
    position."""
    s_l, d_l = _local_endpoints(part_id, gids, np.asarray(src, np.int64), np.asarray(dst, np.int64))
    n = len(gids)
    eorder = sort_order([s_l, et, d_l], [n, num_et, n], None if edge_key is None else np.asarray(edge_key))
    return _structure_arrays(gids, s_l[eorder], d_l[eorder], et[eorder], num_et), eorder


def _edge_values(eorder: np.ndarray, weight: np.ndarray | None, ts: np.ndarray | None) -> dict[str, np.ndarray]:
    """The optional per-edge fields in edge local id order."""
    out = {}
    if weight is not None:
        out["weight"] = np.asarray(weight, np.float32)[eorder]
    if ts is not None:
        out["timestamp"] = np.asarray(ts, np.int64)[eorder]
    return out


def _sorted_vertices(part_id: int, vertex_gids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The partition's global ids sorted (local id = position) and the order that sorts the input rows."""
    gids_in = np.asarray(vertex_gids, np.int64)
    vorder = np.argsort(gids_in, kind="stable")
    gids = gids_in[vorder]
    if len(gids) > 1 and not (gids[1:] > gids[:-1]).all():
        dup = gids[1:][gids[1:] == gids[:-1]][:3].tolist()
        raise GlispError(f"partition {part_id}: vertex ids must be unique (got duplicates, e.g. {dup})")
    return gids, vorder


def _local_endpoints(part_id: int, gids: np.ndarray, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Local ids of the edges' endpoints (global ids are sorted, so local order == global order); every
    endpoint must be one of the partition's vertices."""
    m = len(src)
    rows = IdRows(gids)  # a table over the ids' span where dense enough: 13x a binary search at 16M edges
    s_l, d_l = rows.find(src), rows.find(dst)
    bad = (s_l < 0) | (d_l < 0)
    if bad.any():
        ex = [(int(a), int(b)) for a, b in zip(src[bad][:3], dst[bad][:3], strict=True)]
        raise GlispError(
            f"partition {part_id}: {int(bad.sum()):,} of {m:,} edges have an endpoint missing from the partition's "
            f"vertex set (e.g. {ex}); the replicas table does not match the assignment"
        )
    return s_l, d_l


def sort_order(keys: list[np.ndarray], spans: list[int], last: np.ndarray | None = None) -> np.ndarray:
    """The stable order of rows by ``keys`` (most significant first, each in ``[0, span)``), then by ``last``:
    ``np.lexsort`` of the same keys, reversed. The keys are packed into one int64 and sorted once where they fit
    (a lexsort sorts once a key: 1.9x slower for four keys of 16M rows); rows equal on the packed keys (parallel
    edges) are then ordered by ``last`` among themselves."""
    if not len(keys[0]) or int(np.prod([max(s, 1) for s in spans], dtype=object)) >= 2**62:
        return np.lexsort(([] if last is None else [last]) + keys[::-1])
    packed = np.asarray(keys[0], np.int64).copy()
    for k, span in zip(keys[1:], spans[1:], strict=True):
        packed *= max(span, 1)
        packed += k
    order = np.argsort(packed, kind="stable")
    if last is None:
        return order
    p = packed[order]
    eq = p[1:] == p[:-1]
    tie = np.zeros(len(p), bool)  # every row of a run of equal packed keys
    tie[1:] |= eq
    tie[:-1] |= eq
    at = np.flatnonzero(tie)
    if len(at):
        sub = order[at]
        order[at] = sub[np.lexsort((last[sub], p[at]))]
    return order


def _structure_arrays(
    gids: np.ndarray, s_l: np.ndarray, d_l: np.ndarray, et: np.ndarray, num_et: int
) -> dict[str, np.ndarray]:
    """The out- and in-CSR (and, with several edge types, the type index) of edges sorted by (src, etype, dst)."""
    n, m = len(gids), len(s_l)
    eidx_dt = index_dtype(m)
    arrays: dict[str, np.ndarray] = {
        "global_id": gids,
        "out_indptr": _csr_ptr(s_l, n, eidx_dt),
        "out_nbr": d_l.astype(index_dtype(max(n - 1, 0))),
    }
    in_order = sort_order([d_l, et, s_l], [n, num_et, n])  # stable: ties keep edge local id order
    arrays["in_indptr"] = _csr_ptr(d_l, n, eidx_dt)
    arrays["in_eid"] = in_order.astype(index_dtype(max(m - 1, 0)))
    if num_et > 1:
        p, ids, end = _type_index(s_l, et, n, eidx_dt, code_dtype(num_et))
        arrays.update(out_type_ptr=p, out_type_ids=ids, out_type_end=end)
        p, ids, end = _type_index(d_l[in_order], et[in_order], n, eidx_dt, code_dtype(num_et))
        arrays.update(in_type_ptr=p, in_type_ids=ids, in_type_end=end)
    return arrays


def _vertex_arrays(
    vorder: np.ndarray,
    num_parts: int,
    out_degree: np.ndarray,
    in_degree: np.ndarray,
    replica_ptr: np.ndarray,
    replica_parts: np.ndarray,
    mas: np.ndarray,
    vtype: np.ndarray,
    vid_dt: np.dtype,
    code_dt: np.dtype,
) -> dict[str, np.ndarray]:
    """Degrees, replica bits, masters (``mas``: already in local id order) and vertex-type ranges, re-ordered
    from input rows to local ids."""
    n = len(vorder)
    od = np.asarray(out_degree, np.int64)[vorder]
    idg = np.asarray(in_degree, np.int64)[vorder]
    arrays = {
        "out_degree": od.astype(index_dtype(int(od.max(initial=0)))),
        "in_degree": idg.astype(index_dtype(int(idg.max(initial=0)))),
    }
    rptr = np.asarray(replica_ptr, np.int64)
    rparts = np.asarray(replica_parts, np.int64)
    counts = np.diff(rptr)[vorder]
    sorted_ptr = np.zeros(n + 1, np.int64)
    np.cumsum(counts, out=sorted_ptr[1:])
    take = np.repeat(rptr[:-1][vorder] - sorted_ptr[:-1], counts) + np.arange(sorted_ptr[-1])
    arrays["partition_bits"] = _partition_bits(n, num_parts, sorted_ptr, rparts[take])
    arrays["master"] = mas.astype(code_dtype(num_parts))
    vt = np.asarray(vtype, np.int64)[vorder]
    vstart = np.flatnonzero(np.concatenate(([True], vt[1:] != vt[:-1]))) if n else np.zeros(0, np.int64)
    arrays["vtype_start"] = vstart.astype(vid_dt)
    arrays["vtype_code"] = vt[vstart].astype(code_dt)
    return arrays


def _master_arrays(
    arrays: dict[str, np.ndarray],
    part_id: int,
    mine: np.ndarray,
    master_gids: np.ndarray | None,
    features: np.ndarray | None,
    labels: np.ndarray | None,
    split: np.ndarray | None,
    feature_dim: int,
) -> int:
    """Add the vertex data of the vertices mastered here (``mine``, sorted), rows in local id order (== sorted
    master gids); returns how many there are."""
    mg_in = mine if master_gids is None else np.asarray(master_gids, np.int64)
    morder = np.argsort(mg_in, kind="stable")
    mg = mg_in[morder]
    if len(mg) != len(mine) or not np.array_equal(mg, mine):
        raise GlispError(
            f"partition {part_id}: master_gids must be exactly the local vertices whose master is {part_id} "
            f"(got {len(mg):,} ids for {len(mine):,} such vertices)"
        )
    if features is not None:
        f = np.asarray(features, np.float32).reshape(len(mg_in), feature_dim)
        arrays["features"] = f[morder]
    if labels is not None:
        arrays["labels"] = np.asarray(labels, np.int64)[morder]
    if split is not None:
        arrays["split"] = np.asarray(split, np.int8)[morder]
    return int(len(mg))


def _meta_bytes(meta: dict[str, Any], fields: dict[str, dict[str, Any]], extra: dict[str, Any]) -> bytes:
    return json.dumps({**meta, "fields": fields, "extra": extra}, indent=1).encode()


def _publish(
    out_dir: Path,
    part_id: int,
    arrays: dict[str, np.ndarray],
    meta: dict[str, Any],
    extra: dict[str, Any],
    create_parent: bool,
) -> tuple[dict[str, dict[str, Any]], str]:
    """Write the fields and the metadata into a temp sibling, then swap it into place (a retried Spark task
    replaces its own output); returns the fields' descriptions and the hash of the meta.json written."""
    if create_parent:
        out_dir.parent.mkdir(parents=True, exist_ok=True)
    elif not out_dir.parent.is_dir():  # a Spark task never recreates a stage's staging directory
        raise GlispError(f"partition {part_id}: output directory {out_dir.parent} does not exist (removed?)")
    tmp = out_dir.parent / f".{out_dir.name}.{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:

        def open_out(file: str) -> BinaryIO:
            return open(tmp / file, "wb")

        fields = {name: _write_array(open_out, name, arr) for name, arr in arrays.items()}
        raw = _meta_bytes(meta, fields, extra)
        (tmp / META_FILE).write_bytes(raw)
        if out_dir.exists():
            shutil.rmtree(out_dir)
        os.rename(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return fields, hashlib.sha256(raw).hexdigest()


def _publish_to_store(
    out: StoreURI, arrays: dict[str, np.ndarray], meta: dict[str, Any], extra: dict[str, Any]
) -> tuple[dict[str, dict[str, Any]], str]:
    """Stream every field into its object, then write ``meta.json``; returns what :func:`_publish` returns.

    An object store has no directory to swap in: each object appears whole when its stream closes, and a
    retried task rewrites the same names with the same bytes. ``meta.json`` comes last, and the stage checks
    every partition against the hashes its tasks returned before it publishes (a partial attempt is never
    named by a record).
    """
    from glisp_core.storage.store import store_for

    store = store_for(out)

    def open_out(file: str) -> Any:
        return store.open_output(out / file)

    fields = {name: _write_array(open_out, name, arr) for name, arr in arrays.items()}
    raw = _meta_bytes(meta, fields, extra)
    store.write_bytes(out / META_FILE, raw)
    return fields, hashlib.sha256(raw).hexdigest()
