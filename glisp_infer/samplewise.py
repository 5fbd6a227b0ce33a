"""Sample-wise inference, the baseline layerwise inference is measured against (GLISP section III-D).

For every batch of seed vertices it samples their K-hop trees with the k-hop sampler, looks up the
input features at their master partitions and runs the whole model, exactly as training does; every
intermediate embedding is thrown away. Two backends:

- :meth:`Samplewise.in_process`: all partitions of the run opened in this process
  (:class:`glisp_sampling.inprocess.PartitionsBackend`: the cluster's routing and kernels without RPC), the
  fastest sample-wise can be;
- :meth:`Samplewise.service`: a running sampling cluster through :class:`SamplingClient`, as training does.

:meth:`Samplewise.run` embeds vertices; :meth:`Samplewise.run_pairs` scores edges as link training does,
one batch of pairs at a time from the trees of their distinct endpoints (GLISP's link-prediction baseline:
every endpoint's tree is sampled and computed again in every batch it appears in).

Every batch uses the request seed ``seed``, so a vertex's neighbours at a hop are the same in every tree
it appears in, and the same ones layerwise inference draws with that seed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from glisp_core.dataset.layout import DatasetVersion
from glisp_core.dataset.manifest import read_manifest
from glisp_core.models import typed_relations
from glisp_infer.sampling import check_fanouts, fanout_for, max_degree


@dataclass(kw_only=True)
class SamplewiseCost:
    """What sample-wise inference spent, summed over its batches."""

    sample_s: float = 0.0  # sampling and feature lookups
    model_s: float = 0.0  # the forward pass (and, for pairs, their scores)
    cpu_s: float = 0.0  # CPU seconds of this process over the run
    sampled_edges: int = 0
    input_vertices: int = 0  # summed over batches: the input layer's vertices
    slice_rows: int = 0  # summed over batches and layers: rows the slices computed (layerwise: layers x n)
    batches: int = 0

    @property
    def total_s(self) -> float:
        return self.sample_s + self.model_s


@dataclass
class SamplewiseResult(SamplewiseCost):
    embeddings: np.ndarray  # (len(seeds), out_dim), rows in the order of the seeds


@dataclass
class PairsResult(SamplewiseCost):
    scores: np.ndarray  # float32, one per pair, in the order of the pairs


def _readers(dv: DatasetVersion, run: str) -> list[Any]:
    """Every partition memory-mapped: in place, or from its verified copy in ``serve.cache_dir``'s default."""
    from glisp_core.config import ServeConfig
    from glisp_core.partition_format import open_partition
    from glisp_serving.server.partition_cache import local_partition

    parts = int(read_manifest(dv).stage(f"partition/{run}").counts["parts"])
    return [open_partition(local_partition(dv, run, k, ServeConfig())[0], verify=False) for k in range(parts)]


class Samplewise:
    """K-hop trees from ``sample(seeds, fanouts, seed, direction)``, the whole model on each batch."""

    def __init__(self, sample: Callable[..., Any], readers: list[Any]) -> None:
        self.sample, self.readers = sample, readers

    @classmethod
    def in_process(cls, dv: DatasetVersion, run: str) -> Samplewise:
        from glisp_infer.sampling import task_engine
        from glisp_sampling.cluster_facts import routing_from_partitions
        from glisp_sampling.inprocess import PartitionsBackend
        from glisp_sampling.khop import KHopSampler

        readers = _readers(dv, run)
        backend = PartitionsBackend([task_engine(r) for r in readers], routing_from_partitions(dv, run, len(readers)))

        def sample(seeds: np.ndarray, fanouts: list, seed: int, direction: str) -> Any:
            sampler = KHopSampler(backend, fanouts, direction=direction, features=True, labels=False)
            return asyncio.run(sampler.sample(seeds, seed))

        return cls(sample, readers)

    @classmethod
    def service(cls, client: Any, dv: DatasetVersion, run: str) -> Samplewise:
        """Through a :class:`glisp_serving.client.sampling_client.SamplingClient` connected to the run's servers."""

        def sample(seeds: np.ndarray, fanouts: list, seed: int, direction: str) -> Any:
            return client.sample(seeds, fanouts, seed=seed, direction=direction, labels=False)

        return cls(sample, _readers(dv, run))

    def run(
        self,
        model: Any,
        seeds: np.ndarray,
        fanouts: list[int],
        batch_size: int = 1024,
        seed: int = 0,
        direction: str = "in",
        device: Any = "cpu",
    ) -> SamplewiseResult:
        """Embeddings of ``seeds`` (global ids); ``fanouts`` per hop, first hop first, -1 = every neighbour."""
        seeds = np.asarray(seeds, np.int64)
        res = SamplewiseResult(embeddings=np.empty((len(seeds), model.spec.out_dim), np.float32))
        forward = self._forward(model, fanouts, seed, direction, device, res)
        cpu0 = time.process_time()
        for a in range(0, len(seeds), batch_size):
            res.embeddings[a : a + batch_size] = forward(seeds[a : a + batch_size], lambda h: h)
        res.cpu_s = time.process_time() - cpu0
        return res

    def run_pairs(
        self,
        model: Any,
        src: np.ndarray,
        dst: np.ndarray,
        fanouts: list[int],
        batch_size: int = 1024,
        seed: int = 0,
        direction: str = "in",
        device: Any = "cpu",
    ) -> PairsResult:
        """Scores of the pairs (src[i], dst[i]) as link training computes them: per batch of ``batch_size``
        pairs, the K-hop trees of their distinct endpoints, the whole model, then
        :func:`glisp_core.models.link_scores` of each pair's two rows."""
        import torch

        from glisp_core.models import link_scores

        def head(h: Any, inv: np.ndarray, k: int) -> Any:
            i = torch.as_tensor(inv, device=h.device)
            return link_scores(h[i[:k]], h[i[k:]])

        src, dst = np.asarray(src, np.int64), np.asarray(dst, np.int64)
        res = PairsResult(scores=np.empty(len(src), np.float32))
        forward = self._forward(model, fanouts, seed, direction, device, res)
        cpu0 = time.process_time()
        for a in range(0, len(src), batch_size):
            s, d = src[a : a + batch_size], dst[a : a + batch_size]
            ids, inv = np.unique(np.concatenate([s, d]), return_inverse=True)
            k = len(s)
            res.scores[a : a + k] = forward(ids, partial(head, inv=inv, k=k))
        res.cpu_s = time.process_time() - cpu0
        return res

    def _forward(
        self, model: Any, fanouts: list[int], seed: int, direction: str, device: Any, cost: SamplewiseCost
    ) -> Callable[[np.ndarray, Callable[[Any], Any]], np.ndarray]:
        """One batch of the run: ``forward(seeds, head)`` samples the seeds' trees, runs the whole model and
        ``head`` on its output rows (in the order of the seeds) and returns that as float32 numpy; the batch's
        seconds and counts go to ``cost``."""
        import torch

        spec = model.spec
        rel = typed_relations(model)
        full = max_degree(self.readers, direction)
        fans = [fanout_for(f, rel, full) for f in check_fanouts(fanouts, spec.layers)]
        model.eval()

        def forward(seeds: np.ndarray, head: Callable[[Any], Any]) -> np.ndarray:
            t = time.perf_counter()
            batch = self.sample(seeds, fans, seed, direction)
            t1 = time.perf_counter()
            types = [b.edge_type.to(device) for b in batch.blocks] if rel else None
            blocks = [_on(b, device) for b in batch.blocks]
            with torch.no_grad():
                out = head(model(batch.x.to(device), blocks, types)).to("cpu", torch.float32).numpy()
            cost.sample_s += t1 - t
            cost.model_s += time.perf_counter() - t1
            cost.sampled_edges += batch.num_sampled_edges
            cost.input_vertices += int(batch.input_ids.shape[0])
            cost.slice_rows += sum(int(b.num_dst) for b in batch.blocks)
            cost.batches += 1
            return out

        return forward


def _on(block: Any, device: Any) -> Any:
    """The block with its edge index on ``device`` (the model only reads edge_index and num_dst)."""
    from types import SimpleNamespace

    return SimpleNamespace(edge_index=block.edge_index.to(device), num_dst=block.num_dst)


def samplewise_last_layer(
    plan: Any, dv: DatasetVersion, run: str, model: Any, batch_size: int = 1024
) -> dict[str, Any]:
    """``glisp infer`` of a model without the slice protocol: every vertex's output from its K-hop tree (the plan's
    fanouts and seed), written to the last layer's rows of the plan's Zarr group, in this process. Returns the
    cost as metrics."""
    from glisp_infer.store import INDEX_ROW, layer_name, open_array

    n = int(plan.layout.num_vertices)
    res = Samplewise.in_process(dv, run).run(
        model, np.arange(n, dtype=np.int64), list(plan.fanouts), batch_size, plan.seed, plan.direction
    )
    rows = np.asarray(open_array(plan.store, INDEX_ROW)[:n], np.int64)
    arr = open_array(plan.store, layer_name(plan.layers), mode="r+")
    full = np.zeros((int(plan.layout.rows), res.embeddings.shape[1]), np.float32)
    full[rows] = res.embeddings
    arr[:] = full
    return {
        "batches": res.batches,
        "sampled_edges": res.sampled_edges,
        "sample_s": round(res.sample_s, 3),
        "model_s": round(res.model_s, 3),
    }
