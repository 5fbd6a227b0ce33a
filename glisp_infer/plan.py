"""What every inference task needs to know, resolved once by the driver and shipped with the task."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from glisp_core.dataset.order_index import OrderIndex
from glisp_core.storage.uri import StoreURI, parse_uri
from glisp_infer.store import Codec, RowLayout

SHADOW_FRACTIONS = (0.01, 0.02, 0.05, 0.1, 0.2)  # dynamic cache sizes replayed for the FIFO/LRU comparison


@dataclass(frozen=True)
class InferPlan:
    """A small, picklable description of one inference run (no arrays: tasks read what they need)."""

    store: str  # Zarr group: a local directory, an object-store URI or an fsspec URL (zarr_arrays.open_store)
    parts_dir: str  # serialize/<run>: a local directory or a store URI
    order_url: str  # the reorder stage's lookup arrays (glisp_core.dataset.order_index): the run's vertices and rows
    num_parts: int
    layout: RowLayout
    codec: Codec
    order: str
    dims: tuple[int, ...]  # width of layer 0 (features) ... layer K (output)
    fanouts: tuple[int, ...]  # per hop, first hop first; -1 = every neighbour
    seed: int
    direction: str
    relations: tuple[str, ...]  # rgcn: typed sampling, one slot per relation
    checkpoint: str  # the train stage (model.json + weights.pt): a local directory or a store URI
    task: str  # "node" or "link"
    node_embeddings: str = ""  # the checkpoint's learnable rows (layer 0 appends them to the features); "": none
    batch_size: int = 256
    cache_chunk_rows: int = 64
    cache_policy: str = "fifo"
    cache_admit_window: int = 1
    cache_fraction: float = 0.05
    cache_chunks: int = 0
    scratch_dir: str = ""
    device: str = "auto"
    threads: int = 1
    project_first: bool = True  # narrowing mean layers from projected rows (glisp_infer.projected)
    local_own_rows: bool = True  # keep each task's output rows on local disk for its next layer's static cache
    exchange_dir: str = ""  # halo exchange between layers (glisp_infer.halo): a prefix in the store; "": none
    dataset: str = ""  # the dataset version's URI (names the copies of its partitions)
    partition_cache: str = ""  # this host's copies of partitions of an object-store dataset (serve.cache_dir)
    verify_copies: bool = True  # check a reused copy's content hashes (serve.verify != "off")
    token: str = ""  # unique per run: names its files under the scratch directory
    shadow_fractions: tuple[float, ...] = field(default=SHADOW_FRACTIONS)
    stable: bool = False  # neighbour samples by keys of original ids (glisp_infer.stable): infer.incremental
    double: bool = False  # slices in float64, rounded to float32: rows a later refresh can copy (glisp_infer.refresh)
    incremental_dir: str = ""  # the refresh's masks and row map (glisp_infer.incremental); "": every row computed
    prev_store: str = ""  # the previous version's Zarr group of the same run: rows copied and drift measured
    prev_last_layer: int = -1  # its final layer (drift compares the two final layers; -1: the same as this run's)
    max_share: float = 1.0  # a task recomputes all its vertices of a layer when more than this share is affected
    fault: str = ""  # test hook "layer:part:chunks[:raise]": the first attempt of that task dies after writing chunks

    @property
    def layers(self) -> int:
        return len(self.dims) - 1

    def order_index(self) -> OrderIndex:
        """Each partition's vertices, and any vertex's row and global position (no index job in the run)."""
        return OrderIndex(self.order_url, self.layout.counts)

    def partition_dir(self, part: int) -> StoreURI:
        return parse_uri(self.parts_dir) / f"part-{part:05d}"

    def open_partition(self, part: int) -> Any:
        """Partition ``part`` memory-mapped: in place on a local root, else from this host's verified copy of it
        (``glisp_serving.server.partition_cache``: the kernels need local files)."""
        from glisp_core.partition_format import open_partition

        src = self.partition_dir(part)
        if src.is_local:
            return open_partition(src.local, verify=False)
        path = local_copy(src.qualified, self.dataset, self.partition_cache, self.verify_copies)
        return open_partition(path, verify=False)

    def scratch(self) -> Path:
        """This run's directory for the task's local files (static caches, own rows between layers): ``scratch_dir``,
        or memory when this host has room for every partition's, else the temp dir (:mod:`glisp_infer.scratch`)."""
        from glisp_infer.scratch import host_scratch

        # every partition's files may stay on one host for the run (local mode; a cluster of few hosts)
        need = 3 * sum(self.layout.counts) * max(self.dims) * 4
        return host_scratch(self.scratch_dir, self.token, need)

    def exchange(self) -> StoreURI | None:
        """The prefix of the halo exchange (``glisp_infer.halo``), or None when tasks fill from Zarr."""
        return parse_uri(self.exchange_dir) if self.exchange_dir else None

    def own_rows_file(self, layer: int, part: int) -> Path:
        """Where partition ``part``'s task keeps its rows of layer ``layer`` for its next layer."""
        return self.scratch() / f"own-l{layer}-p{part:05d}.f32"


@functools.lru_cache(maxsize=1024)
def local_copy(src: str, dataset: str, cache_dir: str, verify: bool) -> Path:
    """The local copy of the partition at store URI ``src`` of version ``dataset`` in ``cache_dir``, checked (or
    downloaded) once per Python worker: a serialize attempt is never modified, so the check holds for its life."""
    from glisp_core.config import ServeConfig
    from glisp_core.dataset.layout import DatasetVersion
    from glisp_serving.server.partition_cache import cached_copy

    u, v = parse_uri(src), parse_uri(dataset)
    dv = DatasetVersion(v.parent.parent, v.parent.name, v.name)
    return cached_copy(dv, u, cache_dir or ServeConfig().cache_dir, verify, f"infer: {u.name}")[0]


@functools.lru_cache(maxsize=2)
def load_model(checkpoint: str, device: str, double: bool = False) -> Any:
    """The checkpoint's model in eval mode on ``device`` (in float64 with ``double``); loaded once per Python
    worker."""
    from glisp_core.models import load_checkpoint

    model, _ = load_checkpoint(checkpoint, device=device)
    return model.double() if double else model


def resolve_device(name: str) -> Any:
    import torch

    from glisp_core.errors import GlispError
    from glisp_core.models import default_device

    if name == "auto":
        return default_device()
    if name == "cuda" and not torch.cuda.is_available():
        raise GlispError("infer.device = 'cuda', but torch sees no CUDA device (use 'auto' or 'cpu')")
    return torch.device(name)


def set_threads(n: int) -> None:
    import torch

    n = max(1, int(n))
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
    os.environ.setdefault("OMP_NUM_THREADS", str(n))
