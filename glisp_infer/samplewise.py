"""Sample-wise inference, the baseline layerwise inference is measured against (GLISP section III-D).

For every batch of seed vertices it samples their K-hop trees with the k-hop sampler, looks up the
input features at their master partitions and runs the whole model, exactly as training does; every
intermediate embedding is thrown away. It runs in process over all partitions of the run
(:class:`glisp_serving.local.PartitionsBackend`: the cluster's routing and kernels without RPC), so its
samples are the ones the service would return, and with the same seed they are the ones layerwise
inference aggregates.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from glisp_core.dataset.layout import DatasetVersion
from glisp_core.dataset.manifest import Manifest
from glisp_infer.sampling import check_fanouts, fanout_for, max_degree


@dataclass
class SamplewiseResult:
    embeddings: np.ndarray  # (len(seeds), out_dim), rows in the order of the seeds
    sample_s: float = 0.0  # sampling and feature lookups
    model_s: float = 0.0
    sampled_edges: int = 0
    input_vertices: int = 0  # sum over batches of the input layer's vertices (the redundancy)
    batches: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def total_s(self) -> float:
        return self.sample_s + self.model_s


class Samplewise:
    """The partitions of a run opened in process, ready to sample K-hop trees."""

    def __init__(self, dv: DatasetVersion, run: str) -> None:
        from glisp_core.partition_format import open_partition
        from glisp_serving.engine import PartitionSampler
        from glisp_serving.local import PartitionsBackend
        from glisp_serving.routing import RoutingTable

        parts = int(Manifest.read(dv.manifest_path).stage(f"partition/{run}").counts["parts"])
        self.readers = [open_partition(dv.partition_dir(run, k), verify=False) for k in range(parts)]
        self.backend = PartitionsBackend([PartitionSampler(r) for r in self.readers],
                                         RoutingTable.from_partitions(dv, run, parts))  # fmt: skip

    def run(self, model: Any, seeds: np.ndarray, fanouts: list[int], batch_size: int = 1024, seed: int = 0,
            direction: str = "out", device: Any = "cpu") -> SamplewiseResult:  # fmt: skip
        """Embeddings of ``seeds`` (global ids); ``fanouts`` per hop, first hop first, -1 = every neighbour.

        Every batch uses the request seed ``seed``, so a vertex's neighbours at a hop are the same in
        every tree it appears in, and the same as layerwise inference draws with that seed.
        """
        import torch

        from glisp_serving.sampler import KHopSampler

        spec = model.spec
        fan = check_fanouts(fanouts, spec.layers)
        rel = tuple(spec.relations) if spec.arch == "rgcn" else ()
        full = max_degree(self.readers, direction)
        sampler = KHopSampler(self.backend, [fanout_for(f, rel, full) for f in fan], direction=direction,
                              features=True, labels=False)  # fmt: skip
        seeds = np.asarray(seeds, np.int64)
        out = np.empty((len(seeds), spec.out_dim), np.float32)
        res = SamplewiseResult(out)
        model.eval()
        for a in range(0, len(seeds), batch_size):
            t = time.perf_counter()
            batch = self.backend_sample(sampler, seeds[a : a + batch_size], seed)
            t1 = time.perf_counter()
            types = [b.edge_type.to(device) for b in batch.blocks] if rel else None
            blocks = [_on(b, device) for b in batch.blocks]
            with torch.no_grad():
                h = model(batch.x.to(device), blocks, types)
            out[a : a + batch_size] = h.to("cpu", torch.float32).numpy()
            res.sample_s += t1 - t
            res.model_s += time.perf_counter() - t1
            res.sampled_edges += batch.num_sampled_edges
            res.input_vertices += int(batch.input_ids.shape[0])
            res.batches += 1
        return res

    @staticmethod
    def backend_sample(sampler: Any, seeds: np.ndarray, seed: int) -> Any:
        import asyncio

        return asyncio.run(sampler.sample(seeds, seed))


def _on(block: Any, device: Any) -> Any:
    """The block with its edge index on ``device`` (the model only reads edge_index and num_dst)."""
    from types import SimpleNamespace

    return SimpleNamespace(edge_index=block.edge_index.to(device), num_dst=block.num_dst)
