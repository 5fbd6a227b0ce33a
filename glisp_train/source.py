"""Where a trainer's samples come from: a sampling cluster (the product) or one whole-graph partition in process.

Both give the same things: a Gather/Lookup backend for :class:`~glisp_sampling.khop.KHopSampler`, a way to
run its coroutines, the :class:`~glisp_sampling.cluster_facts.ClusterInfo` (degrees, schema, the partition
run's fingerprint), labels and splits, and the held-out edges of a link-split run. The cluster source
needs only the cluster file: routing, degrees and schema come from the servers' ``Routing`` stream, and
the dataset directory, when this machine can read it, is used only to publish the checkpoint.

The in-process source (``LocalSampler`` over a one-partition run) is the accuracy reference: the same
k-hop code, Apply and blocks, no RPC.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from glisp_core.config import Config
from glisp_core.dataset.layout import DatasetVersion, readable_here, resolve_dataset
from glisp_core.errors import GlispError, StageError
from glisp_core.storage.uri import parse_uri
from glisp_sampling.cluster_facts import ClusterInfo

LABEL_CHUNK = 1 << 16  # vertices per label lookup (well under serve.max_batch)


@dataclass
class GraphSource:
    kind: str  # "cluster" | "in-process"
    backend: Any  # GatherBackend: gather / lookup / num_vertices
    submit: Callable[[Any], Future]  # run a coroutine of the backend; a Future of its result
    info: ClusterInfo
    dv: DatasetVersion | None  # the dataset version, when readable here (publishing, original ids)
    heldout_fn: Callable[[], dict[str, np.ndarray]]
    close_fn: Callable[[], None]
    description: str = ""
    embeddings: Any = None  # where learnable node embeddings live: the servers, or this process (node_embeddings)
    _labels: tuple[np.ndarray, np.ndarray] | None = field(default=None, repr=False)

    @property
    def num_vertices(self) -> int:
        return self.info.num_vertices

    @property
    def schema(self) -> dict[str, Any]:
        return self.info.schema

    @property
    def run(self) -> str:
        return self.info.run

    @property
    def feature_dim(self) -> int:
        return int(self.schema.get("feature_dim", 0) or 0)

    @property
    def edge_types(self) -> list[str]:
        return list(self.schema.get("edge_types") or ["e0"])

    def labels_and_split(self) -> tuple[np.ndarray, np.ndarray]:
        """Label (-1 = none) and split code (-1 none, 0 train, 1 val, 2 test) of every vertex, by global id."""
        if self._labels is None:
            n = self.num_vertices
            labels = np.full(n, -1, np.int64)
            split = np.full(n, -1, np.int8)

            async def fetch_all() -> None:
                for a in range(0, n, LABEL_CHUNK):
                    ids = np.arange(a, min(n, a + LABEL_CHUNK), dtype=np.int64)
                    got = await self.backend.lookup(ids, False, True)
                    if "labels" in got:
                        labels[a : a + len(ids)] = got["labels"]
                    if "split" in got:
                        split[a : a + len(ids)] = got["split"]

            self.submit(fetch_all()).result()
            self._labels = (labels, split)
        return self._labels

    def heldout(self) -> dict[str, np.ndarray]:
        return self.heldout_fn()

    def close(self) -> None:
        self.close_fn()


def open_cluster(cluster_file: str | Path, cfg: Config) -> GraphSource:
    """A source over the servers of ``cluster_file`` (routing and degrees from their Routing streams)."""
    from glisp_serving.client.embeddings import RemoteEmbeddings
    from glisp_serving.client.info_fetch import fetch_cluster_info, fetch_heldout
    from glisp_serving.client.sampling_client import SamplingClient
    from glisp_serving.cluster.cluster_file import ClusterSpec

    spec = ClusterSpec.read(cluster_file)
    info = fetch_cluster_info(spec, cfg.client)
    client = SamplingClient(spec, cfg.client, routing_table=info.routing_table(), direction=cfg.train.direction)
    dv = _dataset_of(spec.dataset)
    return GraphSource(
        kind="cluster",
        backend=client.backend,
        submit=client._submit,
        info=info,
        dv=dv,
        heldout_fn=lambda: fetch_heldout(spec, cfg.client),
        close_fn=client.close,
        description=f"{spec.num_parts} servers of run {spec.run} ({cluster_file})",
        embeddings=RemoteEmbeddings(client.backend),
    )


def _dataset_of(dataset: str) -> DatasetVersion | None:
    """The version the cluster serves, when this process can read it: on this machine's disk, or in an object store
    it reaches with the credentials of its environment (where it then publishes the checkpoint). None otherwise:
    the trainer still trains (routing and labels come from the servers) and writes the run to --output."""
    if readable_here(dataset):
        return resolve_dataset(dataset)
    if parse_uri(dataset, "dataset").is_local:
        return None
    try:
        dv = resolve_dataset(dataset)
        return dv if dv.store.exists(dv.manifest_path) else None
    except (OSError, GlispError):
        return None


class _LoopThread:
    """An event loop on a thread for the in-process source, so its loader overlaps compute too."""

    def __init__(self) -> None:
        import threading

        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="glisp-local-loop", daemon=True)
        self.thread.start()

    def submit(self, coro: Any) -> Future:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()


def open_in_process(dataset: str | Path, run: str, cfg: Config) -> GraphSource:
    """A source over a one-partition run of ``dataset`` sampled in this process (the accuracy reference)."""
    from glisp_core.partition_format import open_partition
    from glisp_sampling.cluster_facts import local_cluster_info, read_heldout
    from glisp_sampling.gather import PartitionSampler
    from glisp_sampling.inprocess import LocalBackend
    from glisp_serving.cluster.cluster_file import num_parts_of
    from glisp_serving.server.partition_cache import local_partition
    from glisp_train.node_embeddings import LocalEmbeddings

    dv = resolve_dataset(dataset, cfg.dataset.root)
    parts = num_parts_of(dv, run)
    if parts != 1:
        raise StageError(
            f"in-process training samples one whole-graph partition: run {run!r} has {parts} partitions "
            f"(make one: 'glisp partition {dv.path} --algorithm random --parts 1 --name whole' and 'glisp serialize "
            f"{dv.path} --partition whole', then --in-process whole, which also creates it when missing; or serve "
            f"run {run!r} and train with --cluster)"
        )
    path, _ = local_partition(dv, run, 0, cfg.serve)  # an object-store partition: its verified local copy
    reader = open_partition(path, verify=False)
    info = local_cluster_info(dv, run, [reader])
    engine = PartitionSampler(reader, threads=1, max_fanout=cfg.serve.max_fanout)
    backend = LocalBackend(engine, num_vertices=info.num_vertices)
    loop = _LoopThread()

    def close() -> None:
        loop.close()
        engine.close()

    return GraphSource(
        kind="in-process",
        backend=backend,
        submit=loop.submit,
        info=info,
        dv=dv,
        heldout_fn=lambda: read_heldout(dv, run),
        close_fn=close,
        description=f"in process, run {run} of {dv.path}",
        embeddings=LocalEmbeddings(reader.master_gids, cfg.serve.embedding_mb),
    )


def check_dataset_matches(source: GraphSource, dataset: str | None, cfg: Config) -> None:
    """A DATASET argument given beside --cluster must be the version the servers serve."""
    if not dataset or source.dv is None:
        return
    dv = resolve_dataset(dataset, cfg.dataset.root)
    if dv.path != source.dv.path:
        raise GlispError(f"DATASET {dv.path} is not the version the cluster serves ({source.dv.path})")
