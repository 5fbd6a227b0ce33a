"""A layer task's slice calls hold a bounded number of sampled edges: a batch of hubs is split by its edges (a
hub alone is one batch), with the same rows as unbounded batches (the real stream, static cache on disk,
dynamic cache and checkpoint)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from glisp_core.models import save_checkpoint
from glisp_infer import task as T
from glisp_infer.cache import ChunkCache, StaticCache
from tests.glisp_infer.conftest import make_model

N, FOREIGN, HUB = 120, 30, 7


class _Rows:
    def __init__(self) -> None:
        self.parts: list[np.ndarray] = []

    def add(self, rows: np.ndarray) -> None:
        self.parts.append(np.array(rows))


def test_slice_batches_bound_vertices_and_edges() -> None:
    deg = np.array([1, 1, 50, 1, 1, 2, 2, 2, 0, 3], np.int64)
    eoff = np.concatenate([[0], np.cumsum(deg)])
    starts, ends = T.slice_batches(eoff, 4, 5)
    assert list(zip(starts, ends, strict=True)) == [(0, 2), (2, 3), (3, 6), (6, 9), (9, 10)]
    assert T.slice_batches(eoff, 4, 10**9) == ([0, 4, 8], [4, 8, 10])  # the vertex count alone
    assert T.slice_batches(np.zeros(1, np.int64), 4, 5) == ([], [])
    assert T.batch_edges(256, 8) == T.BATCH_BYTES // 2048 and T.batch_edges(1 << 40, 8) == 1


def _stream(tmp_path, double: bool, sub: str) -> tuple[np.ndarray, dict]:
    rng = np.random.default_rng(3)
    model = make_model("sage")
    ckpt = save_checkpoint(tmp_path / "ckpt", model)
    vids = np.arange(N, dtype=np.int64)
    per_vertex = rng.integers(0, 4, N)
    per_vertex[HUB : HUB + 3] = [200, 150, 90]  # three hubs in one batch of 32 vertices
    nbrs = rng.integers(0, N + FOREIGN, int(per_vertex.sum())).astype(np.int64)
    ids = np.arange(N + FOREIGN, dtype=np.int64)
    feats = rng.standard_normal((len(ids), 6)).astype(np.float32)
    (tmp_path / sub).mkdir()
    cache = StaticCache(tmp_path / sub, ids, 6, 4)
    cache.put(np.arange(len(ids)), feats)
    plan = SimpleNamespace(
        device="cpu", checkpoint=str(ckpt), stable=double, double=double, relations=(), batch_size=32, dims=(6, 8, 3),
        cache_admit_window=1, shadow_fractions=(), project_first=True,
    )  # fmt: skip
    sample = SimpleNamespace(nbrs=nbrs, counts=per_vertex.reshape(-1, 1))
    out = _Rows()
    try:
        m = T.stream(plan, 1, cache, ChunkCache(cache, 3, "fifo"), vids, sample, out)
    finally:
        cache.close()
    # the reference: slice 0 over the whole graph at once
    dst = np.repeat(vids, per_vertex)
    with torch.no_grad():
        x = torch.from_numpy(feats).double() if double else torch.from_numpy(feats)
        ref = model.double() if double else model
        want = ref.layer(0, x, torch.from_numpy(np.stack([nbrs, dst])), len(ids), None)[:N].float().numpy()
    return np.concatenate(out.parts), {**m, "want": want}


@pytest.mark.parametrize("double", [True, False], ids=["float64", "float32"])
def test_a_batch_of_hubs_is_split_by_its_edges_with_the_same_rows(tmp_path, monkeypatch, double) -> None:
    free, mf = _stream(tmp_path, double, "free")
    assert mf["batches"] == 4 and mf["batch_edges_max"] > 440  # the hubs' batch: 440 edges and more
    width = 8 if double else 4
    monkeypatch.setattr(T, "BATCH_BYTES", 100 * 6 * width)  # at most 100 edges of rows of 6 values
    got, mb = _stream(tmp_path, double, "bounded")
    assert mb["batches"] > 4
    assert mb["batch_edges_max"] == 200  # the largest hub, alone; every other batch holds 100 edges or fewer
    if double:  # float64 per row: a row does not depend on its batch
        np.testing.assert_array_equal(got, free)
    np.testing.assert_allclose(got, mf["want"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(free, mf["want"], rtol=1e-5, atol=1e-6)
