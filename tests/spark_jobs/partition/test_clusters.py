"""The clustered start (``clusters.py``): label propagation finds dense circles around hubs, the same on both
paths; whole clusters are packed under both caps; on ego networks of separable circles the packed start is
the one AdaDNE keeps, and the replication falls."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from glisp_core.config import with_values
from glisp_core.errors import ConfigError
from glisp_testing.graphs import FACEBOOK_EGOS, ego_separable_edges, write_dataset
from spark_jobs.partition import clusters
from spark_jobs.partition.job import run_partition
from spark_jobs.partition.registry import get_partitioner

SMALL_EGOS = FACEBOOK_EGOS[4:]  # the six smaller nets of the ego-separable stand-in: 22,944 rows


def _circles(sizes: list[int], seed: int = 0) -> tuple[np.ndarray, np.ndarray, int, list[np.ndarray]]:
    """Cliques of the given sizes around one hub (vertex 0), one link between consecutive cliques (from a
    clique's first member to the next one's second): both directions of every pair, vertex ids shuffled."""
    rng = np.random.default_rng(seed)
    n = 1 + sum(sizes)
    perm = np.concatenate([[0], 1 + rng.permutation(n - 1)])
    pairs, members, at = [], [], 1
    for size in sizes:
        mem = perm[at : at + size]
        x, y = np.triu_indices(size, 1)
        pairs += [np.stack([mem[x], mem[y]], 1), np.stack([np.zeros(size, np.int64), mem], 1)]
        members.append(mem)
        at += size
    pairs += [np.array([[members[i][0], members[i + 1][1]]]) for i in range(len(sizes) - 1)]
    p = np.concatenate(pairs)
    return np.concatenate([p[:, 0], p[:, 1]]), np.concatenate([p[:, 1], p[:, 0]]), n, members


def _labels(src: np.ndarray, dst: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    deg = np.bincount(np.concatenate([src, dst]), minlength=n)
    hub = clusters.hub_mask(deg, 3.0)
    return clusters.held_labels(src, dst, deg, hub), deg, hub


def test_label_propagation_finds_the_circles_around_a_hub():
    src, dst, n, members = _circles([12, 20, 9, 15, 30, 8])
    label, _, hub = _labels(src, dst, n)
    assert hub[0] and hub.sum() == 1 and label[0] == -1
    assert [len(np.unique(label[m])) for m in members] == [1] * len(members)  # each circle one cluster...
    assert len({int(label[m[0]]) for m in members}) == len(members)  # ...and no two circles one


def test_whole_clusters_are_packed_under_both_caps():
    """Every circle gets one home or none; no partition passes ``fill`` of its share of rows or of vertices;
    a circle left without a home fits no partition, and the placed rows are the homed circles' inner rows."""
    src, dst, n, members = _circles([40, 6, 6, 6, 6, 30, 25, 20, 10, 10, 8, 8])
    label, _, _ = _labels(src, dst, n)
    ids, ce, cv = clusters.cluster_weights(src, dst, label)
    p, fill = 3, 0.9
    home = clusters.homes(label, (ids, ce, cv), len(src), p, fill)
    assert home[0] == -1 and all(len(np.unique(home[m])) == 1 for m in members)
    ecap, vcap = fill * len(src) / p, fill * (label >= 0).sum() / p
    c = np.searchsorted(ids, [label[m[0]] for m in members])
    h = np.array([home[m[0]] for m in members])
    el, vl = np.bincount(h[h >= 0], ce[c][h >= 0], p), np.bincount(h[h >= 0], cv[c][h >= 0], p)
    assert el.max() <= ecap and vl.max() <= vcap and (h >= 0).sum() >= len(members) - 3, h
    for k in np.flatnonzero(h < 0):
        assert ((el + ce[c[k]] > ecap) | (vl + cv[c[k]] > vcap)).all(), (k, el, vl)
    rows = clusters.packed_rows(src, dst, home)
    inner = sum(len(m) * (len(m) - 1) for m, hk in zip(members, h, strict=True) if hk >= 0)
    inner += 2 * int(((h[:-1] == h[1:]) & (h[1:] >= 0)).sum())  # a link between two circles of one home
    assert (rows >= 0).sum() == inner and (rows[rows >= 0] == home[src[rows >= 0]]).all()


def test_ego_networks_keep_the_packed_start(spark, cfg, tmp_path_factory):
    """ego-separable (its six smaller nets) at p = 8: the packed start wins over the expansion's starts and lowers RF by more than
    a fifth within the balance bounds; without ``cluster_start`` the result is the expansion's. Past
    ``local_finish_edges`` (labels, weights and the placement as Spark jobs, ``spark_labels`` running the held
    rounds' rule) the partition is the same."""
    (src, dst), n = ego_separable_edges(egos=SMALL_EGOS)
    dv = write_dataset(tmp_path_factory.mktemp("ego"), "ego", src, dst, num_vertices=n)
    c = with_values(cfg, "partition", algorithm="adadne", parts=8, seed=1, progress=False)
    c = with_values(c, "partition.adadne", starts=2)
    on = run_partition(spark, with_values(c, "partition", name="on"), dv, force=True)
    off_cfg = with_values(with_values(c, "partition.adadne", cluster_start=False), "partition", name="off")
    off = run_partition(spark, off_cfg, dv)
    starts = on.counts["starts"]
    assert len(starts) == 3 and len(off.counts["starts"]) == 2
    assert [t["packed"] for t in starts] == [False, False, True], starts
    assert on.metrics["rf"] == min(s["rf"] for s in starts) == starts[2]["rf"], starts
    assert on.metrics["rf"] < 0.8 * off.metrics["rf"], (on.metrics, off.metrics)
    assert on.metrics["vb"] <= 1.10 and on.metrics["eb"] <= 1.05, on.metrics
    files = run_partition(spark, with_values(c, "partition", name="files", local_finish_edges=len(src) - 1), dv)
    assert "packed" in [j["kind"] for j in files.counts["spark_jobs"]]
    a = pd.read_parquet(dv.assignment("on")).sort_values("eid")
    b = pd.read_parquet(dv.assignment("files")).sort_values("eid")
    assert (a.part.values == b.part.values).all() and files.metrics == on.metrics


def test_a_packing_fill_outside_its_range_is_refused_by_name(cfg):
    src, dst, n, _ = _circles([6, 6, 6])
    c = with_values(cfg, "partition", algorithm="adadne", parts=2)
    c = with_values(c, "partition.adadne", cluster_fill=1.5)
    with pytest.raises(ConfigError, match=r"partition\.adadne\.cluster_fill.*e\.g\. 0\.9"):
        get_partitioner(c.partition).run_local(src, dst, n)
