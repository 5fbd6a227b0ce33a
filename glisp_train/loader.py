"""The training loader: sampling and feature fetch of the next batches overlap compute on the current one.

Each batch is one coroutine on the source's event loop thread: k-hop sampling (Gather RPCs, Apply,
relabel), then the feature plan (cache hits, one Lookup per master server for the misses), then, when
the cache lives in host memory, the input matrix itself. ``prefetch`` such batches run ahead of the one
being computed, so with enough prefetch the trainer only waits when sampling is slower than compute.
The time the trainer spends blocked on a batch (``wait_s``) and computing (``compute_s``, everything
between receiving a batch and asking for the next) is measured per epoch.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from glisp_sampling.blocks import SampledBatch
from glisp_sampling.khop import Fanout, KHopSampler
from glisp_train.cache import FeatureCache, FeaturePlan


@dataclass
class Batch:
    """One prepared mini-batch: blocks of ``seeds`` and their input features (or a plan for them)."""

    seeds: np.ndarray
    sampled: SampledBatch | None  # None for an empty batch (a process whose share ran out)
    x: torch.Tensor | None = None
    plan: FeaturePlan | None = None
    extra: Any = None  # the task's own payload (link: where each pair's endpoints sit among the seeds)
    emb: np.ndarray | None = None  # learnable node embedding rows of the input vertices, when trained
    emb_leaf: torch.Tensor | None = None  # ... as the leaf tensor whose gradient goes back to their holder

    @property
    def empty(self) -> bool:
        return self.sampled is None

    def features(self, cache: FeatureCache, device: torch.device) -> torch.Tensor:
        """The model's input rows: the features, then the node embedding rows (a leaf with a gradient when
        autograd is on)."""
        if self.x is None:
            assert self.plan is not None
            self.x = cache.assemble(self.plan, device)
        x = self.x.to(device, non_blocking=True)
        if self.emb is None:
            return x
        if self.emb_leaf is None:
            self.emb_leaf = torch.from_numpy(self.emb).to(device).requires_grad_(torch.is_grad_enabled())
        return torch.cat([x, self.emb_leaf], dim=1) if x.shape[1] else self.emb_leaf


@dataclass
class LoaderTimes:
    wait_s: float = 0.0
    compute_s: float = 0.0
    batches: int = 0
    sampled_edges: int = 0
    input_rows: int = 0
    t0: float = field(default_factory=time.perf_counter)

    @property
    def total_s(self) -> float:
        return time.perf_counter() - self.t0


class Loader:
    """Batches of given seed arrays with ``prefetch`` batches in flight (see the module docstring)."""

    def __init__(
        self,
        source: Any,
        fanouts: Sequence[Fanout],
        cache: FeatureCache,
        prefetch: int,
        direction: str,
        expand: Callable[[Any, int], Awaitable[tuple[np.ndarray, Any]]] | None = None,
        embeddings: Any = None,
    ) -> None:
        self.source = source
        self.embeddings = embeddings  # NodeEmbeddings: their rows are fetched with each batch
        self.expand = expand
        self.cache = cache
        self.prefetch = max(0, int(prefetch))
        self.sampler = KHopSampler(source.backend, fanouts, direction=direction, features=False, labels=False)
        self.host_assembly = cache.device.type == "cpu"

    async def _prepare(self, item: Any, seed: int) -> Batch:
        if self.expand is not None:
            seeds, extra = await self.expand(item, seed)
        else:
            seeds, extra = np.asarray(item, np.int64), None
        if len(seeds) == 0:
            return Batch(seeds, None, extra=extra)
        sampled = await self.sampler.sample(seeds, seed)
        plan = await self.cache.plan(sampled.input_ids.numpy())
        b = Batch(seeds, sampled, plan=plan, extra=extra)
        if self.embeddings is not None:
            b.emb = await self.embeddings.rows(sampled.input_ids.numpy())
        if self.host_assembly:  # off the trainer's thread
            b.x = self.cache.assemble(plan, torch.device("cpu"))
            b.plan = None
        return b

    def batches(self, items: Sequence[Any], seed: int, times: LoaderTimes) -> Iterator[Batch]:
        """Yield prepared batches in order; time blocked here counts as waiting, time away as computing.

        ``items`` are seed arrays, or whatever ``expand`` turns into (seeds, extra) on the loop thread.
        """
        pending: deque = deque()
        nxt = 0
        n = len(items)

        def submit_more(limit: int) -> None:
            nonlocal nxt
            while nxt < n and len(pending) < limit:
                pending.append(self.source.submit(self._prepare(items[nxt], seed * 1_000_003 + nxt)))
                nxt += 1

        try:
            while nxt < n or pending:
                t = time.perf_counter()
                submit_more(1)  # the batch needed now
                b = pending.popleft().result()
                submit_more(self.prefetch)  # and the ones after it, sampled while this one computes
                times.wait_s += time.perf_counter() - t
                times.batches += 1
                if b.sampled is not None:
                    times.sampled_edges += b.sampled.num_sampled_edges
                    times.input_rows += len(b.sampled.input_ids)
                t = time.perf_counter()
                yield b
                times.compute_s += time.perf_counter() - t
        finally:
            for f in pending:
                f.cancel()
