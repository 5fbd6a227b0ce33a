"""The Zarr layout: every chunk belongs to one partition, writes cover whole chunks, reads count chunks."""

from __future__ import annotations

import numpy as np
import pytest

from glisp_core.errors import GlispError
from glisp_infer.store import (
    ChunkReader,
    Codec,
    RowLayout,
    create_arrays,
    fill_static,
    layer_name,
    open_array,
    read_rows,
    stored_bytes,
    write_owned,
)


def test_row_layout_pads_each_partition_to_whole_chunks() -> None:
    lay = RowLayout(16, (20, 0, 16, 1))
    assert lay.padded == (32, 0, 16, 16) and lay.starts == (0, 32, 32, 48) and lay.rows == 64
    assert [list(lay.chunks_of(k)) for k in range(4)] == [[0, 1], [], [2], [3]]
    assert RowLayout.from_dict(lay.to_dict()) == lay
    owner = np.concatenate([np.full(p // 16, k) for k, p in enumerate(lay.padded)])
    assert len(owner) == lay.rows // 16  # each chunk has exactly one owning partition


def test_owned_writes_and_chunk_counted_reads(tmp_path) -> None:
    lay = RowLayout(4, (6, 3))
    url = str(tmp_path / "z")
    create_arrays(url, lay, [3], 9, Codec("blosclz", 9, "bitshuffle"), {"order": "pds"})
    arr = open_array(url, layer_name(0), mode="r+")
    vals = np.arange(27, dtype=np.float32).reshape(9, 3)
    assert write_owned(arr, 0, vals[:6], 4) == 2 and write_owned(arr, 8, vals[6:], 4) == 1
    with pytest.raises(GlispError, match="not a multiple of the chunk rows"):
        write_owned(arr, 6, vals[:2], 4)
    got = np.asarray(open_array(url, layer_name(0))[:])
    np.testing.assert_array_equal(got[[0, 1, 2, 3, 4, 5, 8, 9, 10]], vals)
    assert not got[[6, 7, 11]].any()  # padding rows are zero
    rows, nch = read_rows(open_array(url, layer_name(0)), np.array([9, 0, 9, 5]))
    np.testing.assert_array_equal(rows, vals[[7, 0, 7, 5]])
    assert nch == 3 and stored_bytes(arr, lay.chunks_of(0)) > 0
    with pytest.raises(GlispError, match="clevel"):
        Codec("blosclz", 11).zarr_codec()


@pytest.mark.parametrize("compressor", ["blosc", "raw"])
def test_chunks_encoded_here_equal_zarrs_own_writes(tmp_path, compressor) -> None:
    """``write_owned`` encodes whole chunks itself and stores each in one ``set``: the stored bytes are the ones
    zarr's own pipeline writes for the same values (Blosc and raw), padding included, and zarr reads them back."""
    import zarr

    codec = Codec("lz4", 5, "shuffle").zarr_codec(final=compressor == "blosc")
    vals = np.random.default_rng(1).standard_normal((10, 3)).astype(np.float32)
    made = [
        zarr.create_array(store=str(tmp_path / w), shape=(12, 3), chunks=(4, 3), dtype="float32", compressors=codec)
        for w in ("ours", "zarr")
    ]
    assert write_owned(made[0], 0, vals, 4) == 3
    made[1][:] = np.concatenate([vals, np.zeros((2, 3), np.float32)])
    for c in range(3):
        mine, theirs = ((tmp_path / w / "c" / str(c) / "0").read_bytes() for w in ("ours", "zarr"))
        assert mine == theirs
    np.testing.assert_array_equal(np.asarray(zarr.open_array(str(tmp_path / "ours"))[:10]), vals)
    assert (compressor == "raw") == (len(made[0].metadata.codecs) == 1)
    reader = ChunkReader(made[0])  # raw chunks read as their bytes, others through zarr: the same rows
    assert reader.raw == (compressor == "raw")
    np.testing.assert_array_equal(reader.get(1), vals[4:8])
    got = np.zeros((3, 3), np.float32)
    assert fill_static(lambda j, r: got.__setitem__(j, r), made[0], np.array([9, 0, 5]), 4) == 3
    np.testing.assert_array_equal(got, vals[[9, 0, 5]])
    empty = zarr.create_array(
        store=str(tmp_path / "empty"), shape=(8, 3), chunks=(4, 3), dtype="float32", compressors=codec, fill_value=2.5
    )
    assert (ChunkReader(empty).get(1) == 2.5).all()  # a chunk never written reads as the fill value


def test_intermediate_layers_are_raw_and_the_final_one_compressed(tmp_path) -> None:
    """``infer.intermediate_compressor``: layers 0..K-1 raw by default, the final layer with the Blosc settings;
    "same" compresses every layer."""
    lay = RowLayout(4, (6,))
    for inter, raw_layers in (("none", [True, True, False]), ("same", [False, False, False])):
        url = str(tmp_path / inter)
        create_arrays(url, lay, [3, 5, 2], 6, Codec("blosclz", 9, "bitshuffle", inter), {"order": "pds"})
        got = [len(open_array(url, layer_name(i)).metadata.codecs) == 1 for i in range(3)]
        assert got == raw_layers
    with pytest.raises(GlispError, match="intermediate_compressor"):
        Codec(intermediate="zstd").zarr_codec(final=False)  # type: ignore[arg-type]


def test_small_partitions_get_smaller_chunks() -> None:
    from glisp_infer.job import effective_chunk_rows

    assert effective_chunk_rows(32768, [65536, 70000]) == 32768
    assert effective_chunk_rows(32768, [3000, 2900]) == 3072  # not 32,768 rows of padding per partition
    assert effective_chunk_rows(16, [100, 90]) == 16


def test_a_link_split_model_infers_over_the_full_run() -> None:
    """A model trained on a ``glisp link-split`` run (params as link_split publishes them) infers over the run
    it was derived from; any other run is kept."""
    from glisp_core.dataset.manifest import Manifest, StageRecord
    from glisp_infer.job import full_run

    def part(name: str, **params) -> StageRecord:
        return StageRecord(f"partition/{name}", f"partition/{name}", "f", params={"parts": 2, **params})

    m = Manifest("g", "v", stages={r.name: r for r in (part("p2"), part("p2-lp", edge_subset=True, derived_from="p2"))})
    assert full_run(m, "p2-lp") == "p2" and full_run(m, "p2") == "p2"
    assert full_run(m, "gone") == "gone" and full_run(m, None) is None


def test_rows_asked_in_order_decode_each_chunk_once_and_any_order_is_still_right(tmp_path) -> None:
    """The outputs' pass reads its rows sorted by row, batch after batch (glisp_infer.outputs.InOrder)."""
    from glisp_infer.outputs import InOrder

    lay = RowLayout(4, (10, 5))
    url = str(tmp_path / "z")
    create_arrays(url, lay, [2], 15, Codec("blosclz", 5, "bitshuffle"), {"order": "pds"})
    arr = open_array(url, layer_name(0), mode="r+")
    vals = np.arange(20 * 2, dtype=np.float32).reshape(20, 2)
    arr[:] = vals
    decoded: list[int] = []

    class Counted:  # the array, counting the chunks decoded
        chunks, shape, dtype = arr.chunks, arr.shape, arr.dtype

        def __getitem__(self, sel):
            decoded.append(sel.start // 4)
            return arr[sel]

    r = InOrder(Counted())
    batches = [np.array([0, 1, 3, 5]), np.array([6, 7, 12]), np.array([13, 14, 17, 19])]
    for b in batches:
        np.testing.assert_array_equal(r.take(b), vals[b])
    assert decoded == [0, 1, 3, 4]  # chunk 1 kept across the first two batches, chunk 2 never read
    np.testing.assert_array_equal(r.take(np.array([18, 2, 9, 2])), vals[[18, 2, 9, 2]])
    assert decoded[4:] == [0, 2, 0]  # unordered rows: a decode per change of chunk, still the right rows


def test_a_batch_of_located_ids_gets_its_rows_labels_predictions_and_probabilities(tmp_path) -> None:
    """The outputs' columns of one batch (glisp_infer.outputs.vertex_columns): each id beside its own row, a
    negative label null (as glisp train writes it), the arg-max class and its softmax probability."""
    import pyarrow as pa

    from glisp_infer.outputs import InOrder, vertex_columns

    lay = RowLayout(4, (6, 3))
    url = str(tmp_path / "z")
    create_arrays(url, lay, [3], 9, Codec("blosclz", 5, "bitshuffle"), {"order": "pds"}, labels=True)
    emb, lab = open_array(url, layer_name(0), mode="r+"), open_array(url, "index/label", mode="r+")
    h = np.random.default_rng(0).normal(size=(12, 3)).astype(np.float32)
    emb[:] = h
    lab[:] = np.array([2, -1, 0, 1, 1, 0, -1, -1, 2, 0, 1, -1], np.int64)
    rows = np.array([1, 2, 8, 10])
    b = pa.RecordBatch.from_pydict(
        {"orig_id": ["b", "c", "x", "y"], "vtype": ["v0"] * 4, "vid": [5, 0, 7, 3], "part": [0, 0, 1, 1], "row": rows}
    )
    cols = vertex_columns(b, InOrder(emb), InOrder(lab))
    got = np.stack(cols["embedding"].to_pylist())
    np.testing.assert_array_equal(got, h[rows])
    assert cols["vid"].to_pylist() == [5, 0, 7, 3] and cols["row"].to_pylist() == rows.tolist()
    assert cols["label"].to_pylist() == [None, 0, 2, 1]
    assert cols["prediction"].to_pylist() == h[rows].argmax(1).tolist()
    p = np.exp(h[rows]) / np.exp(h[rows]).sum(1, keepdims=True)
    np.testing.assert_allclose(cols["score"].to_numpy(), p.max(1), rtol=1e-6)
    assert "label" not in vertex_columns(b, InOrder(emb), None)  # a link task: ids and rows only
