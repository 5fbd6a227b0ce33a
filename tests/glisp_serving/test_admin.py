"""Admin calls, integrity across reloads, and memory per request: one ``glisp serve`` subprocess each.

Reload is an admin call (glisp_serving.admin): over the network only with a token, else through the
server's admin socket. A reload hashes its target before switching; health follows the version served
(NOT_SERVING while a damaged one is served, SERVING again once a good one is); a request's message is
refused from its length prefix, so a huge one costs the server nothing that stays.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2

from glisp_core.partition_format import open_partition
from glisp_serving.proto import sampling_pb2 as pb
from glisp_serving.proto import sampling_pb2_grpc as pb_grpc
from glisp_serving.wire import to_array
from tests.glisp_serving.conftest import VC_RUN
from tests.glisp_serving.test_reliability import Server, _health, _part, _poke, _stats

SERVING, NOT_SERVING = health_pb2.HealthCheckResponse.SERVING, health_pb2.HealthCheckResponse.NOT_SERVING


@pytest.fixture()
def good_and_damaged(graph, tmp_path) -> tuple[Path, Path]:
    """Two copies of the served version under one graph: v1 as written, v2 with two neighbours of partition 0
    swapped (in range, the right sizes: only the recorded hashes tell)."""
    good, bad = tmp_path / "root" / "rmat9" / "v1", tmp_path / "root" / "rmat9" / "v2"
    shutil.copytree(graph.dv.path.local, good)
    shutil.copytree(graph.dv.path.local, bad)
    p = _part(bad, 0)
    dt = json.loads((p / "meta.json").read_text())["fields"]["out_nbr"]["dtype"]
    a = np.fromfile(p / "out_nbr.bin", dt)
    i = int(np.flatnonzero(a != a[0])[0])
    _poke(p / "out_nbr.bin", dt, 0, int(a[i]))
    _poke(p / "out_nbr.bin", dt, i, int(a[0]))
    return good, bad


def _admin(sock: Path) -> grpc.Channel:
    return grpc.insecure_channel(f"unix:{sock}")


def _reload(ch: grpc.Channel, dataset: str, run: str = VC_RUN) -> pb.ReloadResponse:
    return pb_grpc.SamplingStub(ch).Reload(pb.ReloadRequest(dataset=dataset, run=run), timeout=60)


def test_reload_is_an_admin_call_and_refuses_a_bad_path_and_a_damaged_target(
    good_and_damaged, tmp_path, server_processes
):
    good, bad = good_and_damaged
    sock = tmp_path / "admin" / "p0.sock"
    s = Server(good, VC_RUN, 0, tmp_path, ["serve.drain_s=0"], extra_args=["--admin-socket", str(sock)])
    addr = s.address()
    try:
        with grpc.insecure_channel(addr) as ch, pytest.raises(grpc.RpcError) as ei:
            _reload(ch, str(bad))
        assert ei.value.code() == grpc.StatusCode.PERMISSION_DENIED and "admin" in ei.value.details()
        with _admin(sock) as ch:
            with pytest.raises(grpc.RpcError) as ei:
                _reload(ch, "/nonexistent/graph/v9")
            assert ei.value.code() == grpc.StatusCode.FAILED_PRECONDITION, ei.value.details()
            assert "/nonexistent/graph/v9" in ei.value.details()
            with pytest.raises(grpc.RpcError) as ei:
                _reload(ch, str(bad))
            assert ei.value.code() == grpc.StatusCode.FAILED_PRECONDITION
            assert "out_nbr.bin" in ei.value.details() and "recorded hashes" in ei.value.details()
        st = _stats(addr)
        assert st.dataset == "rmat9/v1" and st.serving and _health(addr) == SERVING
        assert sock.parent.stat().st_mode & 0o077 == 0  # only this user may open the admin socket
    finally:
        assert s.stop() == 0
    assert not sock.exists()


def test_health_is_serving_again_once_a_reload_leaves_a_damaged_version(good_and_damaged, tmp_path, server_processes):
    good, bad = good_and_damaged
    sock = tmp_path / "admin" / "p0.sock"
    s = Server(bad, VC_RUN, 0, tmp_path, ["serve.drain_s=0"], extra_args=["--admin-socket", str(sock)])
    addr = s.address()
    try:
        deadline = time.time() + 60
        while not _stats(addr).integrity.startswith("failed"):
            assert time.time() < deadline, "the background hash check never failed"
            time.sleep(0.1)
        assert _health(addr) == NOT_SERVING and not _stats(addr).serving
        with _admin(sock) as ch:
            assert _reload(ch, str(good)).version == "rmat9/v1"
        st = _stats(addr)
        assert st.dataset == "rmat9/v1" and st.integrity == "ok" and st.serving
        assert _health(addr) == SERVING
        with grpc.insecure_channel(addr) as ch:  # and it answers, as health says
            empty = to_array(np.zeros(0, np.int64))
            pb_grpc.SamplingStub(ch).Gather(pb.GatherRequest(seeds=empty, fanout=2), timeout=10)
    finally:
        assert s.stop() == 0


def _huge(addr: str, token: str | None = None) -> grpc.StatusCode:
    """A 200 MB Gather request (25M seeds), as a client that lifted its own send limit sends it."""
    req = pb.GatherRequest(seeds=to_array(np.zeros(25_000_000, np.int64)), fanout=1)
    md = [("authorization", f"Bearer {token}")] if token else None
    with grpc.insecure_channel(addr, options=[("grpc.max_send_message_length", 512 << 20)]) as ch:
        try:
            pb_grpc.SamplingStub(ch).Gather(req, timeout=60, metadata=md)
        except grpc.RpcError as e:
            return e.code()
    return grpc.StatusCode.OK


@pytest.mark.parametrize("token", [None, "s3cret"], ids=["open", "token"])
def test_huge_requests_are_refused_before_they_are_read(graph, tmp_path, token, server_processes):
    env = {"GLISP_TOKEN": token} if token else {}
    s = Server(graph.dv.path, VC_RUN, 0, tmp_path, ["serve.drain_s=0"], env=env)
    addr = s.address()
    md = [("authorization", f"Bearer {token}")] if token else None

    def stats() -> pb.StatsResponse:
        with grpc.insecure_channel(addr) as ch:
            return pb_grpc.SamplingStub(ch).Stats(pb.StatsRequest(), timeout=10, metadata=md)

    try:
        before = stats().rss_anon_bytes
        assert _huge(addr, token) == grpc.StatusCode.RESOURCE_EXHAUSTED  # over the limit, token or not
        if token:
            assert _huge(addr, None) in (grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.UNAUTHENTICATED)
        codes: list[grpc.StatusCode] = []
        threads = [threading.Thread(target=lambda: codes.append(_huge(addr, token))) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert codes == [grpc.StatusCode.RESOURCE_EXHAUSTED] * 4
        deadline = time.monotonic() + 10  # what the arenas kept goes back at the server's next heap check (1 s)
        while ((st := stats()).rss_anon_bytes - before) >> 20 >= 32 and time.monotonic() < deadline:
            time.sleep(0.2)
        grown = (st.rss_anon_bytes - before) >> 20
        assert grown < 32, f"refused requests left {grown} MiB in the server ({st.heap_releases} heap releases)"
    finally:
        assert s.stop() == 0


def test_report_names_missing_truncated_and_damaged_artifacts(good_and_damaged, capsys):
    from glisp_app.cli import main as glisp
    from glisp_core.dataset.records import RECORDS

    good, bad = good_and_damaged
    assert glisp(["report", str(good), "--no-plot", "--verify"]) == 0
    assert "Integrity: ok" in capsys.readouterr().out
    assert glisp(["report", str(bad), "--no-plot"]) == 0  # the swap keeps every size: only hashing sees it
    assert glisp(["report", str(bad), "--no-plot", "--verify"]) == 1
    err = capsys.readouterr().err
    assert "out_nbr.bin (field out_nbr) does not match its recorded hash" in err and "part-00000" in err, err

    p = _part(bad, 1)
    with open(p / "in_eid.bin", "r+b") as f:
        f.truncate(f.seek(0, 2) - 4)
    (p / "weight.bin").unlink()
    assert glisp(["report", str(bad), "--no-plot"]) == 1
    err = capsys.readouterr().err
    assert "in_eid.bin (field in_eid) is truncated" in err and "weight.bin (field weight) is missing" in err, err

    shutil.rmtree(good / RECORDS / "ingest")
    assert glisp(["report", str(good), "--no-plot"]) == 1
    err = capsys.readouterr().err
    assert "depends on stage 'ingest', whose record is missing" in err or "ingest: its record is missing" in err, err
    assert glisp(["serve", str(good), "--partition", "0", "--run", VC_RUN]) != 0
    err = capsys.readouterr().err
    assert "ingest stage's record is missing" in err and "no serialized partition run" not in err, err


def test_requests_over_the_servers_memory_budget_are_refused_and_it_keeps_serving(graph, tmp_path, server_processes):
    """serve.max_inflight_mb bounds what all requests in progress hold: a Lookup whose rows (and message) need
    more is refused RESOURCE_EXHAUSTED naming the key; smaller requests are still answered."""
    s = Server(graph.dv.path, VC_RUN, 0, tmp_path, ["serve.drain_s=0", "serve.max_inflight_mb=1"])
    addr = s.address()
    try:
        held = np.asarray(open_partition(_part(graph.dv.path.local, 0), verify=False).global_id, np.int64)
        mastered = held[: min(len(held), 8)]
        with grpc.insecure_channel(addr) as ch:
            stub = pb_grpc.SamplingStub(ch)
            big = pb.LookupRequest(vertices=to_array(np.resize(mastered, 200_000)), features=True)
            with pytest.raises(grpc.RpcError) as ei:
                stub.Lookup(big, timeout=10)
            assert ei.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "serve.max_inflight_mb=1" in ei.value.details(), ei.value.details()
            req = pb.GatherRequest(seeds=to_array(mastered), fanout=3)
            stub.Gather(req, timeout=10)  # within the budget: answered
    finally:
        assert s.stop() == 0
