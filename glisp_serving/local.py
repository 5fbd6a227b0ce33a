"""In-process sampling over one partition holding the whole graph: the same kernels, no RPC.

The limit the service is measured against (bench/sampling.py), and a reference for the tests: the
k-hop logic, Apply and blocks are exactly the client's; only Gather is a direct call.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from typing import Any

import numpy as np

from glisp_serving.apply import HopSample, Partial, merge_partials
from glisp_serving.blocks import SampledBatch
from glisp_serving.client import iterate_batches
from glisp_serving.engine import PartitionSampler
from glisp_serving.sampler import Fanout, HopRequest, KHopSampler, hop_request


class LocalBackend:
    def __init__(self, engine: PartitionSampler, num_vertices: int | None = None) -> None:
        self.engine = engine
        gid = engine.global_id
        self.num_vertices = int(num_vertices if num_vertices is not None else (int(gid[-1]) + 1 if len(gid) else 0))

    async def gather(self, frontier: np.ndarray, req: HopRequest, scratch: np.ndarray | None = None) -> HopSample:
        frontier = np.asarray(frontier, np.int64)
        res = self.engine.gather(frontier, fanout=req.fanout, type_fanouts=req.type_fanouts, method=req.method,
                                 direction=req.direction, max_time=req.max_time, seed=req.seed,
                                 edge_ids=req.edge_ids)  # fmt: skip
        p = Partial(pos=np.arange(len(frontier)), counts=res.counts, nbrs=res.nbrs, keys=res.keys,
                    edge_ids=res.edge_ids)  # fmt: skip
        return merge_partials(len(frontier), [p], res.merge, res.fanouts, want_eids=req.edge_ids, dst=frontier,
                              scratch=scratch)  # fmt: skip

    async def lookup(self, ids: np.ndarray, features: bool, labels: bool) -> dict[str, np.ndarray]:
        return self.engine.features(np.asarray(ids, np.int64), features, labels)


class LocalSampler:
    """k-hop sampling on the caller's thread over one whole-graph partition."""

    def __init__(self, engine: PartitionSampler, num_vertices: int | None = None) -> None:
        self.backend = LocalBackend(engine, num_vertices)
        self._loop = asyncio.new_event_loop()

    def sampler(self, fanouts: Sequence[Fanout], **kw: Any) -> KHopSampler:
        return KHopSampler(self.backend, fanouts, **kw)

    def gather(self, frontier: np.ndarray, fanout: Fanout, **kw: Any) -> HopSample:
        return self._loop.run_until_complete(self.backend.gather(frontier, hop_request(fanout, **kw)))

    def sample(self, seeds: np.ndarray, fanouts: Sequence[Fanout], seed: int = 0, **kw: Any) -> SampledBatch:
        return self._loop.run_until_complete(self.sampler(fanouts, **kw).sample(seeds, seed))

    def _submit(self, coro: Any) -> Future:
        fut: Future = Future()
        fut.set_result(self._loop.run_until_complete(coro))
        return fut

    def loader(self, seeds: np.ndarray, batch_size: int, fanouts: Sequence[Fanout], shuffle: bool = True,
               seed: int = 0, drop_last: bool = False, **kw: Any) -> Iterator[SampledBatch]:  # fmt: skip
        return iterate_batches(self._submit, self.sampler(fanouts, **kw), seeds, batch_size, shuffle, seed, 1,
                               drop_last)  # fmt: skip

    def close(self) -> None:
        self._loop.close()
