"""In-process sampling: the same kernels, Apply and k-hop logic as the service, with no RPC.

- :class:`LocalSampler` samples one partition holding the whole graph: the limit the service is
  measured against (bench/sampling.py), and a reference for the tests.
- :class:`PartitionsBackend` samples every partition of a run in this process, routed exactly as the
  client routes (each frontier vertex to every partition holding it, features from its master), so
  its samples equal the cluster's for the same request seeds. Sample-wise inference (glisp_infer)
  uses it as its baseline; :func:`gather_split` is the Gather + Apply step that layerwise inference
  tasks share with it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Iterator, Sequence
from concurrent.futures import Future
from typing import Any, TypeVar

import numpy as np

from glisp_sampling.apply import HopSample, Partial, merge_partials
from glisp_sampling.blocks import SampledBatch
from glisp_sampling.gather import PartitionSampler
from glisp_sampling.khop import Fanout, HopRequest, KHopSampler, hop_request, iterate_batches
from glisp_sampling.routing import RoutingTable

_T = TypeVar("_T")


def gather_split(
    frontier: np.ndarray,
    split: Sequence[np.ndarray],
    engine_of: Callable[[int], PartitionSampler],
    req: HopRequest,
    scratch: np.ndarray | None = None,
) -> HopSample:
    """Gather the partial samples of ``frontier`` from each partition ``k`` given the positions
    ``split[k]`` it holds (partitions in ascending order, as the client does), then Apply."""
    partials, merge = [], "concat"
    nslot = len(req.type_fanouts) if req.type_fanouts else 1
    fanouts = np.array([f for _, f in req.type_fanouts] if req.type_fanouts else [req.fanout], np.int64)
    for k, pos in enumerate(split):
        if len(pos) == 0:
            continue
        res = engine_of(k).gather(
            frontier[pos],
            fanout=req.fanout,
            type_fanouts=req.type_fanouts,
            method=req.method,
            direction=req.direction,
            max_time=req.max_time,
            seed=req.seed,
            edge_ids=req.edge_ids,
        )
        merge = res.merge
        partials.append(
            Partial(
                pos=pos, counts=res.counts.reshape(len(pos), nslot), nbrs=res.nbrs, keys=res.keys, edge_ids=res.edge_ids
            )
        )
    return merge_partials(
        len(frontier), partials, merge, fanouts, want_eids=req.edge_ids, dst=frontier, scratch=scratch
    )


class LocalBackend:
    def __init__(self, engine: PartitionSampler, num_vertices: int | None = None) -> None:
        self.engine = engine
        gid = engine.global_id
        self.num_vertices = int(num_vertices if num_vertices is not None else (int(gid[-1]) + 1 if len(gid) else 0))

    async def gather(self, frontier: np.ndarray, req: HopRequest, scratch: np.ndarray | None = None) -> HopSample:
        frontier = np.asarray(frontier, np.int64)
        return gather_split(frontier, [np.arange(len(frontier))], lambda k: self.engine, req, scratch)

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

    def _submit(self, coro: Coroutine[Any, Any, _T]) -> Future[_T]:
        fut: Future[_T] = Future()
        fut.set_result(self._loop.run_until_complete(coro))
        return fut

    def loader(
        self,
        seeds: np.ndarray,
        batch_size: int,
        fanouts: Sequence[Fanout],
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
        **kw: Any,
    ) -> Iterator[SampledBatch]:
        return iterate_batches(
            self._submit, self.sampler(fanouts, **kw), seeds, batch_size, shuffle, seed, 1, drop_last
        )

    def close(self) -> None:
        self._loop.close()


class PartitionsBackend:
    """Gather and lookups over all partitions of a run, in process (the cluster without RPC)."""

    def __init__(self, engines: Sequence[PartitionSampler], routing: RoutingTable) -> None:
        self.engines = list(engines)
        self.routing = routing
        self.num_vertices = routing.num_vertices

    async def gather(self, frontier: np.ndarray, req: HopRequest, scratch: np.ndarray | None = None) -> HopSample:
        frontier = np.asarray(frontier, np.int64)
        return gather_split(frontier, self.routing.split(frontier), self.engines.__getitem__, req, scratch)

    async def lookup(self, ids: np.ndarray, features: bool, labels: bool) -> dict[str, np.ndarray]:
        ids = np.asarray(ids, np.int64)
        out: dict[str, np.ndarray] = {}
        for k, pos in enumerate(self.routing.split_master(ids)):
            if len(pos) == 0:
                continue
            for name, arr in self.engines[k].features(ids[pos], features, labels).items():
                if name not in out:
                    out[name] = np.empty((len(ids),) + arr.shape[1:], arr.dtype)
                out[name][pos] = arr
        return out

    def sample(self, seeds: np.ndarray, fanouts: Sequence[Fanout], seed: int = 0, **kw: Any) -> SampledBatch:
        """One k-hop mini-batch on the caller's thread."""
        return asyncio.run(KHopSampler(self, fanouts, **kw).sample(seeds, seed))
