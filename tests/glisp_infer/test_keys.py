"""Vertex keys: the same numbers as earlier builds' pandas hash, written by Spark tasks chunk by chunk."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from glisp_infer.keys import vertex_keys, write_keys
from glisp_testing.driver_memory import traced


def pandas_keys(vt: np.ndarray, orig: np.ndarray) -> np.ndarray:
    """The keys as earlier builds computed them (a previous version's ``index/key`` holds these)."""
    text = pd.Series(vt, dtype=object).astype(str) + "\x1f" + pd.Series(orig, dtype=object).astype(str)
    return np.asarray(pd.util.hash_array(text.to_numpy(object), categorize=False), np.uint64)


def test_keys_equal_the_pandas_hash_of_type_and_id_text():
    rng = np.random.default_rng(0)
    names = np.array(["user", "item", "v0", "", "ünïcødé-типа"], dtype=object)
    vt = names[rng.integers(0, len(names), 5000)]
    ints = rng.integers(-(10**15), 10**15, 5000)
    text = np.array(["".join(chr(c) for c in rng.integers(32, 0x3000, rng.integers(0, 40))) for _ in range(5000)])
    assert np.array_equal(vertex_keys(vt, ints), pandas_keys(vt, ints))  # every tail length 0-7 and whole words
    assert np.array_equal(vertex_keys(vt, text.astype(object)), pandas_keys(vt, text))
    assert np.array_equal(vertex_keys(vt[:3], ints[:3].astype(str)), vertex_keys(vt[:3], ints[:3]))  # id type change
    sliced = pa.array(text.tolist())[1000:1100]  # an Arrow slice: its offsets start inside the buffer
    assert np.array_equal(
        vertex_keys(pa.array(vt[1000:1100].tolist()), sliced), pandas_keys(vt[1000:1100], text[1000:1100])
    )
    with pytest.raises(ValueError, match="null"):
        vertex_keys(pa.array(["v0", None]), pa.array([1, 2]))


def _graph(root, n: int, seed: int):
    """A dataset of n vertices of two types with sparse string ids; its id map shuffled over three files."""
    from glisp_testing.graphs import write_dataset

    rng = np.random.default_rng(seed)
    orig = np.char.add("acct-", rng.choice(10**12, n, replace=False).astype(str))
    vtype = rng.integers(0, 2, n).astype(np.int32)
    dv = write_dataset(
        root, "g", np.array([0]), np.array([1]), num_vertices=n, vtype=vtype, vertex_types=["user", "item"],
        orig_ids=orig.tolist(),
    )  # fmt: skip
    store = dv.store
    table = store.read_table(dv.idmap).take(rng.permutation(n))
    for f, _ in list(store.files(dv.idmap)):
        store.delete(dv.idmap / f)
    for k, part in enumerate(np.array_split(np.arange(n), 3)):
        store.write_table(table.take(part), dv.idmap / f"part-{k:05d}.parquet")
    return dv, np.array(["user", "item"], dtype=object)[vtype], orig


def _array(tmp_path, n: int, chunk: int) -> str:
    from glisp_core.storage.zarr_arrays import open_group

    url = str(tmp_path / f"z-{chunk}")
    open_group(url, mode="w").create_array("key", shape=(n,), chunks=(chunk,), dtype="uint64", fill_value=0)
    return url


def test_tasks_write_every_chunk_and_the_driver_holds_nothing_per_vertex(spark, tmp_path):
    from glisp_core.storage.zarr_arrays import open_array

    n = 400_003
    dv, vt, orig = _graph(tmp_path / "root", n, seed=1)
    url = _array(tmp_path, n, chunk=16384)  # 25 chunks, the last one part-filled
    write_keys(spark, dv, url, "key")  # warm: the first job's one-time imports are not the measure
    with traced() as t:
        written = write_keys(spark, dv, url, "key")
    peak = t.peak
    assert written == n
    assert np.array_equal(np.asarray(open_array(url, "key")[:]), pandas_keys(vt, orig))
    # the keys alone would be 8 bytes a vertex in the driver (3.2 MB), their text through pandas 150 or more;
    # what the driver allocates is the job's, about 0.3 MB whatever |V|
    assert peak < 2 * n, f"the driver allocated {peak} bytes for {n} vertices"
    one = _array(tmp_path, n, chunk=n)  # a single chunk (up to INDEX_CHUNK vertices) is written without a job
    assert write_keys(spark, dv, one, "key") == n
    assert np.array_equal(np.asarray(open_array(one, "key")[:]), pandas_keys(vt, orig))


@pytest.mark.parametrize("chunk,ids", [(1000, r"1000\.\.1999"), (8192, r"0\.\.4999")])
def test_an_id_map_missing_a_vertex_fails_naming_it(spark, tmp_path, chunk, ids):
    n = 5000
    dv, _, _ = _graph(tmp_path / "root", n, seed=2)
    table = dv.store.read_table(dv.idmap)
    keep = pa.compute.not_equal(table.column("vid"), 1234)
    for f, _ in list(dv.store.files(dv.idmap)):
        dv.store.delete(dv.idmap / f)
    dv.store.write_table(table.filter(keep), dv.idmap / "part-00000.parquet")
    url = _array(tmp_path, n, chunk=chunk)
    with pytest.raises(Exception, match=rf"idmap: vertex ids {ids} are not each there once"):
        write_keys(spark, dv, url, "key")


def _stages(spark, group: str, fn) -> int:
    """Spark stages the jobs of ``fn()`` ran (they run under the job group ``group``)."""
    sc = spark.sparkContext
    tracker = sc.statusTracker()
    sc.setJobGroup(group, group)
    try:
        fn()
    finally:
        sc.setJobGroup("", "")  # type: ignore[arg-type]
    return sum(len(tracker.getJobInfo(j).stageIds) for j in tracker.getJobIdsForGroup(group))


def test_an_id_map_in_vid_ranges_is_read_by_each_chunks_task_without_a_shuffle(spark, tmp_path):
    """Ingest's id map holds a range of vids per file: each chunk's task reads the files that meet it (ranges
    that straddle chunks, files in any name order), one stage; without footer statistics, or with files whose
    ranges overlap, Spark shuffles the rows (two stages); a chunk no file holds fails naming its ids."""
    from glisp_core.storage.zarr_arrays import open_array

    n = 50_000
    dv, vt, orig = _graph(tmp_path / "root", n, seed=3)
    store, table = dv.store, dv.store.read_table(dv.idmap).sort_by("vid")

    def layout(ranges, statistics=True):
        for f, _ in list(store.files(dv.idmap)):
            store.delete(dv.idmap / f)
        for k, (lo, hi) in enumerate(ranges):  # named from the last range to the first
            name = dv.idmap / f"part-{len(ranges) - k:05d}.parquet"
            store.write_table(table.slice(lo, hi - lo), name, write_statistics=statistics)

    cuts = [0, 100, 16_000, 16_500, 33_000, 49_990, n]  # chunks of 16,384: files meet one, two or three of them
    ranged = list(zip(cuts[:-1], cuts[1:], strict=True))
    layout(ranged)
    url = _array(tmp_path, n, chunk=16384)
    assert _stages(spark, "ranged", lambda: write_keys(spark, dv, url, "key")) == 1
    assert np.array_equal(np.asarray(open_array(url, "key")[:]), pandas_keys(vt, orig))
    layout(ranged, statistics=False)
    url = _array(tmp_path, n, chunk=8192)
    assert _stages(spark, "no-stats", lambda: write_keys(spark, dv, url, "key")) == 2
    assert np.array_equal(np.asarray(open_array(url, "key")[:]), pandas_keys(vt, orig))
    layout([(0, 30_000), (29_000, n)])  # the second file holds the first's last 1,000 rows again
    with pytest.raises(Exception, match=r"idmap: vertex ids 16384\.\.32767 are not each there once"):
        write_keys(spark, dv, _array(tmp_path, n, chunk=16384), "key")
    layout([(0, 16_000), (16_000, 16_384), (32_768, n)])  # no file holds chunk 1's vids
    with pytest.raises(Exception, match=r"idmap: vertex ids 16384\.\.32767 are not each there once"):
        write_keys(spark, dv, _array(tmp_path, n, chunk=16384), "key")
