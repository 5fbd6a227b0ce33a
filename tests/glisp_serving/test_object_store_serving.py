"""Serving an object-store dataset: real ``glisp serve`` subprocesses on an ``s3://`` copy of the served graph
(moto's S3 server), each pulling its partition into ``serve.cache_dir``.

The whole version prefix is a byte copy of the local one (the layout is relative), so the S3 server and a
server on the local copy must give the same samples for the same request seed.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import grpc
import numpy as np
import pytest

from glisp_core.dataset.layout import DatasetVersion
from glisp_core.dataset.versions import LEASES, apply_retention
from glisp_core.partition_format import open_partition
from glisp_core.storage.store import Store
from glisp_serving.proto import sampling_pb2 as pb
from glisp_serving.proto import sampling_pb2_grpc as pb_grpc
from glisp_serving.server.partition_cache import cache_entry
from glisp_serving.wire import from_array, to_array
from glisp_testing.stores import copy_version
from tests.glisp_serving.conftest import VC_RUN
from tests.glisp_serving.test_reliability import Server

SETS = ["serve.drain_s=0", "serve.grace_s=1"]


def _upload(graph, root, version: str, created_ns: int | None = None) -> DatasetVersion:
    return copy_version(graph.dv, root, version, created_ns)


def _samples(addr: str, seeds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    with grpc.insecure_channel(addr) as ch:
        r = pb_grpc.SamplingStub(ch).Gather(pb.GatherRequest(seeds=to_array(seeds), fanout=5, seed=11), timeout=30)
    return from_array(r.counts, "counts"), from_array(r.neighbors, "neighbors")


def _output(s: Server) -> str:
    assert s.stop() == 0
    return s.proc.stdout.read()


def _files(d: Path) -> dict[str, tuple[int, int, int]]:
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns, p.stat().st_size) for p in d.iterdir()}


@pytest.fixture
def s3_graph(graph, s3_root):
    return _upload(graph, s3_root, graph.dv.version)


def test_s3_server_answers_as_local_holds_a_lease_and_retention_keeps_its_version(graph, s3_graph, tmp_path):
    cache = tmp_path / "cache"
    newer = _upload(graph, s3_graph.root, "v9", created_ns=time.time_ns())
    Store(s3_graph.root).write_bytes(s3_graph.root / graph.dv.graph / "LATEST", b"v9\n")
    local = Server(graph.dv.path, VC_RUN, 0, tmp_path, SETS)
    remote = Server(s3_graph.path, VC_RUN, 0, tmp_path, [*SETS, f"serve.cache_dir={cache}"])
    try:
        a, b = local.address(300), remote.address(300)
        seeds = np.asarray(open_partition(graph.dv.partition_dir(VC_RUN, 0), verify=False).global_id, np.int64)
        want, got = _samples(a, seeds), _samples(b, seeds)
        assert len(want[1]) > 0
        np.testing.assert_array_equal(want[0], got[0])
        np.testing.assert_array_equal(want[1], got[1])
        leases = list(s3_graph.store.files(s3_graph.path / LEASES))
        assert len(leases) == 1, leases
        removed = apply_retention(s3_graph.root, graph.dv.graph, keep=1, log=lambda _: None)
        assert removed == [] and s3_graph.store.exists(s3_graph.manifest_path)
    finally:
        out = _output(remote)
        local.stop()
    src = s3_graph.partition_dir(VC_RUN, 0)
    entry = cache_entry(s3_graph, src, cache)
    assert entry == cache / graph.dv.graph / graph.dv.version / src.parent.name / "part-00000"
    local_dir = graph.dv.partition_dir(VC_RUN, 0).local
    for p in local_dir.iterdir():
        assert (entry / p.name).read_bytes() == p.read_bytes(), p.name
    assert "content hashes verified" in out and str(entry) in out, out
    assert not [p for p in entry.parent.iterdir() if p.name.startswith(".")]  # no temporary copy left
    assert list(s3_graph.store.files(s3_graph.path / LEASES)) == []  # released on a clean stop
    # unleased now, the version goes: the lease was what kept it
    assert apply_retention(s3_graph.root, graph.dv.graph, keep=1, log=lambda _: None) == [graph.dv.version]
    assert newer.store.exists(newer.manifest_path)


def test_restart_reuses_the_cache_and_replaces_a_corrupt_entry(s3_graph, tmp_path):
    cache = tmp_path / "cache"
    sets = [*SETS, f"serve.cache_dir={cache}", "serve.warmup=false"]
    entry = cache_entry(s3_graph, s3_graph.partition_dir(VC_RUN, 1), cache)

    def run_once() -> str:
        s = Server(s3_graph.path, VC_RUN, 1, tmp_path, sets)
        s.address(300)
        return _output(s)

    first = run_once()
    assert "downloaded" in first, first
    before = _files(entry)
    second = run_once()
    assert "reusing the cached copy" in second and "downloaded" not in second, second
    assert _files(entry) == before  # the same files, untouched: nothing was copied again
    victim = entry / "out_nbr.bin"
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0x01  # same size, one bit off: only the content hash sees it
    victim.write_bytes(bytes(data))
    third = run_once()
    assert "discarding the cache entry" in third and "content hash mismatch" in third, third
    assert "downloaded" in third, third
    assert victim.read_bytes() == s3_graph.store.read_bytes(s3_graph.partition_dir(VC_RUN, 1) / "out_nbr.bin")


def test_a_partial_cache_entry_is_downloaded_again(s3_graph, tmp_path):
    """A file missing from an entry (a copy someone trimmed) is caught by the size check alone."""
    cache = tmp_path / "cache"
    sets = [*SETS, f"serve.cache_dir={cache}", "serve.warmup=false", "serve.verify=off"]
    entry = cache_entry(s3_graph, s3_graph.partition_dir(VC_RUN, 2), cache)
    entry.mkdir(parents=True)
    (entry / "meta.json").write_text("{}")
    s = Server(s3_graph.path, VC_RUN, 2, tmp_path, sets)
    s.address(300)
    out = _output(s)
    assert "discarding the cache entry" in out and "downloaded" in out, out
    assert json.loads((entry / "meta.json").read_text())["part_id"] == 2


def test_a_refused_lease_write_serves_without_a_lease(s3_graph, monkeypatch, capsys):
    """Read-only credentials (the fault injected: the store refuses the write as S3 words it)."""
    from glisp_serving.server import reload

    def refuse(self, uri, data):
        raise OSError("AWS Error ACCESS_DENIED during PutObject operation: Access Denied")

    monkeypatch.setattr(Store, "write_bytes", refuse)
    assert reload._lease(s3_graph, VC_RUN, 0) is None
    assert "retention cannot see this server" in capsys.readouterr().out

    def time_out(self, uri, data):
        raise OSError("curlCode: 28, Timeout was reached")

    monkeypatch.setattr(Store, "write_bytes", time_out)
    with pytest.raises(OSError):  # any other failure still stops the server
        reload._lease(s3_graph, VC_RUN, 0)
