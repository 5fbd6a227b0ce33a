"""The files of an ingest run, read and written through the store by the driver and by the tasks alike.

Why one module: the inputs, the staged Arrow files that one task writes and another reads, and the published
tables are all named by URIs (a local path or ``s3://bucket/key``). A task never gets a path chosen for the
driver's disk: it gets a URI string and opens the store itself (``store_for``, credentials from its own
environment). Locally a file is written under a temporary name and renamed, so a retried or speculative
task never leaves half a file under the final name; on an object store an object appears whole when its
stream closes. Staged files are read memory-mapped when local (as before), in one ranged read otherwise.
"""

from __future__ import annotations

import io
import os
import posixpath
from collections.abc import Callable
from contextlib import ExitStack
from typing import TYPE_CHECKING, Any

from glisp_core.storage.store import store_for
from glisp_core.storage.uri import StoreURI, parse_uri

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa


def as_uri(text: str | os.PathLike[str]) -> StoreURI:
    """A URI given as a StoreURI, a local path or a URI string (what tasks are handed)."""
    return parse_uri(text, "ingest file")


def join(base: str, *parts: str) -> str:
    """``base/part/...`` for a local path or a URI string alike."""
    return posixpath.join(base, *parts)


def open_atomic(uri: str | os.PathLike[str]) -> Any:
    """An output stream for ``uri``: the file appears under its name, whole, only when the block ends."""
    u = as_uri(uri)
    return store_for(u).open_atomic(u)


def write_with(uri: str | os.PathLike[str], write: Callable[[Any], object]) -> None:
    """``write(stream)`` into ``uri`` (see :func:`open_atomic`)."""
    with open_atomic(uri) as f:
        write(f)


def write_ipc(uri: str | os.PathLike[str], table: pa.Table) -> None:
    """One uncompressed Arrow IPC file (staged rows)."""
    import pyarrow as pa

    def w(f: Any) -> None:
        with pa.ipc.new_file(f, table.schema) as wr:
            wr.write_table(table)

    write_with(uri, w)


class IpcFiles:
    """A task's staged Arrow IPC files, one per path, written batch by batch; each appears whole on ``close``."""

    def __init__(self) -> None:
        self.stack = ExitStack()
        self.open: dict[str, list[Any]] = {}  # path -> [writer, rows]

    def write(self, path: str, batch: pa.RecordBatch) -> None:
        import pyarrow as pa

        if path not in self.open:
            sink = self.stack.enter_context(open_atomic(path))
            self.open[path] = [pa.ipc.new_file(sink, batch.schema), 0]
        self.open[path][0].write_batch(batch)
        self.open[path][1] += batch.num_rows

    def close(self) -> dict[str, int]:
        """{path: rows} of the files written, now in place."""
        with self.stack:
            for w, _ in self.open.values():
                w.close()
        return {path: n for path, (_, n) in self.open.items()}


def read_ipc_file(uri: str | os.PathLike[str]) -> pa.Table:
    """One staged Arrow IPC file: memory-mapped on a local disk, one read from an object store."""
    import pyarrow as pa

    u = as_uri(uri)
    if u.is_local:
        with pa.memory_map(u.path) as src:
            return pa.ipc.open_file(src).read_all()
    with store_for(u).open_input(u) as f:
        buf = f.read_buffer()
    return pa.ipc.open_file(pa.BufferReader(buf)).read_all()


def write_npy(uri: str | os.PathLike[str], a: np.ndarray) -> None:
    """One ``.npy`` file (staged degree slices)."""
    import numpy as np

    write_with(uri, lambda f: np.save(f, a))


def read_npy(uri: str | os.PathLike[str]) -> np.ndarray:
    """One ``.npy`` file written by :func:`write_npy`."""
    import numpy as np

    u = as_uri(uri)
    if u.is_local:
        return np.load(u.path)
    with store_for(u).open_input(u) as f:
        return np.load(io.BytesIO(f.read()))


def write_parquet(uri: str | os.PathLike[str], table: pa.Table, **kw: Any) -> None:
    """One Parquet file, written whole (pyarrow's writer, the same bytes as to a local path)."""
    import pyarrow.parquet as pq

    write_with(uri, lambda f: pq.write_table(table, f, **kw))


def make_dirs(*uris: str | os.PathLike[str]) -> None:
    """Local directories a table must have even when no task writes into it (an object store has none)."""
    for x in uris:
        u = as_uri(x)
        if u.is_local:
            os.makedirs(u.path, exist_ok=True)


def list_files(uri: str | os.PathLike[str], suffix: str) -> list[str]:
    """The files directly under ``uri`` whose names end with ``suffix``, sorted, as strings of the same kind."""
    u = as_uri(uri)
    base = str(u)
    return [join(base, rel) for rel, _ in store_for(u).files(u) if "/" not in rel and rel.endswith(suffix)]


def delete(uri: str | os.PathLike[str]) -> None:
    """Remove a file or a whole prefix (nothing when it is gone already)."""
    u = as_uri(uri)
    store_for(u).delete(u)
