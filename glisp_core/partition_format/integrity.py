"""What a server checks before its kernels touch a partition, and the content hashes it checks after.

The sampling kernels index without bounds checks (numba), so a partition whose offsets or ids point
outside its arrays must never reach them: :func:`check_structure` verifies, with whole-array numpy
reductions (no per-edge Python), every invariant the kernels rely on — CSR offsets that start at 0,
never decrease and end at the edge count; neighbour, edge and type ids inside their ranges; sorted
global ids. A flipped byte that keeps every value in range gives wrong samples but no crash; the
SHA-256 content hashes recorded by the writer catch it (:func:`verify_checksums`), which costs a read
of every byte and therefore runs in the background or on demand (``serve.verify``).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from glisp_core.errors import FormatError
from glisp_core.partition_format.reader import PartitionReader, _hash_file


def _csr(r: PartitionReader, name: str, ptr: np.ndarray, total: int) -> None:
    if len(ptr) == 0:
        raise FormatError(f"{r.path}/{name}: empty offsets array")
    first, last = int(ptr[0]), int(ptr[-1])
    if first != 0 or last != total:
        raise FormatError(f"{r.path}/{name}: offsets run {first}..{last}, expected 0..{total}")
    if len(ptr) > 1 and not bool(np.all(ptr[1:] >= ptr[:-1])):
        at = int(np.argmax(ptr[1:] < ptr[:-1]))
        raise FormatError(f"{r.path}/{name}: offsets decrease at vertex {at} ({int(ptr[at])} > {int(ptr[at + 1])})")


def _within(r: PartitionReader, name: str, a: np.ndarray | None, hi: int, lo: int = 0) -> None:
    if a is None or a.size == 0:
        return
    amin, amax = int(a.min()), int(a.max())
    if amin < lo or amax >= hi:
        raise FormatError(f"{r.path}/{name}: values {amin}..{amax} outside [{lo}, {hi}) (a corrupt or foreign file)")


def check_structure(r: PartitionReader) -> None:
    """FormatError naming the file and the broken invariant, unless every index the kernels follow is in range."""
    n, m = r.num_vertices, r.num_edges
    _csr(r, "out_indptr", r.out_indptr, m)
    _csr(r, "in_indptr", r.in_indptr, m)
    _within(r, "out_nbr", r.out_nbr, n)
    _within(r, "in_eid", r.in_eid, m)
    _within(r, "master", r.master, r.num_parts)
    gid = r.global_id
    if len(gid) and (int(gid[0]) < 0 or (len(gid) > 1 and not bool(np.all(gid[1:] > gid[:-1])))):
        raise FormatError(f"{r.path}/global_id: global ids must be non-negative and strictly increasing")
    _within(r, "out_degree", r.out_degree, np.iinfo(np.int64).max)
    _within(r, "in_degree", r.in_degree, np.iinfo(np.int64).max)
    if r.has_type_index:
        for side in ("out", "in"):
            ptr, tids, tend = r.type_index(side)
            _csr(r, f"{side}_type_ptr", ptr, len(tids))
            _within(r, f"{side}_type_ids", tids, max(1, r.num_edge_types))
            _within(r, f"{side}_type_end", tend, m + 1)


def verify_checksums(r: PartitionReader, stop: Callable[[], bool] = lambda: False) -> list[str]:
    """The fields whose file no longer matches the hash the writer recorded (empty when all match).

    Reads every byte; ``stop`` is polled between files so a shutting-down server does not wait for it.
    """
    algo = r.meta.get("checksum_algo", "sha256")
    bad = []
    for name, fm in r.meta["fields"].items():
        if stop():
            break
        if "checksum" not in fm:
            continue
        path = r.path / str(fm.get("file", f"{name}.bin"))
        try:
            ok = _hash_file(path, algo) == fm["checksum"]
        except OSError:
            ok = False
        if not ok:
            bad.append(f"{path.name} ({name})")
    return bad
