"""Features and labels of co-located partitions, read straight from their files instead of over gRPC.

A client on the same host as a partition's server (the cluster file lists it at a loopback address or
at one of this host's names) reads that partition's ``features``/``labels``/``split`` arrays through
their memory maps, as DistDGL's trainers read their machine's partition through shared memory. The
pages are the ones the server's own maps hold in the page cache, so nothing is duplicated, and a
batch's rows cost one gather instead of a Lookup RPC (gather, encode, send, receive, copy out: about
six copies of every row, 22 MB per 1024-seed batch at 128-d on rmat18). Vertices mastered by a
partition on another host still go through ``Lookup``, and so do those of a co-located partition whose
files this process cannot open (a trainer with only the cluster file, the dataset not mounted here) or
whose files do not hold the masters of the client's routing table (another copy or run).
``client.local_reads = "never"`` turns it off.

The client already reads every partition's vertex ids to build its routing table (the dataset must be
readable from the client), so this adds one int32 per vertex: the row of each vertex in its master's
arrays.
"""

from __future__ import annotations

import logging
import socket
from typing import Any

import numpy as np
from numba import njit

from glisp_core.dataset.layout import resolve_dataset
from glisp_core.errors import GlispError
from glisp_core.partition_format import open_partition
from glisp_core.storage.uri import parse_uri
from glisp_serving.cluster.cluster_file import ClusterSpec

log = logging.getLogger("glisp.client")

_LOOPBACK = {"127.0.0.1", "localhost", "::1", "0.0.0.0"}


def host_of(address: str) -> str:
    """The host part of ``host:port`` (``[v6]:port`` too)."""
    host = address.rsplit(":", 1)[0] if ":" in address else address
    return host.strip("[]")


def local_hosts() -> set[str]:
    """Names and addresses under which this host may appear in a cluster file."""
    names = set(_LOOPBACK)
    try:
        hn = socket.gethostname()
        names |= {hn, socket.getfqdn()}
        names |= set(socket.gethostbyname_ex(hn)[2])
    except OSError:
        pass
    return names


def colocated_parts(spec: ClusterSpec) -> list[int]:
    """Partitions whose first listed server address is on this host."""
    here = local_hosts()
    return [k for k, addrs in enumerate(spec.addresses) if addrs and host_of(addrs[0]) in here]


@njit(nogil=True, cache=True)
def _gather_rows(src, row_of, ids, pos, out):
    """``out[pos[i], :] = src[row_of[ids[pos[i]]], :]`` for 2-d src/out (element loop: a row slice per
    vertex costs a view and its reference count, 4x slower at 128-d)."""
    d = src.shape[1]
    for i in range(len(pos)):
        p = pos[i]
        r = row_of[ids[p]]
        for j in range(d):
            out[p, j] = src[r, j]


class ColocatedReader:
    """Row lookups in the feature/label arrays of the partitions in ``parts`` (opened readers)."""

    def __init__(self, readers: dict[int, Any], num_vertices: int) -> None:
        self.readers = readers
        self.row_of = np.full(num_vertices, -1, np.int32)
        for r in readers.values():
            mg = np.asarray(r.master_gids, np.int64)
            self.row_of[mg] = np.arange(len(mg), dtype=np.int32)
        self._arrays = {
            k: {
                name: np.asarray(getattr(r, name))
                for name in ("features", "labels", "split")
                if getattr(r, name) is not None
            }
            for k, r in readers.items()
        }

    @property
    def parts(self) -> set[int]:
        return set(self.readers)

    @property
    def nbytes(self) -> int:
        return int(self.row_of.nbytes)

    def fields(self, part: int, features: bool, labels: bool) -> dict[str, np.ndarray]:
        """The arrays a Lookup of partition ``part`` would return, as (memory-mapped) sources."""
        a = self._arrays[part]
        want = (["features"] if features else []) + (["labels", "split"] if labels else [])
        return {name: a[name] for name in want if name in a}

    def fill(self, part: int, src: np.ndarray, ids: np.ndarray, pos: np.ndarray, out: np.ndarray) -> None:
        """``out[pos] = src[rows of ids[pos]]`` for vertices mastered by ``part``."""
        _gather_rows(src.reshape(len(src), -1), self.row_of, ids, pos, out.reshape(len(out), -1))


def open_colocated(spec: ClusterSpec, master: np.ndarray) -> ColocatedReader | None:
    """A reader of the co-located partitions whose files this process can open and which hold exactly
    the masters of the client's routing table (``master``: the master partition of each vertex); None
    when there is none, and then every lookup is a Lookup RPC."""
    parts = colocated_parts(spec)
    if not parts:
        return None
    if not parse_uri(spec.dataset, "dataset").is_local:  # the servers' cached copies are theirs to verify and map
        log.info("local reads off: %s is in an object store; features go through Lookup", spec.dataset)
        return None
    try:
        dv = resolve_dataset(spec.dataset)
    except (GlispError, OSError) as e:
        log.warning("local reads off: dataset %s not readable here (%s); features go through Lookup", spec.dataset, e)
        return None
    readers: dict[int, Any] = {}
    for k in parts:
        try:
            r = open_partition(dv.partition_dir(spec.run, k), verify=False)
            mg = np.asarray(r.master_gids, np.int64)
        except (GlispError, OSError, ValueError) as e:
            log.warning("partition %d: files not readable here (%s); its features go through Lookup", k, e)
            continue
        mine = int(np.count_nonzero(master == k))
        if len(mg) != mine or (mine and not bool(np.all(master[mg] == k))):
            log.warning("partition %d: files here do not hold its masters; its features go through Lookup", k)
            continue
        if mine:
            readers[k] = r
    return ColocatedReader(readers, len(master)) if readers else None
