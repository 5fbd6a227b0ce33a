"""An incremental refresh keeps nothing per vertex in the driver: the row map, the masks and the drift's
distances live in the tasks and in the refresh's files (a graph of 300,007 vertices, most of them isolated, so
that |V| dominates what a per-vertex array would cost while the edges stay few)."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from glisp_testing.driver_memory import traced
from tests.glisp_infer.conftest import _publish_version, infer_cfg, make_model, publish_renumbered

pytestmark = pytest.mark.usefixtures("spark")
N = 300_007  # two chunks of the by-vid arrays: the vertex keys are written by tasks too


def _versions(spark, root):
    """v1, and v2 with 1,000 vertices removed, 7 added, 1 % of the edges replaced, 50 feature rows changed and
    every vid renumbered."""
    from glisp_testing.graphs import rmat_edges

    rng = np.random.default_rng(3)
    src, dst = rmat_edges(14, edge_factor=4, seed=5)
    ok = src != dst
    src, dst = src[ok], dst[ok]
    et = rng.integers(0, 2, len(src)).astype(np.int32)
    feats = rng.normal(size=(N, 6)).astype(np.float32)
    ids = np.array([f"u{i}" for i in range(N)], object)
    old, old_run = _publish_version(spark, root, "v1", ids, src, dst, et, feats, 0)
    gone = rng.choice(np.arange(20_000, N), 1000, replace=False)  # isolated ones: no edge to drop
    keep = rng.random(len(src)) > 0.01
    k = int((~keep).sum())
    s = np.concatenate([src[keep], rng.integers(0, 1 << 14, k)])
    d = np.concatenate([dst[keep], rng.integers(0, 1 << 14, k)])
    e = np.concatenate([et[keep], rng.integers(0, 2, k).astype(np.int32)])
    s, d, e = s[s != d], d[s != d], e[s != d]
    ids2 = np.concatenate([ids, np.array([f"new{i}" for i in range(7)], object)])
    f2 = np.concatenate([feats, rng.normal(size=(7, 6)).astype(np.float32)])
    f2[rng.choice(1 << 14, 50, replace=False)] += 1.0
    new, new_run = publish_renumbered(spark, root, rng, ids2, f2, gone, (s, d, e))
    return old, old_run, new, new_run


def test_an_incremental_refresh_holds_nothing_per_vertex_in_the_driver(spark, tmp_path, monkeypatch):
    from glisp_infer import refresh as R
    from glisp_infer.job import run_infer
    from glisp_train.publish import publish_model

    old, old_run, new, new_run = _versions(spark, tmp_path)
    model = make_model("sage", layers=2)
    cfg = infer_cfg(model="m", run="r", incremental=True, fanouts=[3, 3], chunk_rows=4096, batch_size=4096)
    publish_model(old, "m", model, old_run)
    run_infer(spark, cfg, old)  # the previous run (and the Python workers' imports: not the measure)
    publish_model(new, "m", model, new_run)
    peaks, knn = [], []
    real = R.knn_changed

    def measured(*a, **k):  # the top-k drift's own peak apart: a fixed sample, not a share of |V|
        cur, peaks_so_far = tracemalloc.get_traced_memory()
        peaks.append(peaks_so_far)
        tracemalloc.reset_peak()
        try:
            return real(*a, **k)
        finally:
            knn.append(tracemalloc.get_traced_memory()[1] - cur)
            tracemalloc.reset_peak()

    monkeypatch.setattr(R, "knn_changed", measured)
    with traced() as t:
        rec = run_infer(spark, cfg, new)
    peaks.append(t.peak)
    inc = rec.counts["incremental"]
    assert inc["path"] == "incremental", inc
    assert inc["added"] == 7 and inc["removed"] == 1000 and inc["changed_features"] == 50, inc
    assert 0 < inc["affected_share"][0] < inc["affected_share"][1] < 0.5, inc
    assert rec.metrics["layers"]["layer1"]["copied"] > 0.9 * N
    d = rec.metrics["drift"]
    assert d["matched"] == N - 1000 and 0 < d["moved_share"] < 0.5 and d["cos_p50"] == 0 < d["cos_max"], d
    # a per-vertex array of the refresh in the driver (the row map, the masks, the signatures, the id maps'
    # match, the drift's distances) would be 8 bytes a vertex or more: 2.4 MB here; the run's own driver work
    # (the jobs, the record) is about 0.7 MB
    assert max(peaks) < 4 * N, f"the driver allocated {max(peaks)} bytes for {N} vertices"
    # the top-k drift reads at most KNN_CHUNKS chunks of the by-vid arrays (2 MiB each) and a fixed sample:
    # a fixed cost, which at this |V| (two chunks) cannot be told from a per-vertex one, so it is bounded apart
    assert len(knn) == 1 and knn[0] < R.KNN_CHUNKS * 2 * (8 << 18), f"the top-k drift allocated {knn[0]} bytes"
