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

The files live in the stage's temporary directory (``exchange/``), which every executor reaches as it
reaches the partitions; each is written under a temporary name and renamed when complete, so a task killed
part-way leaves the old file or none, and its retry rewrites it with the same values. Layer ``i + 1`` starts
only after every task of layer ``i`` succeeded (one Spark job per layer), so its reads see complete files.
The Zarr arrays stay the published result; the exchange is removed when the run ends.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np

from glisp_core.errors import GlispError
from glisp_sampling.apply import HopSample


def sample_file(root: Path, layer: int, part: int) -> Path:
    """Partition ``part``'s neighbour sample for its task of layer ``layer`` (slice ``layer - 1``)."""
    return root / f"sample-l{layer}-p{part:05d}.npz"


def needs_file(root: Path, rows_layer: int, src: int, dst: int) -> Path:
    """The rows of layer ``rows_layer`` that partition ``dst`` needs from partition ``src``."""
    return root / f"needs-r{rows_layer}-s{src:05d}-d{dst:05d}.npz"


def halo_file(root: Path, rows_layer: int, src: int, dst: int) -> Path:
    """Those rows' values, written by ``src``'s task of layer ``rows_layer``."""
    return root / f"halo-r{rows_layer}-s{src:05d}-d{dst:05d}.npy"


def _tmp_of(path: Path) -> Path:
    return path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}")


def save_atomic(path: Path, **arrays: np.ndarray) -> None:
    """``np.savez`` under a temporary name, renamed when complete."""
    tmp = _tmp_of(path)
    try:
        with open(tmp, "wb") as fh:
            np.savez(fh, allow_pickle=True, **arrays)  # numpy's default, named so **arrays fills no parameter
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def save_sample(
    root: Path,
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


def load_static_ids(root: Path, layer: int, part: int) -> tuple[np.ndarray, np.ndarray] | None:
    """The ids of the static cache of ``part``'s task of ``layer`` and its own vertices' local ids, or None."""
    f = sample_file(root, layer, part)
    if not f.exists():
        return None
    with np.load(f) as z:
        return z["static_ids"], z["own_local"]


def load_sample(root: Path, layer: int, part: int) -> tuple[HopSample, np.ndarray, int] | None:
    """The plan job's sample of this task, or None when there is none (no exchange, or a run without a plan)."""
    f = sample_file(root, layer, part)
    if not f.exists():
        return None
    with np.load(f) as z:
        return HopSample(counts=z["counts"], nbrs=z["nbrs"]), z["interior"], int(z["fanout"])


def write_needs(
    root: Path, rows_layer: int, part: int, foreign: np.ndarray, row_of: Any, starts: tuple[int, ...]
) -> int:
    """Split ``foreign`` (the distinct sampled neighbours of ``part``'s vertices that other partitions master) by
    master partition and write one needs file per source partition (every one, empty ones too); returns their
    number."""
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

    def __init__(self, root: Path, rows_layer: int, part: int, num_parts: int, dim: int) -> None:
        self.seconds = 0.0
        self.rows_written = 0
        self.at = 0  # position of the next row added
        self.dests: list[tuple[Path, Path, np.ndarray, Any]] = []
        self._ptr: list[int] = []
        t = time.perf_counter()
        try:
            for d in range(num_parts):
                if d == part:
                    continue
                nf = needs_file(root, rows_layer, part, d)
                if not nf.exists():
                    raise GlispError(f"{nf}: missing; the plan job writes every needs file before layer {rows_layer}")
                with np.load(nf) as z:
                    pos = np.asarray(z["pos"], np.int64)
                final = halo_file(root, rows_layer, part, d)
                tmp = _tmp_of(final)
                fh = open(tmp, "wb")  # noqa: SIM115 - closed in close() or abort()
                np.lib.format.write_array_header_1_0(
                    fh, {"descr": np.dtype(np.float32).str, "fortran_order": False, "shape": (len(pos), dim)}
                )
                self.dests.append((final, tmp, pos, fh))
                self._ptr.append(0)
        except BaseException:
            self.abort()
            raise
        self.seconds += time.perf_counter() - t

    def add(self, rows: np.ndarray) -> None:
        t = time.perf_counter()
        end = self.at + len(rows)
        for k, (_, _, pos, fh) in enumerate(self.dests):
            a = self._ptr[k]
            b = a + int(np.searchsorted(pos[a:], end))
            if b > a:
                fh.write(np.ascontiguousarray(rows[pos[a:b] - self.at], np.float32).tobytes())
                self._ptr[k] = b
                self.rows_written += b - a
        self.at = end
        self.seconds += time.perf_counter() - t

    def close(self) -> None:
        t = time.perf_counter()
        for k, (final, tmp, pos, fh) in enumerate(self.dests):
            fh.close()
            if self._ptr[k] != len(pos):
                raise GlispError(f"{final}: {self._ptr[k]} of {len(pos)} rows written (the task's rows ended early)")
            os.replace(tmp, final)  # complete, or absent: a reader never sees half of it
        self.dests = []
        self.seconds += time.perf_counter() - t

    def abort(self) -> None:
        for _, tmp, _, fh in self.dests:
            fh.close()
            tmp.unlink(missing_ok=True)
        self.dests = []


def read_halo(root: Path, rows_layer: int, part: int, num_parts: int, dim: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """The vertex ids and rows every other partition pushed to ``part``: (ids, one row block per source)."""
    ids, blocks = [], []
    for q in range(num_parts):
        if q == part:
            continue
        nf, hf = needs_file(root, rows_layer, q, part), halo_file(root, rows_layer, q, part)
        for f in (nf, hf):
            if not f.exists():
                raise GlispError(f"{f}: missing; partition {q}'s task of layer {rows_layer} writes it")
        with np.load(nf) as z:
            vid = np.asarray(z["vid"], np.int64)
        rows = np.load(hf, mmap_mode="r")
        if rows.shape != (len(vid), dim):
            raise GlispError(f"{hf}: shape {rows.shape}, expected {(len(vid), dim)}")
        ids.append(vid)
        blocks.append(rows)
    return (np.concatenate(ids) if ids else np.empty(0, np.int64)), blocks


def remove_layer_files(root: Path, rows_layer: int) -> None:
    """The needs and halo files of layer ``rows_layer`` and the samples of layer ``rows_layer + 1``, once its
    layer is done (a retried task of a later layer does not read them)."""
    for pat in (f"needs-r{rows_layer}-*", f"halo-r{rows_layer}-*", f"sample-l{rows_layer + 1}-*"):
        for f in root.glob(pat):
            f.unlink(missing_ok=True)
