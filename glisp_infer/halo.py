"""Push-based halo exchange between the layers of an inference run.

Without it, each task of layer ``l`` fills its static cache by decoding every global Zarr chunk of layer
``l - 1`` that holds one of its out-of-partition neighbours: on R-MAT scale 18, ~36 chunks of 32,768 rows
per task and layer, to use ~3 rows of each. But which rows a task will need is known before the layer runs:
a vertex's neighbour sample at a layer is a function of (seed, layer, vertex). So:

1. a **plan** job (one task per partition, before layer 0) samples every layer's hop for the vertices the
   partition masters, keeps the samples (``sample-l{l}-p{p}.npz``) for its layer tasks, and writes per
   source partition ``q`` the rows of layer ``l - 1`` that partition ``p`` needs from it
   (``needs-r{l-1}-s{q}-d{p}.npz``: vertex ids and positions in ``q``'s rows, by position);
2. the task of layer ``i`` of partition ``q``, as it writes its rows, also appends the rows each other
   partition ``p`` needs to ``halo-r{i}-s{q}-d{p}.npy`` (float32, in the needs' order);
3. the task of layer ``i + 1`` of ``p`` puts the rows of every ``halo-r{i}-s*-d{p}`` into its static cache:
   exactly the rows it needs, read sequentially, no chunk decoded.

The files live under the stage's attempt prefix (``exchange/``) in the dataset's store, which every executor
opens itself (``store_for``, credentials from its environment), local disk or object store alike; each appears
whole or not at all (:class:`AtomicFile`, :func:`save_atomic`), so a task killed part-way leaves the old file
or none, and its retry rewrites it with the same values. Layer ``i + 1`` starts
only after every task of layer ``i`` succeeded (one Spark job per layer), so its reads see complete files.
The Zarr arrays stay the published result; the exchange is removed when the run ends.
"""

from __future__ import annotations

import fnmatch
import io
import os
import shutil
import tempfile
import time
import uuid
from pathlib import Path
from typing import IO, Any, TypeVar

import numpy as np

from glisp_core.errors import GlispError
from glisp_core.storage.store import store_for
from glisp_core.storage.uri import StoreURI, parse_uri
from glisp_sampling.apply import HopSample

R = TypeVar("R", StoreURI, Path)  # the exchange's prefix: a store URI (a Path for a local one, in tests)


def sample_file(root: R, layer: int, part: int) -> R:
    """Partition ``part``'s neighbour sample for its task of layer ``layer`` (slice ``layer - 1``)."""
    return root / f"sample-l{layer}-p{part:05d}.npz"


def needs_file(root: R, rows_layer: int, src: int, dst: int) -> R:
    """The rows of layer ``rows_layer`` that partition ``dst`` needs from partition ``src``."""
    return root / f"needs-r{rows_layer}-s{src:05d}-d{dst:05d}.npz"


def halo_file(root: R, rows_layer: int, src: int, dst: int) -> R:
    """Those rows' values, written by ``src``'s task of layer ``rows_layer``."""
    return root / f"halo-r{rows_layer}-s{src:05d}-d{dst:05d}.npy"


def _tmp_of(path: Path) -> Path:
    return path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}")


class AtomicFile:
    """A file that appears at ``uri`` whole when closed, or not at all: on a local disk a temporary file beside it,
    renamed into place; on an object store a spool file in the task's own temp directory, streamed to the store
    on close (the object appears when that stream closes). An object-store stream cannot be abandoned once
    opened, so nothing is sent before the content is complete."""

    def __init__(self, uri: StoreURI | os.PathLike[str] | str) -> None:
        self.uri = parse_uri(uri)
        self.tmp: Path | None = None
        if self.uri.is_local:
            final = self.uri.local
            final.parent.mkdir(parents=True, exist_ok=True)
            self.tmp = _tmp_of(final)
            self.fh: IO[bytes] = open(self.tmp, "wb")  # noqa: SIM115 - closed in close() or abort()
        else:
            self.fh = tempfile.TemporaryFile(prefix="glisp-halo-")  # noqa: SIM115 - closed in close() or abort()

    def close(self) -> None:
        if self.tmp is not None:
            self.fh.close()
            os.replace(self.tmp, self.uri.local)  # complete, or absent: a reader never sees half of it
            return
        self.fh.seek(0)
        with store_for(self.uri).open_output(self.uri) as out:
            shutil.copyfileobj(self.fh, out, 1 << 22)
        self.fh.close()

    def abort(self) -> None:
        self.fh.close()
        if self.tmp is not None:
            self.tmp.unlink(missing_ok=True)


def save_atomic(path: StoreURI | os.PathLike[str], **arrays: np.ndarray) -> None:
    """``np.savez`` as one object written whole (a local file renamed into place, one PUT on an object store)."""
    u = parse_uri(path)
    buf = io.BytesIO()
    np.savez(buf, allow_pickle=True, **arrays)  # numpy's default, named so **arrays fills no parameter
    store_for(u).write_bytes(u, buf.getvalue())


def _read(path: StoreURI | os.PathLike[str]) -> bytes | None:
    """The file's bytes, or None when it does not exist (one GET on an object store)."""
    u = parse_uri(path)
    try:
        return store_for(u).read_bytes(u)
    except FileNotFoundError:
        return None


def _npz(path: StoreURI | os.PathLike[str]) -> Any:
    """The ``.npz`` at ``path`` (a context manager), or None when it does not exist."""
    data = _read(path)
    return None if data is None else np.load(io.BytesIO(data))


def save_sample(
    root: StoreURI,
    layer: int,
    part: int,
    sample: HopSample,
    interior: np.ndarray,
    fanout: int,
    static_ids: np.ndarray,
    vids: np.ndarray,
) -> None:
    """The sample, and the ids of the task's static cache (local-id order) with its own vertices' local ids."""
    sorter = np.argsort(static_ids, kind="stable")
    own_local = sorter[np.searchsorted(static_ids[sorter], vids)]
    save_atomic(
        sample_file(root, layer, part),
        counts=sample.counts,
        nbrs=sample.nbrs,
        interior=interior,
        fanout=np.array(fanout, np.int64),
        static_ids=static_ids,
        own_local=own_local,
    )


def load_static_ids(root: StoreURI, layer: int, part: int) -> tuple[np.ndarray, np.ndarray] | None:
    """The ids of the static cache of ``part``'s task of ``layer`` and its own vertices' local ids, or None."""
    z = _npz(sample_file(root, layer, part))
    if z is None:
        return None
    with z:
        return z["static_ids"], z["own_local"]


def load_sample(root: StoreURI, layer: int, part: int) -> tuple[HopSample, np.ndarray, int] | None:
    """The plan job's sample of this task, or None when there is none (no exchange, or a run without a plan)."""
    z = _npz(sample_file(root, layer, part))
    if z is None:
        return None
    with z:
        return HopSample(counts=z["counts"], nbrs=z["nbrs"]), z["interior"], int(z["fanout"])


def load_sample_counts(root: StoreURI, layer: int, part: int) -> np.ndarray | None:
    """The per-vertex sample counts of the plan job's sample of this task (not its edges), or None."""
    z = _npz(sample_file(root, layer, part))
    if z is None:
        return None
    with z:
        return np.asarray(z["counts"])


def write_needs(
    root: StoreURI | Path, rows_layer: int, part: int, foreign: np.ndarray, row_of: Any, starts: tuple[int, ...]
) -> int:
    """Split ``foreign`` (the distinct sampled neighbours of ``part``'s vertices that other partitions master) by
    master partition and write one needs file per source partition (every one, empty ones too); returns their
    number."""
    root = parse_uri(root)
    foreign = np.asarray(foreign, np.int64)
    rows = np.asarray(row_of(foreign), np.int64)
    if (rows < 0).any():
        raise GlispError(f"the row index has no row for vertices {foreign[rows < 0][:3].tolist()}")
    src = np.searchsorted(np.asarray(starts, np.int64), rows, side="right") - 1
    for q in range(len(starts)):
        if q == part:
            continue
        sel = np.flatnonzero(src == q)
        pos = rows[sel] - starts[q]
        order = np.argsort(pos, kind="stable")
        save_atomic(needs_file(root, rows_layer, q, part), vid=foreign[sel][order], pos=pos[order])
    return len(foreign)


class HaloWriter:
    """Appends, as a task's output rows stream by in row order, the rows each other partition needs to its halo
    file; :meth:`close` renames the complete files into place, :meth:`abort` removes the partial ones."""

    def __init__(self, root: StoreURI | Path, rows_layer: int, part: int, num_parts: int, dim: int) -> None:
        self.seconds = 0.0
        self.rows_written = 0
        self.at = 0  # position of the next row added
        self.dests: list[tuple[AtomicFile, np.ndarray]] = []
        self._ptr: list[int] = []
        t = time.perf_counter()
        root = parse_uri(root)
        try:
            for d in range(num_parts):
                if d == part:
                    continue
                nf = needs_file(root, rows_layer, part, d)
                z = _npz(nf)
                if z is None:
                    raise GlispError(f"{nf}: missing; the plan job writes every needs file before layer {rows_layer}")
                with z:
                    pos = np.asarray(z["pos"], np.int64)
                out = AtomicFile(halo_file(root, rows_layer, part, d))
                self.dests.append((out, pos))
                np.lib.format.write_array_header_1_0(
                    out.fh, {"descr": np.dtype(np.float32).str, "fortran_order": False, "shape": (len(pos), dim)}
                )
                self._ptr.append(0)
        except BaseException:
            self.abort()
            raise
        self.seconds += time.perf_counter() - t

    def add(self, rows: np.ndarray) -> None:
        t = time.perf_counter()
        end = self.at + len(rows)
        for k, (out, pos) in enumerate(self.dests):
            a = self._ptr[k]
            b = a + int(np.searchsorted(pos[a:], end))
            if b > a:
                out.fh.write(np.ascontiguousarray(rows[pos[a:b] - self.at], np.float32).tobytes())
                self._ptr[k] = b
                self.rows_written += b - a
        self.at = end
        self.seconds += time.perf_counter() - t

    def close(self) -> None:
        t = time.perf_counter()
        for k, (out, pos) in enumerate(self.dests):
            if self._ptr[k] != len(pos):
                raise GlispError(f"{out.uri}: {self._ptr[k]} of {len(pos)} rows written (the task's rows ended early)")
        for out, _ in self.dests:
            out.close()
        self.dests = []
        self.seconds += time.perf_counter() - t

    def abort(self) -> None:
        for out, _ in self.dests:
            out.abort()
        self.dests = []


def read_halo(
    root: StoreURI | Path, rows_layer: int, part: int, num_parts: int, dim: int
) -> tuple[np.ndarray, list[np.ndarray]]:
    """The vertex ids and rows every other partition pushed to ``part``: (ids, one row block per source)."""
    root = parse_uri(root)
    ids, blocks = [], []
    for q in range(num_parts):
        if q == part:
            continue
        nf, hf = needs_file(root, rows_layer, q, part), halo_file(root, rows_layer, q, part)
        z = _npz(nf)
        rows = _load_rows(hf)
        for f, got in ((nf, z), (hf, rows)):
            if got is None:
                raise GlispError(f"{f}: missing; partition {q}'s task of layer {rows_layer} writes it")
        assert z is not None and rows is not None
        with z:
            vid = np.asarray(z["vid"], np.int64)
        if rows.shape != (len(vid), dim):
            raise GlispError(f"{hf}: shape {rows.shape}, expected {(len(vid), dim)}")
        ids.append(vid)
        blocks.append(rows)
    return (np.concatenate(ids) if ids else np.empty(0, np.int64)), blocks


def _load_rows(path: StoreURI | Path) -> np.ndarray | None:
    """A halo file's rows: memory-mapped on a local disk, read whole (one GET) from an object store; None if absent."""
    u = parse_uri(path)
    if u.is_local:
        return np.load(u.local, mmap_mode="r") if u.local.exists() else None
    data = _read(u)
    return None if data is None else np.load(io.BytesIO(data))


def remove_layer_files(root: StoreURI, rows_layer: int) -> None:
    """The needs and halo files of layer ``rows_layer`` and the samples of layer ``rows_layer + 1``, once its
    layer is done (a retried task of a later layer does not read them)."""
    store = store_for(root)
    pats = (f"needs-r{rows_layer}-*", f"halo-r{rows_layer}-*", f"sample-l{rows_layer + 1}-*")
    for name in store.names(root):
        if any(fnmatch.fnmatchcase(name, p) for p in pats):
            store.delete(root / name)
