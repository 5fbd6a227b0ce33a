"""A trainer-side static feature cache after PaGraph: the hottest vertices' features stay with the trainer.

A vertex is fetched as often as it is sampled as a neighbour, and with uniform sampling that grows with
its degree *in the sampling direction*: with ``direction = "in"`` a frontier vertex draws from its
in-neighbours, so a vertex is drawn through its out-edges and its out-degree ranks it; with ``"out"``, its
in-degree. The cache holds the top vertices by that degree, as many as fit in ``train.feature_cache_mb``,
filled once before training (PaGraph section 4: static, no replacement; on power-law graphs a small
share of the vertices covers most of the fetches). It lives on the GPU when training on one, else in
host memory. Every batch's input rows are split into hits (copied from the cache) and misses (one
Lookup per master server, as without a cache); the hit ratio and the bytes fetched are counted.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from glisp_core.id_rows import IdRows

FILL_CHUNK = 1 << 16  # vertices per Lookup while filling


@dataclass
class FeaturePlan:
    """A batch's input rows: which come from the cache (``hit_pos`` <- ``cache_rows``) and which were fetched."""

    n: int
    hit_pos: np.ndarray
    cache_rows: np.ndarray
    miss_pos: np.ndarray
    fetched: np.ndarray  # float32 (len(miss_pos), d)


@dataclass
class CacheCounters:
    rows: int = 0  # input rows asked for
    hits: int = 0
    bytes_fetched: int = 0  # feature bytes that came over the network

    def minus(self, other: CacheCounters) -> CacheCounters:
        return CacheCounters(self.rows - other.rows, self.hits - other.hits, self.bytes_fetched - other.bytes_fetched)

    @property
    def hit_ratio(self) -> float:
        return self.hits / self.rows if self.rows else 0.0


class FeatureCache:
    """Features of a fixed vertex set (sorted ``ids``) on ``device``; the rest fetched per batch."""

    def __init__(self, backend, ids: np.ndarray, feats: torch.Tensor, dim: int) -> None:
        self.backend = backend
        self.ids = np.asarray(ids, np.int64)  # sorted
        self.rows = IdRows(self.ids)  # hottest ids are dense: a table, not a binary search per input row
        self.feats = feats
        self.dim = dim
        self.counters = CacheCounters()

    @property
    def device(self) -> torch.device:
        return self.feats.device

    @property
    def nbytes(self) -> int:
        return int(self.feats.numel() * self.feats.element_size())

    @staticmethod
    def hottest(degree: np.ndarray, rows: int) -> np.ndarray:
        """The ``rows`` vertices of highest degree (ties by lower id), sorted by id."""
        rows = int(min(max(rows, 0), len(degree)))
        if rows == 0:
            return np.empty(0, np.int64)
        order = np.lexsort((np.arange(len(degree)), -np.asarray(degree, np.int64)))
        return np.sort(order[:rows]).astype(np.int64)

    @classmethod
    async def build(cls, backend, degree: np.ndarray, budget_bytes: int, dim: int, device: torch.device):
        """Fill the cache with the hottest vertices that fit in ``budget_bytes`` (an empty cache for 0)."""
        rows = budget_bytes // (4 * dim) if dim else 0
        ids = cls.hottest(degree, rows)
        feats = torch.empty((len(ids), dim), dtype=torch.float32)
        for a in range(0, len(ids), FILL_CHUNK):
            got = await backend.lookup(ids[a : a + FILL_CHUNK], True, False)
            feats[a : a + FILL_CHUNK] = torch.from_numpy(np.ascontiguousarray(got["features"]))
        return cls(backend, ids, feats.to(device), dim)

    async def plan(self, input_ids: np.ndarray) -> FeaturePlan:
        """Split ``input_ids`` into cache hits and misses, fetching the misses from their masters."""
        ids = np.asarray(input_ids, np.int64)
        pos = self.rows.find(ids)
        hit = pos >= 0
        miss_pos = np.flatnonzero(~hit)
        fetched = np.empty((0 if self.dim else len(miss_pos), self.dim), np.float32)  # featureless: no Lookup
        if len(miss_pos) and self.dim:
            fetched = (await self.backend.lookup(ids[miss_pos], True, False))["features"]
        c = self.counters
        c.rows += len(ids)
        c.hits += int(hit.sum())
        c.bytes_fetched += int(fetched.nbytes)
        hit_pos = np.flatnonzero(hit)
        return FeaturePlan(len(ids), hit_pos, pos[hit_pos], miss_pos, fetched)

    def assemble(self, plan: FeaturePlan, device: torch.device) -> torch.Tensor:
        """The batch's input features on ``device``, in input order."""
        x = torch.empty((plan.n, self.dim), dtype=torch.float32, device=device)
        if len(plan.hit_pos):
            rows = torch.from_numpy(plan.cache_rows).to(self.device)
            x[torch.from_numpy(plan.hit_pos).to(device)] = self.feats[rows].to(device)
        if len(plan.miss_pos):
            x[torch.from_numpy(plan.miss_pos).to(device)] = torch.from_numpy(np.ascontiguousarray(plan.fetched)).to(
                device
            )
        return x


def hot_degree(out_degree: np.ndarray, in_degree: np.ndarray, direction: str) -> np.ndarray:
    """How often each vertex is drawn as a neighbour: out-degree when sampling in-neighbours, else in-degree."""
    return out_degree if direction == "in" else in_degree
