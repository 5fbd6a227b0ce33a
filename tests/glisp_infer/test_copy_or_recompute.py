"""An incremental layer copies an unaffected row from the previous version only where the chunk it would decode
holds enough of the task's rows; a vertex that moved to another partition is recomputed instead (real Zarr
arrays and the refresh directory's files, as the tasks read them)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import zarr

from glisp_infer import incremental as I
from glisp_infer.store import layer_name

CHUNK = 64


def _plan(tmp_path, prev_row: np.ndarray):
    """A previous version whose layer 1 has chunks of CHUNK rows, and the refresh's new-vid -> previous-row map."""
    prev = tmp_path / "prev.zarr"
    g = zarr.open_group(str(prev), mode="w")
    rows = int(prev_row.max()) + 1
    g.create_array(layer_name(1), shape=(-(-rows // CHUNK) * CHUNK, 4), chunks=(CHUNK, 4), dtype="float32")
    inc = tmp_path / "incremental"
    inc.mkdir()
    I.create_prev_row(inc, len(prev_row))[:] = prev_row
    return SimpleNamespace(prev_store=str(prev), incremental_dir=str(inc))


def test_rows_alone_in_a_chunk_are_recomputed_and_a_part_filled_last_chunk_is_copied(tmp_path):
    # the previous version: 4 full chunks (0..255) and a last chunk holding 10 rows (256..265); new vid v had row v
    prev_row = np.arange(266, dtype=np.int64)
    plan = _plan(tmp_path, prev_row)
    # this task: most of chunk 0, two vertices that moved here from chunk 2, the whole part-filled last chunk
    vids = np.concatenate([np.arange(0, 60), [130, 131], np.arange(256, 266)])
    copy = np.ones(len(vids), bool)
    copy[5] = False  # affected: computed anyway
    out = I.scattered(plan, 1, vids, copy)
    assert vids[out].tolist() == [130, 131]  # 2 rows of a chunk holding 64 (< 1/16): decoding it costs more
    # an affected vertex is never marked, and nothing is marked when every copy is dense
    assert not out[5]
    assert not I.scattered(plan, 1, np.arange(0, 64), np.ones(64, bool)).any()
    # a new vertex (no previous row) is affected, never copied: the map's -1 rows do not count as held
    plan2 = _plan(tmp_path / "b", np.concatenate([np.arange(64), [-1, -1]]))
    assert not I.scattered(plan2, 1, np.arange(64), np.ones(64, bool)).any()


def test_without_a_previous_store_nothing_is_recomputed(tmp_path):
    plan = SimpleNamespace(prev_store="", incremental_dir=str(tmp_path))
    assert not I.scattered(plan, 1, np.arange(5), np.ones(5, bool)).any()
