"""The Zarr v3 store of an inference run: one array per layer, the row layout, and chunk-aligned I/O.

Layout of the group (a local directory, an object-store URI or any fsspec URL:
:func:`glisp_core.storage.zarr_arrays.open_store`)::

    layers/0 ... layers/K   float32 (rows, d_i): layer 0 = features, layer K = the model's output
    index/vid               int64 (rows,): the vertex of each row, -1 on padding rows
    index/row               int64 (n,): the row of each vertex id
    index/pos               int64 (n,): the vertex's position in the global order (reorder ``pos``)
    index/key               with stable samples (``infer.incremental``): uint64 (n,) the vertex's key
    index/fsig, index/nsig  with stable samples: uint64 (rows,) the hashes of each row's features and neighbourhood

Rows: partition ``k``'s vertices (the ones it masters, hence infers) occupy rows
``[start_k, start_k + n_k)`` in the order's within-partition position (``part_pos``), and
``start_k`` is a multiple of the chunk rows, so every chunk belongs to exactly one partition and
concurrent tasks never write the same chunk. For the partition-major orders (PDS, PS) this is the
order's global position plus padding; for NS and DS it is that order within each partition.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from glisp_core.dataset.order_index import CHUNK as INDEX_CHUNK  # the by-vertex-id arrays chunk as the order's
from glisp_core.errors import GlispError
from glisp_core.storage.store import store_for
from glisp_core.storage.uri import StoreURI, parse_uri
from glisp_core.storage.zarr_arrays import open_array as open_array  # re-exported: the run's modules open arrays here
from glisp_core.storage.zarr_arrays import open_group

STORE_FILE = "store.json"  # in a stage whose group lives elsewhere (infer.store): its URL
ZARR_DIR = "zarr"  # the group inside the stage otherwise
LAYERS = "layers"
INDEX_VID = "index/vid"
INDEX_ROW = "index/row"
INDEX_POS = "index/pos"
INDEX_KEY = "index/key"  # uint64 (n,): the vertex's key, a hash of its type and original id (glisp_infer.stable)
INDEX_FSIG = "index/fsig"  # uint64 (rows,): per row, the hash of its features (glisp_infer.stable)
INDEX_NSIG = "index/nsig"  # uint64 (rows,): per row, the hash of its neighbourhood
INDEX_LABEL = "index/label"  # int64 (rows,), node task: per row, the vertex's label from its partition, -1 none
LAYOUT_ATTR = "glisp_layout"
Compressor = Literal["blosclz", "lz4", "lz4hc", "zstd", "zlib"]  # infer.compressor
Shuffle = Literal["noshuffle", "shuffle", "bitshuffle"]  # infer.shuffle


@dataclass(frozen=True)
class RowLayout:
    """Rows of each partition: ``counts[k]`` vertices from row ``starts[k]``, padded to whole chunks."""

    chunk_rows: int
    counts: tuple[int, ...]

    @property
    def num_parts(self) -> int:
        return len(self.counts)

    @property
    def padded(self) -> tuple[int, ...]:
        c = self.chunk_rows
        return tuple(-(-n // c) * c for n in self.counts)

    @property
    def starts(self) -> tuple[int, ...]:
        out, acc = [], 0
        for p in self.padded:
            out.append(acc)
            acc += p
        return tuple(out)

    @property
    def rows(self) -> int:
        return int(sum(self.padded))

    @property
    def num_vertices(self) -> int:
        return int(sum(self.counts))

    def chunks_of(self, part: int) -> range:
        """The chunk indices that partition ``part`` owns (and alone writes)."""
        a = self.starts[part] // self.chunk_rows
        return range(a, a + self.padded[part] // self.chunk_rows)

    def to_dict(self) -> dict[str, Any]:
        return {
            "chunk_rows": self.chunk_rows,
            "counts": list(self.counts),
            "starts": list(self.starts),
            "rows": self.rows,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RowLayout:
        return cls(int(d["chunk_rows"]), tuple(int(x) for x in d["counts"]))


@dataclass(frozen=True)
class Codec:
    """Blosc settings of the layer arrays (``[infer]`` compressor, clevel, shuffle). ``intermediate``: the codec
    of layers 0..K-1, which the run itself reads back (the next layer, a retry, an
    incremental refresh) and nobody downstream; "none" stores them raw, so a chunk is written as its bytes and a
    row is a byte range. The final layer, the published product, keeps the Blosc settings."""

    cname: Compressor = "blosclz"
    clevel: int = 9
    shuffle: Shuffle = "bitshuffle"
    intermediate: Literal["none", "same"] = "none"

    def zarr_codec(self, final: bool = True) -> Any:
        from zarr.codecs import BloscCodec

        if not 0 <= self.clevel <= 9:
            raise GlispError(f"infer.clevel: expected 0..9 (got {self.clevel})")
        if self.intermediate not in ("none", "same"):
            raise GlispError(f"infer.intermediate_compressor: expected 'none' or 'same' (got {self.intermediate!r})")
        if not final and self.intermediate == "none":
            return None
        return BloscCodec(cname=self.cname, clevel=self.clevel, shuffle=self.shuffle, typesize=4)


def store_url(dv: Any, stage_dir: StoreURI | os.PathLike[str]) -> str:
    """Where a published run's Zarr group is: ``store.json``'s URL, else ``zarr/`` in the stage (a local path or a
    store URI)."""
    u = parse_uri(stage_dir)
    text = store_for(u).read_text(u / STORE_FILE)
    if text is not None:
        return str(json.loads(text)["url"])
    return str(u / ZARR_DIR)


def create_arrays(
    url: str,
    layout: RowLayout,
    dims: list[int],
    n: int,
    codec: Codec,
    attrs: dict,
    stable: bool = False,
    labels: bool = False,
) -> None:
    """Create the group, every layer array and the index arrays (metadata only; tasks fill the chunks); with
    ``stable`` also the vertex keys and the row signatures of an incremental refresh; with ``labels`` (a node
    task) the labels by row, which the predictions take beside the rows instead of joining the vertex table."""
    g = open_group(url, mode="w")
    g.attrs[LAYOUT_ATTR] = json.loads(json.dumps({**attrs, "layout": layout.to_dict(), "dims": dims}))
    cfg = {"write_empty_chunks": True}  # every owned chunk exists once its task has finished
    for i, d in enumerate(dims):
        g.create_array(
            f"{LAYERS}/{i}",
            shape=(layout.rows, d),
            chunks=(layout.chunk_rows, d),
            dtype="float32",
            compressors=codec.zarr_codec(final=i == len(dims) - 1),
            fill_value=0.0,
            config=cfg,
        )
    for name in (INDEX_VID, INDEX_LABEL) if labels else (INDEX_VID,):
        g.create_array(
            name,
            shape=(layout.rows,),
            chunks=(layout.chunk_rows,),
            dtype="int64",
            compressors=codec.zarr_codec(),
            fill_value=-1,
            config=cfg,
        )
    for name in (INDEX_ROW, INDEX_POS):
        g.create_array(
            name,
            shape=(n,),
            chunks=(min(INDEX_CHUNK, max(n, 1)),),
            dtype="int64",
            compressors=codec.zarr_codec(),
            fill_value=-1,
            config=cfg,
        )
    if stable:
        g.create_array(
            INDEX_KEY, shape=(n,), chunks=(min(INDEX_CHUNK, max(n, 1)),), dtype="uint64", fill_value=0, config=cfg
        )
        for name in (INDEX_FSIG, INDEX_NSIG):
            g.create_array(
                name, shape=(layout.rows,), chunks=(layout.chunk_rows,), dtype="uint64", fill_value=0, config=cfg
            )


def layer_name(i: int) -> str:
    return f"{LAYERS}/{i}"


def write_owned(arr: Any, start: int, values: np.ndarray, chunk_rows: int, fill: float = 0) -> int:
    """Write ``values`` from row ``start`` (a chunk boundary), padding the last chunk with ``fill``; returns the
    number of chunks written. Every write covers whole chunks, so zarr never reads one back."""
    if start % chunk_rows:
        raise GlispError(f"write at row {start}: not a multiple of the chunk rows {chunk_rows}")
    sink = ChunkWriter(arr)
    for a in range(0, len(values), chunk_rows):
        block = values[a : a + chunk_rows]
        if len(block) < chunk_rows:
            full = np.full((chunk_rows,) + values.shape[1:], fill, arr.dtype)
            full[: len(block)] = block
            block = full
        sink.put((start + a) // chunk_rows, block)
    return -(-len(values) // chunk_rows)


class ChunkWriter:
    """Stores whole row chunks of one array: each encoded here (:func:`chunk_encoder`) and stored in one ``set``
    of the array's store, or, for codecs it does not know, through zarr."""

    def __init__(self, arr: Any) -> None:
        from zarr.core.buffer import default_buffer_prototype

        self.arr, self.encode = arr, chunk_encoder(arr)
        self.rows = int(arr.chunks[0])
        self.store, self.base = arr.store_path.store, arr.store_path.path
        self.cols = (0,) * (arr.ndim - 1)
        self.buffer = default_buffer_prototype().buffer

    def put(self, index: int, block: np.ndarray) -> None:
        """Chunk ``index`` := ``block`` (exactly one chunk's rows); synchronous, so ``block`` may be reused."""
        if self.encode is None:
            self.arr[index * self.rows : (index + 1) * self.rows] = block
            return
        from zarr.core.sync import sync

        key = self.arr.metadata.encode_chunk_key((index, *self.cols))
        data = self.buffer.from_array_like(self.encode(block))
        sync(self.store.set(f"{self.base}/{key}" if self.base else key, data))


class ChunkReader:
    """Reads whole row chunks of one array: a raw one (bytes only) as its stored bytes, without zarr's pipeline
    (a third of its time for the same chunk); any other through zarr."""

    def __init__(self, arr: Any) -> None:
        from zarr.core.buffer import default_buffer_prototype

        self.arr, self.rows = arr, int(arr.chunks[0])
        self.raw = chunk_encoder(arr) is not None and len(arr.metadata.codecs) == 1
        self.store, self.base = arr.store_path.store, arr.store_path.path
        self.cols = (0,) * (arr.ndim - 1)
        self.prototype = default_buffer_prototype()
        self.shape = (self.rows, *arr.shape[1:])

    def get(self, index: int) -> np.ndarray:
        if not self.raw:
            return np.asarray(self.arr[index * self.rows : (index + 1) * self.rows])
        from zarr.core.sync import sync

        key = self.arr.metadata.encode_chunk_key((index, *self.cols))
        got = sync(self.store.get(f"{self.base}/{key}" if self.base else key, self.prototype))
        if got is None:  # never written: the fill value, as zarr reads it
            return np.full(self.shape, self.arr.metadata.fill_value, self.arr.dtype)
        return got.as_numpy_array().view(np.dtype(self.arr.dtype).newbyteorder("<")).reshape(self.shape)


def chunk_encoder(arr: Any) -> Any:
    """``block -> uint8 array``: one whole chunk as the array's own codecs encode it (little-endian bytes, then
    Blosc if any), or None for codecs it does not know. Why: zarr's pipeline costs about three times a raw write
    of the same bytes (measured: 0.81 s against 0.26 s for 256 MiB, uncompressed); the bytes stored are the same.
    A raw chunk is a view of the block, not a copy."""
    from zarr.codecs import BloscCodec, BytesCodec

    codecs = tuple(arr.metadata.codecs)
    dtype = np.dtype(arr.dtype).newbyteorder("<")
    if not codecs or not isinstance(codecs[0], BytesCodec) or len(codecs) > 2:
        return None
    if codecs[0].endian is not None and codecs[0].endian.value != "little":
        return None
    if len(codecs) == 1:
        return lambda block: np.ascontiguousarray(block, dtype).reshape(-1).view(np.uint8)
    c = codecs[1]
    if not isinstance(c, BloscCodec):
        return None
    import numcodecs

    shuffle = {"noshuffle": 0, "shuffle": 1, "bitshuffle": 2}[c.shuffle.value]
    blosc = numcodecs.Blosc(
        cname=c.cname.value, clevel=c.clevel, shuffle=shuffle, blocksize=c.blocksize, typesize=c.typesize
    )
    return lambda block: np.frombuffer(blosc.encode(np.ascontiguousarray(block, dtype)), np.uint8)


def stored_bytes(arr: Any, chunks: range) -> int:
    """Compressed bytes of these chunks of a 2-d (row-chunked) or 1-d array, as the store holds them."""
    from zarr.core.sync import sync

    store = arr.store_path.store
    base = arr.store_path.path
    ncol = (0,) if arr.ndim == 2 else ()

    async def sizes() -> int:
        total = 0
        for c in chunks:
            key = f"{base}/{arr.metadata.encode_chunk_key((c, *ncol))}"
            total += await store.getsize(key)
        return total

    return int(sync(sizes()))


def fill_static(put: Any, arr: Any, rows: np.ndarray, chunk_rows: int) -> int:
    """``put(j, row)`` the layer row ``rows[j]`` for every j, decoding each global chunk they touch once;
    returns the number of global chunks read."""
    order = np.argsort(rows, kind="stable")
    srt = rows[order]
    chunk = srt // chunk_rows
    cuts = np.flatnonzero(np.diff(chunk)) + 1
    reader = ChunkReader(arr)
    for lo, hi in zip(np.r_[0, cuts].tolist(), np.r_[cuts, len(srt)].tolist(), strict=True):
        c = int(chunk[lo])
        put(order[lo:hi], reader.get(c)[srt[lo:hi] - c * chunk_rows])
    return len(cuts) + 1 if len(srt) else 0


def read_rows(arr: Any, rows: np.ndarray) -> tuple[np.ndarray, int]:
    """Rows ``rows`` (any order, repeats allowed) of a layer array, reading each chunk they touch once;
    returns the rows and the number of chunks read."""
    rows = np.asarray(rows, np.int64)
    if len(rows) == 0:
        return np.empty((0,) + tuple(arr.shape[1:]), arr.dtype), 0
    uniq, inv = np.unique(rows, return_inverse=True)
    chunk_rows = arr.chunks[0]
    nchunks = len(np.unique(uniq // chunk_rows))
    sel = (uniq,) + (slice(None),) * (arr.ndim - 1)
    vals = arr.get_orthogonal_selection(sel)
    return vals[inv], nchunks
