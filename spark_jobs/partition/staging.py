"""Scratch files of a partition run, under the attempt's ``_staging`` prefix in the dataset's store.

Spark tasks write them and the driver (or a later task) reads them, so they must live where every process
can open them: the store of the dataset root (a local disk or shared file system, or an object store),
each process opening it with :func:`glisp_core.storage.store.store_for`. Never a path the driver picked
on its own disk.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from glisp_core.storage.store import store_for
from glisp_core.storage.uri import StoreURI
from glisp_spark.tables import parquet_files


def write_whole(uri: StoreURI, write: Callable[[Any], None]) -> None:
    """Write one file with ``write(stream)`` so that no reader sees part of it.

    A retried or speculative task rewrites the same name with the same content; a reader must see the old
    file or the new one (:meth:`Store.open_atomic`).
    """
    with store_for(uri).open_atomic(uri) as f:
        write(f)


def open_input(uri: StoreURI) -> Any:
    """A random-access file: memory-mapped on a disk (no copy of an Arrow IPC file), else from the store."""
    return pa.memory_map(uri.path) if uri.is_local else store_for(uri).open_input(uri)


def stream_batches(table: StoreURI, batch_size: int) -> Iterator[pa.RecordBatch]:
    """The batches of a Parquet table's files, file by file in name order (a sorted DataFrame's order)."""
    for f in parquet_files(table):
        with store_for(f).open_input(f) as src:
            yield from pq.ParquetFile(src).iter_batches(batch_size=batch_size)


def read_columns(table: StoreURI, cols: tuple[str, ...]) -> dict[str, np.ndarray]:
    """Integer columns of a Parquet table as int64 arrays, read by this process straight from the store."""
    t = store_for(table).read_table(table, columns=list(cols))
    return {c: t.column(c).to_numpy().astype(np.int64) for c in cols}


def parquet_names(d: StoreURI) -> list[str]:
    """The names of the Parquet files directly under ``d`` (none when it does not exist), sorted."""
    return sorted(n for n in store_for(d).names(d) if n.endswith(".parquet"))
