"""Which endpoint of a held-out edge the test ranking queries from (glisp_train.rank_test._oriented)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from glisp_train.rank_test import _oriented

# vertices 0-2 are users (type 0), 3-7 items (type 1); the held-out pairs (0,3) (1,4) (2,5), stored both ways
VT = np.array([0, 0, 0, 1, 1, 1, 1, 1])
SRC, DST = np.array([0, 3, 1, 4, 2, 5]), np.array([3, 0, 4, 1, 5, 2])


def _task(typed=True, undirected=True, rank_from=-1):
    return SimpleNamespace(typed=typed, undirected=undirected, rank_from=rank_from, vtype=VT if typed else None)


def test_an_undirected_typed_graph_ranks_from_the_smaller_type_or_the_one_named():
    s, d, qt = _oriented(_task(), SRC, DST)
    assert qt == 0 and s.tolist() == [0, 1, 2] and d.tolist() == [3, 4, 5]  # users (3) beside items (5)
    s, d, qt = _oriented(_task(rank_from=1), SRC, DST)
    assert qt == 1 and s.tolist() == [3, 4, 5] and d.tolist() == [0, 1, 2]


def test_directed_or_untyped_graphs_rank_the_test_edges_as_given():
    for task in (_task(undirected=False), _task(typed=False)):
        s, d, qt = _oriented(task, SRC, DST)
        assert qt == -1 and s.tolist() == SRC.tolist() and d.tolist() == DST.tolist()
    s, _, qt = _oriented(_task(undirected=False, rank_from=1), SRC, DST)  # named: its sources only
    assert qt == 1 and s.tolist() == [3, 4, 5]
