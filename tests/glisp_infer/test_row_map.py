"""The refresh's new-vid -> previous-row map by vid (the keys' job): the join's map whenever every vid the two
versions share holds the same vertex, and no map at all (the join's turn) when one does not."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from glisp_core.storage.zarr_arrays import open_array, open_group
from glisp_infer import incremental as I
from glisp_infer.keys import vertex_keys
from glisp_infer.row_map import write_kept_rows, write_prev_rows
from glisp_infer.store import INDEX_KEY, INDEX_ROW

TYPES = np.array(["user", "item"], dtype=object)


def _version(root, name: str, orig: np.ndarray, vt: np.ndarray):
    from glisp_testing.graphs import write_dataset

    return write_dataset(
        root, "g", np.array([0]), np.array([1]), num_vertices=len(orig), vtype=vt, vertex_types=list(TYPES),
        orig_ids=orig.tolist(), version=name,
    )  # fmt: skip


def _previous_run(tmp_path, orig: np.ndarray, vt: np.ndarray, chunk: int, seed: int, index=None):
    """A previous run's by-vid ``index/key`` and ``index/row`` (its rows a permutation, as an order's) and its
    published ``index`` table (type name, original id, row), under ``tmp_path`` (a directory or a store URI;
    the table at ``index`` where given)."""
    from glisp_core.storage.store import store_for
    from glisp_core.storage.uri import parse_uri

    n = len(orig)
    rows = np.random.default_rng(seed).permutation(n).astype(np.int64)
    url = str(parse_uri(str(tmp_path)) / "prev.zarr")
    g = open_group(url, mode="w")
    g.create_array(INDEX_KEY, shape=(n,), chunks=(chunk,), dtype="uint64", fill_value=0)[:] = vertex_keys(
        TYPES[vt], orig
    )
    g.create_array(INDEX_ROW, shape=(n,), chunks=(chunk,), dtype="int64", fill_value=-1)[:] = rows
    index = index or parse_uri(str(tmp_path)) / "prev-index"
    table = pa.table({"vtype": pa.array(TYPES[vt].tolist()), "orig_id": pa.array(orig.tolist()), "row": rows})
    store_for(index).write_table(table, index / "part-00000.parquet")
    return url, index


def _run(tmp_path, spark, dv, prev_url, n: int, chunk: int):
    from glisp_core.storage.uri import parse_uri

    where = parse_uri(str(tmp_path))
    url = str(where / "run.zarr")
    open_group(url, mode="w").create_array(INDEX_KEY, shape=(n,), chunks=(chunk,), dtype="uint64", fill_value=0)
    got = write_kept_rows(spark, dv, (url, INDEX_KEY), prev_url, where / "kept", n)
    return got, np.asarray(open_array(I.prev_row_url(where / "kept"), I.PREV_ROW)[:]), url


def _joined(spark, dv, index, tmp_path, n: int) -> tuple[int, np.ndarray]:
    got = write_prev_rows(spark, dv, list(TYPES), index, False, tmp_path / "joined", n)
    return got, np.asarray(open_array(I.prev_row_url(tmp_path / "joined"), I.PREV_ROW)[:])


def _ids(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return np.char.add("acct-", rng.choice(10**12, n, replace=False).astype(str)), rng.integers(0, 2, n).astype(
        np.int32
    )


@pytest.mark.parametrize("chunk", [700, 8192], ids=["tasks", "one-chunk-here"])
@pytest.mark.parametrize("new_n", [5000, 4200], ids=["vertices-added", "tail-removed"])
def test_kept_vids_give_the_joins_map_and_the_keys(spark, tmp_path, chunk, new_n):
    """Vertices added after the others, or the last ones removed: every shared vid kept its vertex, and the map
    by vid equals the join's, new vertices -1; the keys are written by the same job."""
    orig, vt = _ids(5000, seed=1)
    prev_n = 4600
    prev_url, index = _previous_run(tmp_path, orig[:prev_n], vt[:prev_n], chunk=512, seed=2)
    dv = _version(tmp_path / "root", "v2", orig[:new_n], vt[:new_n])
    got, kept, url = _run(tmp_path, spark, dv, prev_url, new_n, chunk=min(chunk, new_n))
    want, joined = _joined(spark, dv, index, tmp_path, new_n)
    assert got == want == min(new_n, prev_n)
    np.testing.assert_array_equal(kept, joined)
    assert (kept[prev_n:] == -1).all() and (kept[: min(new_n, prev_n)] >= 0).all()
    np.testing.assert_array_equal(
        np.asarray(open_array(url, INDEX_KEY)[:]), vertex_keys(TYPES[vt[:new_n]], orig[:new_n])
    )


@pytest.mark.parametrize("chunk", [700, 8192], ids=["tasks", "one-chunk-here"])
def test_a_vid_holding_another_vertex_leaves_the_map_to_the_join(spark, tmp_path, chunk):
    """Two vertices that swapped vids (one vertex of 5,000): no map by vid; the keys are still written."""
    orig, vt = _ids(5000, seed=3)
    prev_url, _ = _previous_run(tmp_path, orig, vt, chunk=512, seed=4)
    swapped = orig.copy()
    swapped[[17, 3999]] = orig[[3999, 17]]
    vt2 = vt.copy()
    vt2[[17, 3999]] = vt[[3999, 17]]
    dv = _version(tmp_path / "root", "v2", swapped, vt2)
    got, _, url = _run(tmp_path, spark, dv, prev_url, 5000, chunk=min(chunk, 5000))
    assert got is None
    np.testing.assert_array_equal(np.asarray(open_array(url, INDEX_KEY)[:]), vertex_keys(TYPES[vt2], swapped))


def test_the_map_by_vid_reads_and_writes_an_object_store(spark, tmp_path, new_s3_root):
    """The previous run, the keys and the refresh's directory in a bucket (the tasks read and write them through
    the storage layer): the same map as the local one."""
    orig, vt = _ids(3000, seed=5)
    root = new_s3_root("rowmap")
    dv = _version(tmp_path / "root", "v2", orig, vt)
    maps = []
    for where in (root, tmp_path):
        prev_url, _ = _previous_run(where, orig[:2900], vt[:2900], chunk=512, seed=6)
        got, kept, _ = _run(where, spark, dv, prev_url, 3000, chunk=700)
        assert got == 2900
        maps.append(kept)
    np.testing.assert_array_equal(maps[0], maps[1])
    assert (maps[0][:2900] >= 0).all() and (maps[0][2900:] == -1).all()


def _jobs(spark, group: str, run) -> int:
    """How many Spark jobs ``run()`` started (in a job group of its own)."""
    sc = spark.sparkContext
    sc.setJobGroup(group, group)
    try:
        run()
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    return len(sc.statusTracker().getJobIdsForGroup(group))


@pytest.mark.parametrize("announced", [True, False], ids=["partition-says-renumbered", "found-by-the-keys"])
def test_renumbered_vids_get_the_joins_map_and_the_keys(spark, tmp_path, announced):
    """Every vid renumbered (a permutation). Where this version's partition record says it found the previous
    version's vertices at other vids (``same_vids`` false, refreshed from that version), the join runs alone and
    writes the keys (one job fewer than comparing keys first); either way the map is the join's and the keys are
    right, and the record says why the map was joined."""
    from glisp_core.config import InferConfig
    from glisp_core.dataset.manifest import StageRecord, read_manifest
    from glisp_infer.refresh import Refresh, renumbered
    from glisp_testing.graphs import write_records

    orig, vt = _ids(3000, seed=7)
    pdv = _version(tmp_path / "root", "v1", orig, vt)
    prev_url, index = _previous_run(tmp_path, orig, vt, chunk=512, seed=8, index=pdv.path / "infer/x/index")
    perm = np.random.default_rng(9).permutation(3000)
    dv = _version(tmp_path / "root", "v2", orig[perm], vt[perm])
    inc = {"base": f"g/{pdv.version}", "same_ids": not announced}  # a record from before same_vids: same_ids stands
    write_records(dv, [StageRecord("partition/p2", "partition/p2/a1", "f", counts={"incremental": inc})])
    counts = read_manifest(dv).stage("partition/p2").counts  # what the job's Inputs read
    assert bool(renumbered("p2", counts, pdv)) == announced
    assert renumbered("p2", counts, dv) == "" and renumbered("p2", {}, pdv) == ""  # another base; a full run
    # a record that says the vids stayed though the edge type codes moved (same_ids false): not renumbered
    edge_types_only = {"base": f"g/{pdv.version}", "same_ids": False, "same_vids": True}
    assert renumbered("p3", {"incremental": edge_types_only}, pdv) == ""

    url = str(tmp_path / "run.zarr")
    open_group(url, mode="w").create_array(INDEX_KEY, shape=(3000,), chunks=(700,), dtype="uint64", fill_value=0)
    r = Refresh(InferConfig(), dv, 3000, "d", list(TYPES), root=tmp_path / "refresh")
    r.prev, r.prev_url, r.renumbered = (
        (pdv, StageRecord("infer/x", "infer/x", "f")),
        prev_url,
        renumbered("p2", counts, pdv),
    )
    jobs = _jobs(spark, f"rowmap-{announced}", lambda: r.start(spark, url))
    assert r.info["row_map"] == "joined by original id" and r.matched == 3000
    assert ("same_vids false" in r.info["row_map_why"]) == announced, r.info
    want, joined = _joined(spark, dv, index, tmp_path, 3000)
    np.testing.assert_array_equal(np.asarray(open_array(I.prev_row_url(tmp_path / "refresh"), I.PREV_ROW)[:]), joined)
    np.testing.assert_array_equal(np.asarray(open_array(url, INDEX_KEY)[:]), vertex_keys(TYPES[vt[perm]], orig[perm]))
    one = _jobs(spark, f"join-{announced}", lambda: _joined(spark, dv, index, tmp_path / "again", 3000))
    assert jobs == one if announced else jobs > one, (jobs, one)  # the keys' job ran first, in vain
