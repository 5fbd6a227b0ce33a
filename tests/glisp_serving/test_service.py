"""The sampling service end to end: real ``glisp serve-cluster`` subprocesses on 127.0.0.1, real client.

Distribution tests identify edges by their global edge id and read each edge's attributes back from
the serialized partitions, so multi-edges of R-MAT are told apart.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from glisp_core.errors import StageError
from glisp_core.partition_format import open_partition
from glisp_serving.client.sampling_client import SamplingClient, SamplingError
from glisp_serving.proto import sampling_pb2 as pb
from glisp_serving.proto import sampling_pb2_grpc as pb_grpc
from glisp_serving.wire import to_array
from glisp_testing.servers import cluster_servers
from glisp_testing.stats import binomial_chi2_z, two_sample_z
from tests.glisp_serving.conftest import MAX_BATCH, ROOT


@pytest.fixture(scope="module")
def client(vc_cluster):
    with SamplingClient(vc_cluster.cluster_file) as c:
        yield c


@pytest.fixture(scope="module")
def edges(graph):
    """Global edge id -> (src, dst, etype, weight, ts) of the vertex-cut run, from the partitions."""
    table = {}
    for k in range(3):
        r = open_partition(graph.dv.partition_dir("vc-p3", k), verify=False)
        m = r.num_edges
        loc = np.arange(m)
        gid = np.asarray(r.global_id)
        table[k] = dict(
            src=gid[r.edge_src(loc)],
            dst=gid[np.asarray(r.out_nbr, np.int64)],
            etype=r.edge_type(loc),
            weight=np.asarray(r.weight),
            ts=np.asarray(r.timestamp),
        )
    return table


def attr(edges, eids: np.ndarray, name: str) -> np.ndarray:
    part, loc = eids >> 40, eids & ((1 << 40) - 1)
    out = np.empty(len(eids), edges[0][name].dtype)
    for k in np.unique(part):
        sel = part == k
        out[sel] = edges[int(k)][name][loc[sel]]
    return out


def edges_of(edges, v: int) -> np.ndarray:
    """Global edge ids of every out-edge of v, over all partitions."""
    return np.concatenate([(k << 40) | np.flatnonzero(edges[k]["src"] == v) for k in sorted(edges)])


def hub_and_leaf(graph, f: int) -> tuple[int, int]:
    deg = np.bincount(graph.src, minlength=graph.n)
    hub = int(np.argmax(deg))
    mid = int(np.flatnonzero((deg > f) & (deg <= 2 * f + 2))[0])
    return hub, mid


def many_draws(client, v: int, fanout, R: int, **kw) -> list[np.ndarray]:
    """Edge ids sampled for vertex v in R requests with different seeds."""
    return [client.gather(np.array([v]), fanout, seed=s, edge_ids=True, **kw).edge_ids for s in range(R)]


def test_health_reports_serving(vc_cluster):
    spec = json.loads(vc_cluster.cluster_file.read_text())
    assert spec["num_parts"] == 3 and spec["run"] == "vc-p3" and spec["format_version"] == 1
    for (addr,) in spec["addresses"]:
        with grpc.insecure_channel(addr) as ch:
            r = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
            assert r.status == health_pb2.HealthCheckResponse.SERVING


def test_uniform_each_edge_with_probability_f_over_D(client, graph, edges):
    f, R = 4, 600
    hub, mid = hub_and_leaf(graph, f)
    for v in (hub, mid):
        D = len(graph.out_edges(v))
        reps = client.routing.bits[v, 0]
        draws = many_draws(client, v, f, R)
        allids = np.concatenate(draws)
        assert (attr(edges, allids, "src") == v).all()
        all_edges = edges_of(edges, v)
        assert len(all_edges) == D and set(np.unique(allids).tolist()) <= set(all_edges.tolist())
        cnt = np.array([np.sum(allids == e) for e in all_edges])
        assert binomial_chi2_z(cnt, R, f / D) < 4.0, (v, D)
        assert abs(np.mean([len(d) for d in draws]) - f) < 4 * np.sqrt(f / R) + 0.05
        assert all(len(np.unique(d)) == len(d) for d in draws)  # without replacement
    assert bin(int(client.routing.bits[hub, 0])).count("1") == 3 and reps  # the hub is on all servers


def test_uniform_degree_at_most_fanout_returns_all(client, graph):
    deg = np.bincount(graph.src, minlength=graph.n)
    vs = np.flatnonzero((deg > 0) & (deg <= 5))[:50]
    hop = client.gather(vs, 5, seed=3)
    assert np.array_equal(hop.per_vertex, deg[vs])
    for i, v in enumerate(vs):
        got = np.sort(hop.nbrs[hop.per_vertex[:i].sum() : hop.per_vertex[: i + 1].sum()])
        assert np.array_equal(got, np.sort(graph.dst[graph.src == v]))


def test_with_replacement_uniform(client, graph, edges):
    f, R = 3, 400
    hub, _ = hub_and_leaf(graph, f)
    D = len(graph.out_edges(hub))
    draws = many_draws(client, hub, f, R, method="replace")
    assert all(len(d) == f for d in draws)
    allids = np.concatenate(draws)
    cnt = np.array([np.sum(allids == e) for e in edges_of(edges, hub)])
    assert len(cnt) == D and cnt.sum() == R * f
    assert binomial_chi2_z(cnt, R * f, 1 / D) < 4.0


def test_weighted_matches_single_process_aes(client, graph, edges):
    f, R = 4, 600
    hub, _ = hub_and_leaf(graph, f)
    draws = many_draws(client, hub, f, R, method="weighted")
    assert all(len(d) == f for d in draws)
    allids = np.concatenate(draws)
    ids = np.unique(allids)
    # every edge of the hub, with its weight read back from the partitions
    all_edges = edges_of(edges, hub)
    w = attr(edges, all_edges, "weight").astype(np.float64)
    assert set(ids.tolist()) <= set(all_edges.tolist())
    got = np.array([np.sum(allids == e) for e in all_edges])
    rng = np.random.default_rng(7)
    keys = np.log(rng.random((R, len(w)))) / w
    top = np.argpartition(-keys, f - 1, axis=1)[:, :f]
    ref = np.bincount(top.ravel(), minlength=len(w))
    assert two_sample_z(got, R, ref, R) < 4.0


def test_typed_only_requested_types_with_their_fanouts(client, graph, edges):
    vs = np.unique(graph.src)[:200]
    hop = client.gather(vs, {"likes": 2, "cites": 3}, seed=5, edge_ids=True)
    assert hop.counts.shape == (len(vs), 2)
    et = attr(edges, hop.edge_ids, "etype")
    slot = np.repeat(np.tile([0, 1], len(vs)), hop.counts.reshape(-1))
    assert np.array_equal(et, np.where(slot == 0, 1, 0))  # slot 0 = likes (type 1), slot 1 = cites (type 0)
    for i, v in enumerate(vs):
        likes = int(((graph.src == v) & (graph.etype == 1)).sum())
        cites = int(((graph.src == v) & (graph.etype == 0)).sum())
        assert hop.counts[i].tolist() == [min(2, likes), min(3, cites)]
    only = client.gather(vs, {"likes": 4}, seed=6, edge_ids=True)
    assert (attr(edges, only.edge_ids, "etype") == 1).all()


def test_time_restricted_no_edge_after_t(client, graph, edges):
    vs = np.unique(graph.src)[:200]
    for method in ("uniform", "weighted", "replace"):
        hop = client.gather(vs, 5, seed=8, edge_ids=True, max_time=300, method=method)
        assert (attr(edges, hop.edge_ids, "ts") <= 300).all()
        assert len(hop.edge_ids) > 0
        if method != "replace":
            elig = np.array([int(((graph.src == v) & (graph.ts <= 300)).sum()) for v in vs])
            assert np.array_equal(hop.per_vertex, np.minimum(elig, 5))


def test_in_edges(client, graph, edges):
    vs = np.unique(graph.dst)[:100]
    hop = client.gather(vs, 3, seed=2, edge_ids=True, direction="in")
    owner = np.repeat(vs, hop.per_vertex)
    assert np.array_equal(attr(edges, hop.edge_ids, "dst"), owner)
    assert np.array_equal(attr(edges, hop.edge_ids, "src"), hop.nbrs)
    indeg = np.bincount(graph.dst, minlength=graph.n)[vs]
    small = indeg <= 3
    assert np.array_equal(hop.per_vertex[small], indeg[small])  # D <= f: all of them
    assert (hop.per_vertex[~small] <= 3 + 3).all()  # quota: f in expectation, at most f + servers
    exact = client.gather(vs, 3, seed=2, direction="in", method="uniform_exact")
    assert np.array_equal(exact.per_vertex, np.minimum(indeg, 3))


def naive_blocks(seeds, hops):
    """Single-process block building from per-hop samples: dict relabel, python loops."""
    out, frontier = [], list(seeds)
    for hop in hops:
        index = {v: i for i, v in enumerate(frontier)}
        src = list(frontier)
        rows, cols = [], []
        pos = 0
        for i, c in enumerate(hop.per_vertex):
            for u in hop.nbrs[pos : pos + c]:
                if int(u) not in index:
                    index[int(u)] = len(src)
                    src.append(int(u))
                rows.append(index[int(u)])
                cols.append(i)
            pos += c
        out.append((np.array(src), len(frontier), np.array([rows, cols]).reshape(2, -1)))
        frontier = src
    return out[::-1]


def test_blocks_equal_single_process_build(client, graph):
    seeds = np.arange(0, 512, 9)
    batch = client.sample(seeds, [5, 3, 2], seed=11, keep_hops=True)
    ref = naive_blocks(seeds, batch.hops)
    assert len(batch.blocks) == 3
    for b, (src, nd, ei) in zip(batch.blocks, ref, strict=True):
        assert np.array_equal(b.src_ids.numpy(), src) and b.num_dst == nd
        assert np.array_equal(b.edge_index.numpy(), ei)
    # features of the input vertices and labels of the seeds from their masters
    assert np.allclose(batch.x.numpy(), graph.features[batch.input_ids.numpy()])
    assert np.array_equal(batch.y.numpy(), graph.labels[seeds])
    # blocks drive a PyG layer
    from torch_geometric.nn import SAGEConv

    x = batch.x
    for b in batch.blocks:
        x = SAGEConv(x.shape[1], 4)((x, x[: b.num_dst]), b.edge_index, size=b.size)
    assert x.shape == (len(seeds), 4)


def test_colocated_reads_equal_lookup_rpcs(vc_cluster, graph):
    """Features and labels read from co-located partition files are the Lookup RPCs' answers."""
    from glisp_core.config import ClientConfig
    from glisp_serving.client.colocated import colocated_parts
    from glisp_serving.cluster.cluster_file import ClusterSpec

    ids = np.random.default_rng(2).permutation(graph.n)
    with (
        SamplingClient(vc_cluster.cluster_file, ClientConfig(local_reads="never")) as rpc,
        SamplingClient(vc_cluster.cluster_file) as local,
    ):
        assert rpc.backend.colocated is None and local.backend.colocated.parts == {0, 1, 2}
        a, b = rpc.lookup(ids), local.lookup(ids)
        assert sorted(a) == sorted(b) == ["features", "labels", "split"]
        for k in a:
            assert a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k]), k
        assert np.array_equal(b["features"], graph.features[ids]) and np.array_equal(b["labels"], graph.labels[ids])
        only_x = local.lookup(ids[:7], labels=False)
        assert list(only_x) == ["features"] and np.array_equal(only_x["features"], graph.features[ids[:7]])
    spec = ClusterSpec.read(vc_cluster.cluster_file)
    far = ClusterSpec(
        dataset=spec.dataset,
        run=spec.run,
        num_parts=3,
        addresses=[spec.addresses[0], ["192.0.2.77:7000"], [f"localhost:{spec.addresses[2][0][-4:]}"]],
    )
    assert colocated_parts(far) == [0, 2]  # 192.0.2.0/24 is TEST-NET-1, never this host


def test_unreadable_colocated_files_fall_back_to_lookup_rpcs(vc_cluster, graph, monkeypatch):
    """A co-located partition whose files cannot be opened here (a trainer with only the cluster file)
    is looked up by RPC; the others are still read locally; no readable dataset means no local reads."""
    import glisp_serving.client.colocated as colocated
    from glisp_serving.cluster.cluster_file import ClusterSpec

    real = colocated.open_partition

    def fail_part1(path, verify=True):  # injected fault: partition 1's files are not readable
        if str(path).endswith("part-00001"):
            raise PermissionError(13, "Permission denied", str(path))
        return real(path, verify=verify)

    monkeypatch.setattr(colocated, "open_partition", fail_part1)
    ids = np.random.default_rng(3).permutation(graph.n)
    with SamplingClient(vc_cluster.cluster_file) as c:
        assert c.backend.colocated.parts == {0, 2}
        before = [s["vertices_served"] for s in c.stats()]
        got = c.lookup(ids)
        served = [s["vertices_served"] - b for s, b in zip(c.stats(), before, strict=True)]
        mastered = np.bincount(c.routing.master[ids], minlength=3)
    assert served == [0, int(mastered[1]), 0]  # only partition 1 answered Lookup RPCs
    assert np.array_equal(got["features"], graph.features[ids]) and np.array_equal(got["labels"], graph.labels[ids])
    spec = ClusterSpec.read(vc_cluster.cluster_file)
    elsewhere = ClusterSpec(
        dataset="/nonexistent/glisp/dataset/v1", run=spec.run, num_parts=3, addresses=spec.addresses
    )
    assert colocated.open_colocated(elsewhere, c.routing.master) is None  # dataset not on this host
    assert colocated.open_colocated(spec, np.zeros(graph.n, np.int32)) is None  # files of another run


def test_gather_stream_answers_equal_unary_calls(vc_cluster, client, graph):
    """The default client gathers over one stream per server; unary calls give identical samples."""
    from glisp_core.config import ClientConfig

    frontier = np.arange(0, graph.n, 3)
    with SamplingClient(vc_cluster.cluster_file, ClientConfig(gather_streams=False)) as unary:
        for kw in ({"method": "uniform"}, {"method": "weighted"}, {"direction": "in", "method": "replace"}):
            a = client.gather(frontier, 4, seed=5, edge_ids=True, **kw)
            b = unary.gather(frontier, 4, seed=5, edge_ids=True, **kw)
            assert np.array_equal(a.counts, b.counts) and np.array_equal(a.nbrs, b.nbrs), kw
            assert np.array_equal(a.edge_ids, b.edge_ids), kw
        assert not unary.backend._streams
    streams = dict(client.backend._streams)
    assert len(streams) == 3 and not client.backend._unary_only and all(s.failed is None for s in streams.values())
    with pytest.raises(SamplingError, match="does not exist") as ei:  # a bad request fails alone ...
        client.gather(frontier, {"nope": 2})
    assert ei.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert client.gather(frontier, 2).nbrs.size > 0  # ... and the same streams serve the next one
    assert client.backend._streams == streams and all(s.failed is None for s in streams.values())


@pytest.mark.parametrize("streams", [True, False], ids=["stream", "unary"])
def test_retries_fail_over_and_deadlines(vc_cluster, graph, tmp_path, streams, server_processes):
    """UNAVAILABLE is retried on the partition's next address; a request past client.deadline_s fails."""
    from glisp_core.config import ClientConfig
    from glisp_serving.cluster.cluster_file import ClusterSpec

    spec = ClusterSpec.read(vc_cluster.cluster_file)
    # nothing listens on port 1
    dead = ClusterSpec(
        dataset=spec.dataset,
        run=spec.run,
        num_parts=spec.num_parts,
        addresses=[["127.0.0.1:1"] + a for a in spec.addresses],
    )
    dead.write(tmp_path / "dead-first.json")
    cfg = ClientConfig(gather_streams=streams, backoff_s=0.01, local_reads="never")
    with SamplingClient(tmp_path / "dead-first.json", cfg) as c:
        batch = c.sample(np.arange(50), [3, 2], seed=1)
        assert batch.num_sampled_edges > 0 and all((k, 0) in c.backend._down for k in range(3))  # failed over
        assert np.array_equal(batch.y.numpy(), graph.labels[:50])
    # a slow server (fault injected: every Gather sleeps 3 s), listed for every partition: each attempt
    # (1 + client.retries) runs into client.deadline_s. A tiny deadline alone is not enough: gRPC rounds
    # deadlines up to whole milliseconds, and a fast machine answered within 1 us's rounded deadline.
    port_file = tmp_path / "slow-port"
    env = dict(os.environ, PYTHONPATH=str(ROOT), GLISP_FAULT_GATHER_DELAY_S="3")
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "glisp_app.cli",
            "serve",
            str(graph.dv.path),
            "--partition",
            "1",
            "--run",
            spec.run,
            "--port",
            "0",
            "--port-file",
            str(port_file),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        slow = ClusterSpec(
            dataset=spec.dataset,
            run=spec.run,
            num_parts=spec.num_parts,
            addresses=[[_wait_port(p, port_file)]] * spec.num_parts,
        )
        slow.write(tmp_path / "slow.json")
        cfg = ClientConfig(gather_streams=streams, deadline_s=0.3, backoff_s=0.01)
        with SamplingClient(tmp_path / "slow.json", cfg) as c:
            with pytest.raises(SamplingError) as ei:
                c.gather(np.arange(graph.n), 50, method="weighted")
    finally:
        p.kill()
        p.wait()
    assert ei.value.code == grpc.StatusCode.DEADLINE_EXCEEDED


def test_reproducible_for_a_fixed_seed(client):
    seeds = np.arange(100, 300, 3)
    a = client.sample(seeds, [4, 3], seed=21)
    b = client.sample(seeds, [4, 3], seed=21)
    c = client.sample(seeds, [4, 3], seed=22)
    for x, y in zip(a.blocks, b.blocks, strict=True):
        assert np.array_equal(x.src_ids, y.src_ids) and np.array_equal(x.edge_index, y.edge_index)
    assert not all(np.array_equal(x.src_ids, y.src_ids) for x, y in zip(a.blocks, c.blocks, strict=True))


def test_loader_prefetch_covers_all_seeds(client):
    seeds = np.arange(0, 512)
    got = [b.seeds.numpy() for b in client.loader(seeds, 100, [3, 2], seed=1, prefetch=3)]
    assert [len(g) for g in got] == [100] * 5 + [12]
    assert np.array_equal(np.sort(np.concatenate(got)), seeds)


def test_clients_share_one_loop_and_closing_one_leaves_the_others_requests_alone(vc_cluster, client):
    """Two clients of one process (a trainer's and its evaluator's) run on one event loop, as gRPC's asyncio
    poller needs; closing one, with batches in flight on both, ends its own requests and none of the other's."""
    closing = SamplingClient(vc_cluster.cluster_file)
    assert closing._loop is client._loop
    sampler = client.sampler([4, 3])
    mine = [client._submit(sampler.sample(np.arange(16 * i, 16 * i + 16), i)) for i in range(12)]
    batches = closing.loader(np.arange(512), 16, [4, 3], seed=1, prefetch=6)
    assert len(next(batches).seeds) == 16  # and five more in flight
    closing.close()
    assert [len(f.result(timeout=60).seeds) for f in mine] == [16] * 12
    with pytest.raises(SamplingError):
        list(batches)
    assert client._loop.is_running() and len(client.sample(np.arange(8), [4, 3]).seeds) == 8


def _raw_gather(addr: str, **kw) -> grpc.RpcError:
    with grpc.insecure_channel(addr) as ch:
        with pytest.raises(grpc.RpcError) as ei:
            pb_grpc.SamplingStub(ch).Gather(pb.GatherRequest(**kw), timeout=10)
    return ei.value


def test_bad_requests_are_invalid_argument(vc_cluster, client, graph):
    addr = json.loads(vc_cluster.cluster_file.read_text())["addresses"][0][0]
    r0 = open_partition(graph.dv.partition_dir("vc-p3", 0), verify=False)
    absent = int(np.setdiff1d(np.arange(graph.n), np.asarray(r0.global_id))[0])
    have = np.asarray(r0.global_id[:3], np.int64)
    cases = {
        "not in partition 0": dict(seeds=to_array(np.array([absent])), fanout=3),
        "must be >= 0": dict(seeds=to_array(have), fanout=-1),
        "does not exist": dict(seeds=to_array(have), type_fanouts=[pb.TypeFanout(edge_type="nope", fanout=2)]),
        "serve.max_batch": dict(seeds=to_array(np.repeat(have[:1], MAX_BATCH + 1)), fanout=1),
        "dtype must be one of": dict(seeds=to_array(have.astype(np.float64)), fanout=2),
        "do not hold shape": dict(seeds=pb.Array(data=b"\x00" * 12, dtype="<i8", shape=[2]), fanout=2),
        "method": dict(seeds=to_array(have), fanout=2, method="magic"),
    }
    for words, kw in cases.items():
        e = _raw_gather(addr, **kw)
        assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, (words, e)
        assert words in e.details(), (words, e.details())
    with grpc.insecure_channel(addr) as ch:
        with pytest.raises(grpc.RpcError) as ei:
            pb_grpc.SamplingStub(ch).Lookup(pb.LookupRequest(vertices=to_array(np.array([absent])), features=True))
        assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(SamplingError, match="does not exist") as ei:
        client.gather(np.array([0, 1]), {"nope": 2})
    assert ei.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert client.gather(have, 2).nbrs.size > 0  # the server is still fine


def test_stats_and_vertex_info(client, graph):
    client.sample(np.arange(graph.n), [2])  # every server has served something, whatever ran before
    st = client.stats()
    assert [s["part_id"] for s in st] == [0, 1, 2]
    for s in st:
        assert s["requests"] > 0 and s["edges_served"] > 0 and s["busy_seconds"] > 0
        assert s["rss_bytes"] > s["partition_bytes"] > 0
        assert s["rss_bytes"] >= s["rss_baseline_bytes"] > 0 and s["rss_import_bytes"] > 0
        assert 0 < s["uss_bytes"] <= s["rss_bytes"] and s["rss_anon_bytes"] > 0 and s["rss_file_bytes"] > 0
        # the partition's memmaps: touched pages only, never more than the files (+ a page per file)
        assert 0 < s["partition_resident_bytes"] <= s["partition_bytes"] + 4096 * 24
        assert s["dataset"] == f"{graph.dv.graph}/{graph.dv.version}" and s["run"] == "vc-p3"
    with grpc.insecure_channel(client.spec.addresses[1][0]) as ch:
        r1 = open_partition(graph.dv.partition_dir("vc-p3", 1), verify=False)
        ids = np.asarray(r1.global_id[:20], np.int64)
        resp = pb_grpc.SamplingStub(ch).VertexInfo(pb.VertexInfoRequest(vertices=to_array(ids)), timeout=5)
        out_deg = np.frombuffer(resp.out_degree.data, np.int64)
        assert np.array_equal(out_deg, np.bincount(graph.src, minlength=graph.n)[ids])
        bits = np.frombuffer(resp.replicas.data, np.uint8).reshape(20, 1)
        assert np.array_equal(bits[:, 0], client.routing.bits[ids, 0])


def test_owner_routing_on_edge_cut(ec_cluster, graph):
    with SamplingClient(ec_cluster.cluster_file, routing="owner") as c:
        vs = np.unique(graph.src)
        for k in range(2):  # the owner of v is the partition holding every out-edge of v
            r = open_partition(graph.dv.partition_dir("ec-p2", k), verify=False)
            held = np.asarray(r.global_id)[np.diff(np.asarray(r.out_indptr)) > 0]
            assert (c.routing.owner[held] == k).all()
        assert set(np.unique(c.routing.owner[vs]).tolist()) == {0, 1}
        hop = c.gather(vs, 4, seed=1)
        deg = np.bincount(graph.src, minlength=graph.n)
        assert np.array_equal(hop.per_vertex, np.minimum(deg[vs], 4))  # D == d_i: exactly min(f, D)
        batch = c.sample(np.arange(0, 512, 7), [4, 2], seed=3)
        assert batch.x.shape[0] == batch.blocks[0].num_src
    from glisp_sampling.cluster_facts import routing_from_partitions

    with pytest.raises(StageError, match="not an edge-cut"):  # a vertex-cut run cannot be owner-routed
        routing_from_partitions(graph.dv, "vc-p3", 3, owner_direction="out")


def test_servers_keep_compiler_pages_released(vc_cluster, client, graph):
    """After warm-up a server unmaps libLLVM's pages; serving must not fault them back in, which it would
    if a request hit a kernel specialisation that warm-up missed (e.g. read-only vs writable ids)."""
    pytest.importorskip("psutil")
    seeds = np.arange(graph.n)
    for method in ("uniform", "weighted", "replace", "uniform_exact"):
        for direction in ("out", "in"):
            client.sample(seeds, [3, 2], method=method, direction=direction)
    client.sample(seeds[:50], [{"cites": 2, "likes": 1}])
    client.sample(seeds[:50], [2], max_time=500)
    servers = list(cluster_servers(vc_cluster.proc.pid).values())
    assert len(servers) == 3
    for proc in servers:
        llvm = sum(m.rss for m in proc.memory_maps() if "libllvmlite" in m.path)
        assert llvm < 8 * 2**20, f"server {proc.pid}: {llvm / 2**20:.1f} MiB of libLLVM resident after serving"


def _wait_port(p: subprocess.Popen, port_file: Path) -> str:
    deadline = time.time() + 60
    while not port_file.exists():
        assert p.poll() is None and time.time() < deadline
        time.sleep(0.05)
    return f"127.0.0.1:{port_file.read_text()}"


def _health(ch: grpc.Channel) -> int:
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    return health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=""), timeout=5).status


def test_serve_sigterm_clean_shutdown(graph, tmp_path, server_processes):
    """SIGTERM: NOT_SERVING visible for serve.drain_s while a request is in flight (Stats.in_flight), that
    request answered, idle streams closed, nothing new accepted after the drain, exit 0."""
    from grpc_health.v1 import health_pb2

    port_file = tmp_path / "port"
    env = dict(os.environ, PYTHONPATH=str(ROOT), GLISP_FAULT_GATHER_DELAY_S="4")  # each Gather in flight >= 4 s
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "glisp_app.cli",
            "serve",
            str(graph.dv.path),
            "--partition",
            "1",
            "--run",
            "vc-p3",
            "--port",
            "0",
            "--port-file",
            str(port_file),
            "--set",
            "serve.grace_s=120",
            "--set",
            "serve.drain_s=2",
            "--set",
            "serve.max_streams=1",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        addr = _wait_port(p, port_file)
        with grpc.insecure_channel(addr) as ch:
            stub = pb_grpc.SamplingStub(ch)
            one = to_array(np.asarray(open_partition(graph.dv.partition_dir("vc-p3", 1), verify=False).global_id[:1]))
            # an idle open Gather stream (answered once), and a second one refused (serve.max_streams=1)
            feed: queue.Queue = queue.Queue()
            stream = stub.GatherStream(iter(feed.get, None))
            feed.put(pb.GatherRequest(seeds=one, fanout=2, request_id=7))
            first = next(stream)
            assert first.request_id == 7 and first.part_id == 1 and first.error_code == 0
            with pytest.raises(grpc.RpcError) as ei:
                next(stub.GatherStream(iter([pb.GatherRequest(seeds=one, fanout=2)])))
            assert ei.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            fut = stub.Gather.future(pb.GatherRequest(seeds=one, fanout=2), timeout=120)
            while stub.Stats(pb.StatsRequest(), timeout=5).in_flight < 1:
                time.sleep(0.02)
            p.send_signal(signal.SIGTERM)
            deadline = time.time() + 2
            while _health(ch) != health_pb2.HealthCheckResponse.NOT_SERVING:  # probes see the drain
                assert time.time() < deadline, "health never went NOT_SERVING during serve.drain_s"
                time.sleep(0.05)
            st = stub.Stats(pb.StatsRequest(), timeout=5)
            assert not st.serving and st.in_flight == 1  # still in flight while draining
            assert fut.result().part_id == 1  # ... and answered
            with pytest.raises(grpc.RpcError):  # the idle stream is closed, not left to the 120 s grace
                next(stream)
            time.sleep(0.5)
            with pytest.raises(grpc.RpcError):  # and nothing new is accepted once the drain ended
                stub.Gather(pb.GatherRequest(seeds=one, fanout=2), timeout=5)
            feed.put(None)
        assert p.wait(timeout=60) == 0
        assert "stopped" in p.stdout.read()
    finally:
        if p.poll() is None:
            p.kill()


def test_serve_cluster_sigterm_stops_children(vc_cluster):  # last: it stops the module's cluster
    code = vc_cluster.stop()
    assert code == 0, vc_cluster.output(40)  # which server did not stop cleanly, and how
    assert not vc_cluster.cluster_file.exists()
