"""Validation and test at full neighbourhoods: the model's slices one layer at a time, as PyG's ``inference``
examples evaluate (``train.evaluation = "full"``, the default), or on sampled trees (``"sampled"``).

Full evaluation runs the slice protocol of :mod:`glisp_core.models` (``model.layer(i, x_src, edge_index,
num_dst, edge_type)``) over the evaluated vertices' L-hop neighbourhoods: ``sets[L]`` are the evaluated
vertices, ``sets[k-1]`` adds every neighbour of ``sets[k]`` (Gathers of vertices of similar degree at a fanout
of at least their largest degree, which the quota kernels answer with every edge:
:func:`glisp_sampling.degree_batches.degree_batches`), and slice ``i`` maps the rows of ``sets[i]`` to those of
``sets[i+1]``.
Each vertex's row is computed once per layer instead of once per tree it appears in, and the result equals a
full-graph forward pass. Full neighbourhoods do not change between epochs, so the blocks and the input
features of a vertex set are fetched once per run and reused by every evaluation of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from glisp_sampling.degree_batches import degree_batches
from glisp_sampling.khop import KHopSampler
from glisp_train.loader import Loader, LoaderTimes
from glisp_train.tasks import embed

# edges of one block (one Gather): the forward gathers a row per edge, so a block of E edges at width d holds
# E x d floats (8M edges at 256: 8 GB, the trainer's peak at R-MAT 22); a vertex with more stays alone in its block
BLOCK_EDGES = 1_000_000
FEATURE_CHUNK = 1 << 16  # input rows per feature plan
# a kept block's bytes per edge: source and destination ids, positions and the edge index (int64), with the
# sampler's block beside it while the plan is built
EDGE_BYTES = 32


def plan_bytes(deg: np.ndarray, ids: np.ndarray, layers: int, in_dim: int, hidden: int, top: np.ndarray) -> int:
    """An upper bound of a full evaluation's memory for ``ids`` from the degrees alone, before any sampling:
    the kept blocks, the input rows, the widest hidden layer's output and one block's gathered rows. Hop k's
    set is at most hop k+1's plus its edges (and at most every vertex); its edges at most those of as many of
    the graph's largest (capped) degrees. ``deg``: the capped degrees; ``top``: their cumulative sum, largest
    first (:func:`top_degrees`)."""
    n = len(deg)
    rows = [0] * layers + [len(ids)]
    edges = [0] * (layers + 1)
    edges[layers] = int(deg[ids].sum())
    for k in range(layers - 1, -1, -1):
        rows[k] = min(rows[k + 1] + edges[k + 1], n)
        if k > 0:
            edges[k] = int(top[rows[k] - 1]) if rows[k] else 0
    widest = max(rows[1:layers], default=0) * hidden
    block = min(BLOCK_EDGES, max(edges)) * max(in_dim, hidden)
    return EDGE_BYTES * sum(edges) + 4 * (rows[0] * in_dim + widest + block)


def top_degrees(deg: np.ndarray) -> np.ndarray:
    """Cumulative sums of the degrees, largest first: ``top[m - 1]`` bounds the edges of any m vertices."""
    return np.cumsum(np.sort(deg)[::-1], dtype=np.int64)


@dataclass
class _Block:
    """One batch of destinations of a layer: where its source and destination rows sit in the layer's sets."""

    src_pos: torch.Tensor  # rows of sets[i] (the block's sources, destinations first)
    dst_pos: torch.Tensor  # rows of sets[i + 1]
    edge_index: torch.Tensor
    num_dst: int
    edge_type: torch.Tensor | None


@dataclass
class _Plan:
    sets: list[np.ndarray]  # sets[k]: sorted vertices whose layer-k rows are needed; sets[-1]: the evaluated ones
    blocks: list[list[_Block]]  # blocks[i]: the full one-hop blocks slice i runs on
    x: torch.Tensor  # input features of sets[0], host memory


class SampledEval:
    """Evaluation on sampled trees (``train.eval_fanouts``, else the training fanouts)."""

    mode = "sampled"

    def __init__(self, loader: Loader, fanouts: list[Any], why: str = "") -> None:
        self.loader, self.fanouts, self.why = loader, fanouts, why  # why: the reason when full was asked for

    def embed(self, ctx: Any, ids: np.ndarray, times: LoaderTimes, keep: bool = True) -> tuple[np.ndarray, np.ndarray]:
        return embed(ctx, self.loader, ids, times)

    def drop_plans(self) -> None:
        """Nothing is kept between evaluations of sampled trees."""


class FullEval:
    """Evaluation at full neighbourhoods, layer by layer (see the module docstring)."""

    def __init__(
        self,
        source: Any,
        cache: Any,
        direction: str,
        relations: list[str],
        layers: int,
        batch_size: int,
        max_fanout: int,
        budget: tuple[int, int, int] = (0, 0, 0),
        fallback: SampledEval | None = None,
    ) -> None:
        """``budget``: (bytes, input width, hidden width); a set whose :func:`plan_bytes` passes the bytes is
        evaluated by ``fallback`` (0 bytes: no bound)."""
        out_deg, in_deg = source.info.degrees()
        self.deg = np.asarray(in_deg if direction == "in" else out_deg)
        self.budget, self.fallback, self._top = budget, fallback, np.empty(0, np.int64)
        self.over_budget = ""  # why a set was evaluated on sampled trees (the last one that was)
        self.direction, self.relations, self.max_fanout = direction, relations, max_fanout
        self._samplers: dict[int, KHopSampler] = {}
        self.source, self.cache, self.layers, self.typed = source, cache, layers, bool(relations)
        self.batch = max(1, batch_size)
        self._capped = np.empty(0, np.int64)  # vertices with more neighbours than one Gather returns (given the cap)
        self._plans: dict[bytes, _Plan] = {}

    @property
    def capped(self) -> int:
        """How many evaluated vertices had more neighbours than serve.max_fanout, and got that many."""
        return len(self._capped)

    def drop_plans(self) -> None:
        """Free the kept plans (the validation set's, after the last epoch): a plan holds its sets' L-hop
        neighbourhood, at R-MAT 22 most of the graph, so keeping it through the test doubles the peak."""
        self._plans.clear()

    def _sampler(self, fanout: int) -> KHopSampler:
        """The one-hop sampler asking ``fanout`` neighbours per vertex (per relation on a typed graph)."""
        if fanout not in self._samplers:
            fan: Any = [(t, fanout) for t in self.relations] if self.relations else fanout
            self._samplers[fanout] = KHopSampler(
                self.source.backend, [fan], direction=self.direction, features=False, labels=False
            )
        return self._samplers[fanout]

    def embed(self, ctx: Any, ids: np.ndarray, times: LoaderTimes, keep: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """Outputs of this process's share of ``ids`` (contiguous shares: every process computes its own).
        ``keep``: reuse the set's plan in later evaluations (validation and test sets), not for one-off sets."""
        shares = np.array_split(np.asarray(ids, np.int64), ctx.dist.world)
        share = np.unique(shares[ctx.dist.rank])
        key = share.tobytes()
        plan = self._plans.get(key)
        if plan is None and self._over_budget(shares):
            assert self.fallback is not None
            return self.fallback.embed(ctx, ids, times, keep)
        if plan is None:
            plan = self.source.submit(self._build(share)).result()
            if keep:
                self._plans[key] = plan
        return share, self._forward(ctx, plan)

    @property
    def mode(self) -> str:
        return "sampled" if self.over_budget else "full"

    def _over_budget(self, shares: list[np.ndarray]) -> bool:
        """Whether some process's share could pass the budget (then every process evaluates this set on
        sampled trees: the same answer on each, since each sees every share)."""
        limit, in_dim, hidden = self.budget
        if not limit or self.fallback is None:
            return False
        capped = np.minimum(self.deg, self.max_fanout)
        if not len(self._top):
            self._top = top_degrees(capped)
        need = max(plan_bytes(capped, np.unique(s), self.layers, in_dim, hidden, self._top) for s in shares)
        if need <= limit:
            return False
        self.over_budget = (
            f"a full evaluation of {max(len(s) for s in shares):,} vertices could hold {need / 2**20:,.0f} MB, "
            f"above train.eval_memory_mb = {limit >> 20}"
        )
        return True

    async def _build(self, ids: np.ndarray) -> _Plan:
        sets: list[np.ndarray] = [np.empty(0, np.int64)] * self.layers + [ids]
        hops: list[list[Any]] = [[] for _ in range(self.layers)]
        budget = BLOCK_EDGES // max(1, len(self.relations))
        for k in range(self.layers, 0, -1):
            self._capped = np.union1d(self._capped, sets[k][self.deg[sets[k]] > self.max_fanout])
            for pos, fanout in degree_batches(self.deg[sets[k]], self.batch, budget, self.max_fanout):
                hops[k - 1].append((await self._sampler(fanout).sample(sets[k][pos], 0)).blocks[0])
            sets[k - 1] = np.unique(np.concatenate([sets[k], *(b.src_ids.numpy() for b in hops[k - 1])]))
        blocks = [
            [
                _Block(
                    torch.from_numpy(np.searchsorted(sets[i], b.src_ids.numpy())),
                    torch.from_numpy(np.searchsorted(sets[i + 1], b.dst_ids.numpy())),
                    b.edge_index,
                    b.num_dst,
                    b.edge_type if self.typed else None,
                )
                for b in hops[i]
            ]
            for i in range(self.layers)
        ]
        x = torch.empty((len(sets[0]), self.cache.dim), dtype=torch.float32)
        for a in range(0, len(sets[0]), FEATURE_CHUNK):
            plan = await self.cache.plan(sets[0][a : a + FEATURE_CHUNK])
            x[a : a + FEATURE_CHUNK] = self.cache.assemble(plan, torch.device("cpu"))
        return _Plan(sets, blocks, x)

    @torch.no_grad()
    def _forward(self, ctx: Any, plan: _Plan) -> np.ndarray:
        model, dev = ctx.model, ctx.device
        model.eval()
        h = plan.x
        if ctx.embeddings is not None:  # they change every step: fetched for each evaluation
            rows = [
                ctx.embeddings.submit(ctx.embeddings.rows(plan.sets[0][a : a + FEATURE_CHUNK])).result()
                for a in range(0, len(plan.sets[0]), FEATURE_CHUNK)
            ]
            emb = torch.from_numpy(np.concatenate(rows)) if rows else torch.empty((0, ctx.embeddings.dim))
            h = torch.cat([h, emb], dim=1) if h.shape[1] else emb
        for i in range(self.layers):
            out: torch.Tensor | None = None
            for b in plan.blocks[i]:
                et = b.edge_type.to(dev) if b.edge_type is not None else None
                o = model.layer(i, h[b.src_pos].to(dev), b.edge_index.to(dev), b.num_dst, et)
                if out is None:
                    out = torch.empty((len(plan.sets[i + 1]), o.shape[1]), dtype=torch.float32)
                out[b.dst_pos] = o.float().cpu()
            if out is None:  # nothing to evaluate on this process
                return np.empty((0, 0), np.float32)
            h = out
        return h.numpy()
