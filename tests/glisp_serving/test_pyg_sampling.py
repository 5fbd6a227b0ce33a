"""The PyG sampler on the served test graph (two edge types, weights, timestamps): typed, weighted, time-bounded.

One vertex type and two edge types make a heterogeneous PyG view with node type ``v0`` and edge types
``(v0, cites, v0)`` and ``(v0, likes, v0)``; its PyG node ids are the global ids.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch_geometric.sampler import NodeSamplerInput

from glisp_train.pyg import GlispSampler, NeighborLoader, glisp_remote

TYPES = ["cites", "likes"]


@pytest.fixture(scope="module")
def remote(vc_cluster):
    r = glisp_remote(vc_cluster.cluster_file)
    yield r
    r.close()


def sampled_edges(graph, out) -> list[tuple[int, int, int, int]]:
    """(source, destination, relation, hop) of every sampled edge, as global ids."""
    got = []
    for (s, rel, d), row in out.row.items():
        assert s == d == "v0"
        col, hops = out.col[(s, rel, d)], np.repeat(np.arange(2), out.num_sampled_edges[(s, rel, d)])
        node = out.node["v0"]
        got += [(int(node[a]), int(node[b]), TYPES.index(rel), int(h)) for a, b, h in zip(row, col, hops, strict=True)]
    return got


def test_typed_sampling_keys_edges_by_triple_and_respects_per_relation_fanouts(remote, graph):
    assert remote.metadata() == (["v0"], [("v0", "cites", "v0"), ("v0", "likes", "v0")])
    hubs = np.argsort(-np.bincount(graph.dst, minlength=graph.n))[:20]
    fan = {("v0", "cites", "v0"): [3, 1], ("v0", "likes", "v0"): [1, 0]}
    torch.manual_seed(0)
    out = GlispSampler(remote, fan).sample_from_nodes(NodeSamplerInput(None, torch.from_numpy(hubs), input_type="v0"))
    assert torch.equal(out.node["v0"][:20], torch.from_numpy(hubs))
    have = set(zip(graph.src.tolist(), graph.dst.tolist(), graph.etype.tolist(), strict=True))
    edges = sampled_edges(graph, out)
    assert edges and all((s, d, r) in have for s, d, r, _ in edges)
    for rel, fans in ((0, [3, 1]), (1, [1, 0])):
        for h, f in enumerate(fans):
            per = np.bincount(
                np.array([d for _, d, r, hh in edges if r == rel and hh == h], np.int64), minlength=graph.n
            )
            assert per.max() <= f
    assert out.num_sampled_edges[("v0", "cites", "v0")][0] == 3 * 20  # hubs have more than 3 of each


def test_weighted_and_time_bounded_sampling(remote, graph):
    hubs = np.argsort(-np.bincount(graph.dst, minlength=graph.n))[:40]
    seeds = NodeSamplerInput(None, torch.from_numpy(hubs), input_type="v0")
    w = {
        (int(s), int(d), int(r)): x for s, d, r, x in zip(graph.src, graph.dst, graph.etype, graph.weight, strict=True)
    }
    ts = {}
    for s, d, r, t in zip(graph.src, graph.dst, graph.etype, graph.ts, strict=True):
        ts[(int(s), int(d), int(r))] = min(int(t), ts.get((int(s), int(d), int(r)), 1 << 62))
    torch.manual_seed(0)
    heavy, plain = [], []
    for _ in range(5):
        out = GlispSampler(remote, [2, 0], weight_attr="weight").sample_from_nodes(seeds)
        heavy += [w[(s, d, r)] for s, d, r, h in sampled_edges(graph, out) if h == 0]
        out = GlispSampler(remote, [2, 0]).sample_from_nodes(seeds)
        plain += [w[(s, d, r)] for s, d, r, h in sampled_edges(graph, out) if h == 0]
    assert np.mean(heavy) > np.mean(plain) + 0.3  # A-ES draws heavy edges first (weights uniform in 0.1..4)
    out = GlispSampler(remote, [5, 5], max_time=300).sample_from_nodes(seeds)
    edges = sampled_edges(graph, out)
    assert edges and all(ts[(s, d, r)] <= 300 for s, d, r, _ in edges)
    with pytest.raises(NotImplementedError, match="max_time"):
        GlispSampler(remote, [2], time_attr="ts")
    with pytest.raises(ValueError, match="num_workers"):
        NeighborLoader(remote, [2, 2], input_nodes=("v0", torch.arange(4)), num_workers=2)
