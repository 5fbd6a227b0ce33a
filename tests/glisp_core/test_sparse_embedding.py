"""The learnable node embedding table: initial rows, the sparse Adagrad step against torch's, the holder's limits."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from glisp_core.sparse_embedding import (
    INIT_STD,
    EmbeddingError,
    EmbeddingShard,
    EmbeddingTables,
    TableSpec,
    initial_rows,
)


def test_initial_rows_depend_on_seed_id_and_column_only():
    gids = np.arange(20_000)
    whole = initial_rows(gids, 16, seed=5)
    odd, even = initial_rows(gids[1::2], 16, seed=5), initial_rows(gids[::2], 16, seed=5)
    np.testing.assert_array_equal(whole[1::2], odd)  # however the table is split over holders
    np.testing.assert_array_equal(whole[::2], even)
    assert abs(float(whole.std()) - INIT_STD) < 0.002 and abs(float(whole.mean())) < 0.002
    assert not np.array_equal(whole, initial_rows(gids, 16, seed=6))
    assert np.corrcoef(whole[:, 0], whole[:, 1])[0, 1] < 0.05  # columns are not copies of one another
    assert len({r.tobytes() for r in whole}) == len(gids)


@pytest.mark.filterwarnings("ignore:Sparse invariant checks")
def test_sparse_adagrad_equals_torch_on_batches_with_repeated_ids():
    n, dim, lr = 300, 8, 0.05
    shard = EmbeddingShard(TableSpec("t", dim, seed=1, lr=lr), np.arange(n) * 3)  # held ids need not be 0..n-1
    ref = torch.nn.Embedding(n, dim, sparse=True)
    ref.weight.data.copy_(torch.from_numpy(shard.rows))
    opt = torch.optim.Adagrad(ref.parameters(), lr=lr)
    torch.manual_seed(0)
    rng, w = np.random.default_rng(0), torch.randn(dim, 4)
    for _ in range(25):
        pos = rng.integers(0, n // 2, 64)  # half the rows, many of them twice in a batch
        opt.zero_grad()
        ((ref(torch.from_numpy(pos)) @ w).tanh() ** 2).sum().backward()
        opt.step()
        leaf = torch.from_numpy(shard.fetch(pos * 3)).requires_grad_()
        ((leaf @ w).tanh() ** 2).sum().backward()
        shard.update(pos * 3, leaf.grad.numpy())
    np.testing.assert_allclose(shard.rows, ref.weight.detach().numpy(), atol=1e-5)  # float32 rounding only
    untouched = np.arange(n // 2, n)
    np.testing.assert_array_equal(shard.rows[untouched], initial_rows(untouched * 3, dim, 1))
    assert (shard.state[untouched] == 0).all()


def test_a_shard_refuses_what_it_cannot_answer():
    shard = EmbeddingShard(TableSpec("t", 4), np.array([2, 5, 9]))
    with pytest.raises(EmbeddingError, match=r"1 of 2 vertices are not held here \(e.g. 3\)"):
        shard.fetch(np.array([5, 3]))
    with pytest.raises(EmbeddingError, match=r"float32 of shape \(2, 4\)"):
        shard.update(np.array([2, 5]), np.zeros((2, 3), np.float32))
    with pytest.raises(EmbeddingError, match="no snapshot"):
        shard.fetch(np.array([2]), best=True)
    before = shard.rows.copy()
    shard.snapshot()
    shard.update(np.array([2]), np.ones((1, 4), np.float32))
    np.testing.assert_array_equal(shard.fetch(np.array([2, 9]), best=True), before[[0, 2]])
    assert not np.array_equal(shard.fetch(np.array([2])), before[[0]])
    with pytest.raises(EmbeddingError, match="dim > 0"):
        TableSpec("t", 0).check()


def test_tables_share_a_memory_limit_and_refuse_another_spec_under_one_name():
    tables = EmbeddingTables(limit_bytes=EmbeddingShard.bytes_for(1000, 8))
    a = tables.create(TableSpec("a", 8), np.arange(600))
    assert tables.create(TableSpec("a", 8), np.arange(600)) is a  # every trainer of a group asks for it
    with pytest.raises(EmbeddingError, match="exists with"):
        tables.create(TableSpec("a", 8, lr=0.5), np.arange(600))
    with pytest.raises(MemoryError, match=r"over serve.embedding_mb=0"):
        tables.create(TableSpec("b", 8), np.arange(600), "serve.embedding_mb")
    assert tables.release("a") and not tables.release("a")
    tables.create(TableSpec("b", 8), np.arange(600))
    with pytest.raises(EmbeddingError, match="not held here"):
        tables.get("a")
