"""GLISP k-hop sampling (Algorithm 1) over any Gather backend: the remote cluster or one local partition.

Per hop: Gather partial one-hop samples of the frontier (the backend routes and calls servers), Apply
(merge, :mod:`glisp_sampling.apply`), relabel into a block; the block's source vertices are the next
frontier. After the last hop, features of the input vertices and labels of the seeds are looked up at
their master partitions. Written as coroutines so that one event loop keeps several batches in flight.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Coroutine, Iterator, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Protocol, cast

import numpy as np
import torch

from glisp_core.errors import GlispError
from glisp_sampling import kernels as K
from glisp_sampling import profile
from glisp_sampling.apply import HopSample
from glisp_sampling.blocks import SampledBatch, build_block

Fanout = int | Mapping[str, int] | Sequence[tuple[str, int]]
SCRATCH_LIMIT = 1 << 28  # above this many vertices, relabel by sorting instead of a dense scratch map


@dataclass(frozen=True)
class HopRequest:
    """What one hop asks every server (the frontier travels separately)."""

    fanout: int | None = None
    type_fanouts: tuple[tuple[str, int], ...] | None = None
    method: str = "uniform"
    direction: str = "out"
    max_time: int | None = None
    seed: int = 0
    edge_ids: bool = False

    @property
    def typed(self) -> bool:
        return bool(self.type_fanouts)


def hop_request(fanout: Fanout, **kw: Any) -> HopRequest:
    """A HopRequest from an int fanout or per-type fanouts ({"cites": 10} or [("cites", 10)])."""
    if isinstance(fanout, (int, np.integer)) and not isinstance(fanout, bool):
        return HopRequest(fanout=int(fanout), **kw)
    items: list[tuple[Any, ...]]
    if isinstance(fanout, Mapping):
        items = list(fanout.items())
    else:  # (str, int) pairs; a bool is none: iterating it raises TypeError
        items = [tuple(x) for x in cast(Sequence[tuple[str, int]], fanout)]
    if not items:
        raise GlispError(f"fanout: expected an int or per-type fanouts (got {fanout!r})")
    return HopRequest(type_fanouts=tuple((str(t), int(f)) for t, f in items), **kw)


class GatherBackend(Protocol):
    num_vertices: int

    async def gather(self, frontier: np.ndarray, req: HopRequest, scratch: np.ndarray | None = None) -> HopSample: ...

    async def lookup(self, ids: np.ndarray, features: bool, labels: bool) -> dict[str, np.ndarray]: ...


class SeedError(GlispError):
    """Seeds that are not a 1-d array of distinct integer vertex ids."""


def check_seeds(seeds: Any, what: str = "seeds") -> np.ndarray:
    """``seeds`` as int64, or SeedError: ids must be integers (never truncated) and distinct.

    Duplicates fail rather than being dropped: row i of a batch's output is seed i, so a silently
    shortened batch would misalign every row after the first repeat. Deduplicate first
    (``np.unique(ids, return_inverse=True)``) and expand the output with the inverse.
    """
    arr = np.asarray(seeds)
    if arr.size == 0:
        return np.empty(0, np.int64)
    if arr.ndim != 1:
        raise SeedError(f"{what}: expected a 1-d array of vertex ids (got shape {arr.shape})")
    if arr.dtype.kind not in "iu":
        ex = ", ".join(repr(x) for x in arr[:3].tolist())
        raise SeedError(
            f"{what}: expected integer vertex ids (got dtype {arr.dtype}, e.g. {ex}); ids are never rounded. "
            "Original ids map to vertex ids with glisp_core.dataset.idmap.IdMap"
        )
    if arr.dtype.kind == "u" and arr.max() > np.iinfo(np.int64).max:
        raise SeedError(f"{what}: vertex ids must be below 2^63 (got {int(arr.max())})")
    arr = arr.astype(np.int64, copy=False)
    srt = np.sort(arr)
    dup = srt[1:][srt[1:] == srt[:-1]]
    if len(dup):
        raise SeedError(
            f"{what}: {len(dup)} repeated vertex ids (e.g. {', '.join(str(int(v)) for v in np.unique(dup)[:3])}); "
            "a batch holds each vertex once, so row i of its output is seed i. Deduplicate with "
            "np.unique(ids, return_inverse=True) and expand the output with the inverse"
        )
    return arr


def hop_seed(seed: int, hop: int) -> int:
    """The request seed of one hop of one batch (all servers get the same one)."""
    return int(K.task_seed(np.uint64(seed & 0xFFFFFFFFFFFFFFFF), hop, 0, 0, 0))


class VersionChanged(GlispError):
    """An answer came from another dataset version than the batch's (a hot reload is under way): the
    batch is sampled again, whole, on one version."""

    def __init__(self, seen: set[str], expected: str | None) -> None:
        super().__init__(f"answers from versions {sorted(seen)} while sampling on {expected}")
        self.seen, self.expected = seen, expected


VERSION_RETRIES = 20  # batches restarted on a version change (each after the backend followed it)


class KHopSampler:
    """Samples mini-batches of blocks; the backend decides where one-hop samples come from."""

    def __init__(
        self,
        backend: GatherBackend,
        fanouts: Sequence[Fanout],
        method: str = "uniform",
        direction: str = "out",
        max_time: int | None = None,
        edge_ids: bool = False,
        features: bool = True,
        labels: bool = True,
        keep_hops: bool = False,
    ) -> None:
        if not fanouts:
            raise GlispError("fanouts: expected one fanout per hop (got none)")
        self.backend = backend
        self.hops = [
            hop_request(f, method=method, direction=direction, max_time=max_time, edge_ids=edge_ids) for f in fanouts
        ]
        self.features, self.labels, self.keep_hops = features, labels, keep_hops
        self._local = threading.local()

    def _scratch(self) -> np.ndarray | None:
        n = self.backend.num_vertices
        if n > SCRATCH_LIMIT:
            return None
        s = getattr(self._local, "scratch", None)
        if s is None or len(s) != n:
            s = np.full(n, -1, np.int32)
            self._local.scratch = s
        return s

    async def sample(self, seeds: np.ndarray, seed: int = 0) -> SampledBatch:
        """One mini-batch for ``seeds`` (distinct integer global ids, else SeedError; see check_seeds).

        Every hop and lookup of the batch comes from one dataset version: when the servers move to
        another one mid-batch (hot reload), the backend follows them and the batch starts over."""
        seeds = check_seeds(seeds)
        for _ in range(VERSION_RETRIES):
            try:
                return await self._sample(seeds, seed)
            except VersionChanged as e:
                await self.backend.follow_version(e)  # type: ignore[attr-defined]
        raise GlispError(f"the servers' dataset version kept changing over {VERSION_RETRIES} attempts of one batch")

    async def _sample(self, seeds: np.ndarray, seed: int) -> SampledBatch:
        frontier = seeds
        blocks, hops = [], []
        for h, req in enumerate(self.hops):
            r = HopRequest(**{**req.__dict__, "seed": hop_seed(seed, h)})
            scratch = self._scratch()
            hop = await self.backend.gather(frontier, r, scratch)
            with profile.stage("client.block"):
                block = build_block(frontier, hop, scratch, typed=r.typed)
            blocks.append(block)
            if self.keep_hops:
                hops.append(hop)
            frontier = block.src_ids.numpy()
        blocks.reverse()
        batch = SampledBatch(seeds=torch.from_numpy(seeds), blocks=blocks, hops=hops if self.keep_hops else None)
        if self.features or self.labels:
            import asyncio

            jobs = []
            if self.features:
                jobs.append(self.backend.lookup(frontier, True, False))
            if self.labels:
                jobs.append(self.backend.lookup(seeds, False, True))
            res = await asyncio.gather(*jobs)
            if self.features and "features" in res[0]:  # torch shares the arrays' memory
                batch.x = torch.from_numpy(res[0]["features"])
            if self.labels and "labels" in res[-1]:
                batch.y = torch.from_numpy(res[-1]["labels"])
        return batch


def iterate_batches(
    submit: Callable[[Coroutine[Any, Any, SampledBatch]], Future[SampledBatch]],
    sampler: KHopSampler,
    seeds: np.ndarray,
    batch_size: int,
    shuffle: bool,
    seed: int,
    prefetch: int,
    drop_last: bool,
) -> Iterator[SampledBatch]:
    """Yield batches in order while keeping up to ``prefetch`` of them being sampled."""
    if batch_size <= 0:
        raise GlispError(f"batch_size: must be positive (got {batch_size})")
    seeds = check_seeds(seeds)
    if shuffle:
        seeds = seeds[np.random.default_rng(seed).permutation(len(seeds))]
    stops = list(range(0, len(seeds), batch_size))
    if drop_last and len(seeds) % batch_size:
        stops = stops[:-1]
    pending: deque[Future[SampledBatch]] = deque()
    nxt = 0
    try:
        while nxt < len(stops) or pending:
            while nxt < len(stops) and len(pending) < max(1, prefetch):
                a = stops[nxt]
                pending.append(submit(sampler.sample(seeds[a : a + batch_size], seed=seed * 1_000_003 + nxt)))
                nxt += 1
            yield pending.popleft().result()
    finally:
        for f in pending:
            f.cancel()
