"""The halo exchange between layers: each partition receives exactly the rows it needs, files appear whole or not
at all, and a retried producer rewrites them."""

from __future__ import annotations

import numpy as np
import pytest

from glisp_core.errors import GlispError
from glisp_infer import halo as H

STARTS = (0, 16, 48)  # three partitions: rows [0, 10), [16, 40), [48, 53)
COUNTS = (10, 24, 5)


def _setup(tmp_path):
    """Partition 1 (rows 16..39, vertex of row r = 100 + r) is the producer; 0 and 2 sample some of its vertices."""
    row_of = lambda v: np.asarray(v) - 100  # noqa: E731
    own = {k: 100 + np.arange(s, s + c) for k, (s, c) in enumerate(zip(STARTS, COUNTS, strict=True))}
    nbrs0 = np.array([139, 116, 120, 139, 101, 148, 120])  # from 1: rows 39, 16, 20; 101 is own; 148 from 2
    nbrs2 = np.array([130, 102, 130])
    for part, nbrs in ((0, nbrs0), (2, nbrs2), (1, np.array([105, 150]))):  # 1 needs from 0 and 2
        H.write_needs(tmp_path, 0, part, np.setdiff1d(nbrs, own[part]), row_of, STARTS)
    return own


def test_each_partition_gets_exactly_its_rows(tmp_path) -> None:
    _setup(tmp_path)
    vals = np.arange(24 * 3, dtype=np.float32).reshape(24, 3)  # partition 1's rows in row order
    w = H.HaloWriter(tmp_path, 0, 1, 3, 3)
    for a in range(0, 24, 7):  # the rows stream by in batches
        w.add(vals[a : a + 7])
    assert not H.halo_file(tmp_path, 0, 1, 0).exists()  # nothing visible before close
    w.close()
    assert w.rows_written == 4
    with np.load(H.needs_file(tmp_path, 0, 1, 0)) as z:
        assert z["vid"].tolist() == [116, 120, 139] and z["pos"].tolist() == [0, 4, 23]
    np.testing.assert_array_equal(np.load(H.halo_file(tmp_path, 0, 1, 0)), vals[[0, 4, 23]])
    np.testing.assert_array_equal(np.load(H.halo_file(tmp_path, 0, 1, 2)), vals[[14]])
    # the consumer: partition 0 needs 116, 120, 139 from 1 and 148 from 2
    w2 = H.HaloWriter(tmp_path, 0, 2, 3, 3)
    w2.add(np.full((5, 3), 7, np.float32))
    w2.close()
    ids, blocks = H.read_halo(tmp_path, 0, 0, 3, 3)
    assert ids.tolist() == [116, 120, 139, 148]
    np.testing.assert_array_equal(np.concatenate(blocks), np.r_[vals[[0, 4, 23]], np.full((1, 3), 7, np.float32)])


def test_a_dead_or_short_producer_leaves_no_file_and_a_retry_rewrites_it(tmp_path) -> None:
    _setup(tmp_path)
    vals = np.ones((24, 3), np.float32)
    dead = H.HaloWriter(tmp_path, 0, 1, 3, 3)
    dead.add(vals[:20])  # killed here: its temporary files never become halo files
    short = H.HaloWriter(tmp_path, 0, 1, 3, 3)
    short.add(vals[:20])
    with pytest.raises(GlispError, match="2 of 3 rows"):
        short.close()
    short.abort()
    assert not list(tmp_path.glob("halo-*"))
    with pytest.raises(GlispError, match="missing"):
        H.read_halo(tmp_path, 0, 0, 3, 3)
    retry = H.HaloWriter(tmp_path, 0, 1, 3, 3)
    retry.add(2 * vals)
    retry.close()
    np.testing.assert_array_equal(np.load(H.halo_file(tmp_path, 0, 1, 0)), np.full((3, 3), 2, np.float32))
    dead.abort()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
    # a halo of the wrong width is refused, not misread
    np.save(H.halo_file(tmp_path, 0, 2, 0), np.zeros((1, 4), np.float32))
    with pytest.raises(GlispError, match="shape"):
        H.read_halo(tmp_path, 0, 0, 3, 3)
