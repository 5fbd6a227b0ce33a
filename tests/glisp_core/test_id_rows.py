"""IdRows: the table and the binary search find the same positions, and -1 for every id that is not there."""

from __future__ import annotations

import numpy as np
import pytest

from glisp_core.id_rows import IdRows


def _want(ids: np.ndarray, v: np.ndarray) -> np.ndarray:
    at = {int(x): i for i, x in enumerate(ids)}
    return np.array([at.get(int(x), -1) for x in v], np.int64)


@pytest.mark.parametrize("spread", [1, 3, 40])  # dense ids (a table), and sparse ones (a binary search)
def test_positions_of_present_absent_and_out_of_span_ids(spread):
    rng = np.random.default_rng(spread)
    ids = np.unique(rng.integers(10**6, 10**6 + 5000 * spread, 5000))
    rows = IdRows(ids)
    assert (rows.table is not None) == (spread <= 3)
    probe = np.concatenate([rng.permutation(ids)[:700], rng.integers(0, 2 * 10**6 + 5000 * spread, 3000)])
    probe = np.concatenate([probe, [ids[0] - 1, ids[-1] + 1, -5, 0, 2**62]])
    got = rows.find(probe)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, _want(ids, probe))
    np.testing.assert_array_equal(ids[got[got >= 0]], probe[got >= 0])


def test_forced_search_equals_the_table_and_empty_inputs():
    ids = np.arange(3, 3000, 2, dtype=np.int64)
    table, search = IdRows(ids), IdRows(ids, span_factor=0)
    assert table.table is not None and search.table is None and table.nbytes == 4 * (ids[-1] - ids[0] + 1)
    v = np.arange(-2, 3010)
    np.testing.assert_array_equal(table.find(v), search.find(v))
    assert len(IdRows(np.empty(0, np.int64)).find(v)) == len(v) and (IdRows(np.empty(0, np.int64)).find(v) == -1).all()
    assert len(table.find(np.empty(0, np.int64))) == 0
