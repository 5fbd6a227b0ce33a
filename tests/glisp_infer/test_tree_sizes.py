"""bench/tree_sizes.py models the sample-wise sampler's blocks to size trees on graphs too large to build; at
full fanout the model has no randomness, so its slice rows must equal the real sampler's exactly."""

from __future__ import annotations

import numpy as np
import pytest

from tests.glisp_infer.conftest import make_model

pytestmark = pytest.mark.usefixtures("spark")


def test_tree_model_counts_the_real_samplers_slice_rows(infer_graph) -> None:
    from glisp_infer.samplewise import Samplewise
    from glisp_testing.tree_sizes import batch_rows

    g = infer_graph
    order = np.argsort(g.dst, kind="stable")  # direction "in": a vertex's neighbours are its edges' sources
    indptr = np.zeros(g.n + 1, np.int64)
    np.cumsum(np.bincount(g.dst, minlength=g.n), out=indptr[1:])
    nbrs = g.src[order].astype(np.int64)
    seeds = np.random.default_rng(2).permutation(g.n)
    sw = Samplewise.in_process(g.dv, g.run)
    for layers in (2, 3):
        res = sw.run(make_model("sage", layers=layers), seeds, [-1] * layers, batch_size=50, direction="in")
        mark = np.full(g.n, -1, np.int64)
        full = [int(np.diff(indptr).max())] * layers
        counts = [batch_rows(indptr, nbrs, full, seeds[a : a + 50], 0, mark, a) for a in range(0, g.n, 50)]
        assert res.batches == len(counts)
        assert res.slice_rows == sum(c[0] for c in counts)
        assert res.input_vertices == sum(c[1] for c in counts)
        assert res.slice_rows > layers * g.n  # the batches' trees overlap only in part
