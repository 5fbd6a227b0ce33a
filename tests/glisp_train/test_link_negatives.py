"""Link negatives keep the destination's type on a typed graph (items for a user, never users), and stay any
vertex, drawn as before, on an untyped one."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from glisp_train.tasks import LinkTask


def _task(vtype: np.ndarray | None, held_dst: np.ndarray) -> LinkTask:
    n = len(vtype) if vtype is not None else 50
    held = {"src": np.zeros(len(held_dst), np.int64), "dst": held_dst, "split": np.full(len(held_dst), 2, np.int8)}
    return LinkTask(None, np.ones(n), n, held, n, negatives=7, eval_negatives=40, vtype=vtype)


def test_negatives_are_drawn_among_the_destination_type():
    rng = np.random.default_rng(0)
    vtype = rng.integers(0, 3, 300)  # three types, interleaved ids
    dst = rng.integers(0, 300, 500)
    task = _task(vtype, dst)
    neg = task.draw(rng.random((500, 7)), dst)
    assert neg.shape == (500, 7) and (vtype[neg] == vtype[dst][:, None]).all()
    for t in range(3):  # every vertex of the type can be drawn, nothing else
        assert set(neg[vtype[dst] == t].ravel().tolist()) == set(np.flatnonzero(vtype == t).tolist())
    ev = task.eval_negatives_of("test", seed=4)
    assert ev.shape == (500, 40) and (vtype[ev] == vtype[dst][:, None]).all()
    assert np.array_equal(ev, task.eval_negatives_of("test", seed=4))  # fixed for the run


def test_an_untyped_graph_draws_any_vertex_as_before():
    dst = np.arange(20)
    task = _task(None, dst)
    assert not task.typed
    ev = task.eval_negatives_of("test", seed=4)
    assert np.array_equal(ev, np.random.default_rng([4, 2]).integers(0, 50, (20, 40)))  # the stream of old
    ctx = SimpleNamespace(num_train=50, batch_size=8, seed=1, max_batches=2, dist=SimpleNamespace(world=1, rank=0))
    (src, neg), _ = task.epoch_items(ctx, 0)
    assert neg.dtype == np.int64 and neg.shape == (8, 7) and neg.max() < 50
    single = _task(np.zeros(50, np.int64), dst)  # one vertex type: untyped
    assert not single.typed
