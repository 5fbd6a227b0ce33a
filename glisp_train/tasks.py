"""The two training tasks: node classification and link prediction, on the same loader and model.

A task says what one epoch's batches are, the summed loss of a batch, and how to evaluate. Losses are
sums over the batch's examples (the trainer divides by the global count after the all-reduce), and
every evaluation ends with the same numbers on every process, so that early stopping agrees.

- **node**: seeds are the training vertices (the dataset's split, or a seeded random one); cross-entropy.
- **link**: positives are training edges drawn uniformly (a source with probability proportional to its
  out-degree in the served training graph, then one of its out-edges uniformly: each edge with
  probability 1/|E|), negatives are (source, uniform vertex) pairs, the vertex drawn among those of the
  positive destination's type on a typed graph (items for a user, never other users); binary cross-entropy
  on dot-product scores, or BPR (``train.link_loss = "bpr"``: each positive scored above its negatives). Evaluation ranks every held-out edge against ``eval_negatives`` uniform negatives
  (of its destination's type) of its source (MRR) and takes the AUC over all of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from glisp_core.metrics import mrr_auc, roc_auc
from glisp_core.models import link_scores
from glisp_sampling.khop import HopRequest
from glisp_train.dist import Dist, all_gather, all_sum, rank_batches
from glisp_train.loader import Batch, Loader, LoaderTimes

EVAL_SEED = 7919  # validation and test sample the same neighbourhoods every epoch


def run_model(model: nn.Module, batch: Batch, x: torch.Tensor, device: torch.device, typed: bool) -> torch.Tensor:
    """The model's output rows for the batch's seeds (blocks moved to ``device``)."""
    assert batch.sampled is not None
    blocks = [SimpleNamespace(edge_index=b.edge_index.to(device), num_dst=b.num_dst) for b in batch.sampled.blocks]
    etypes = None
    if typed:
        etypes = []
        for b in batch.sampled.blocks:
            assert b.edge_type is not None  # typed sampling gives every block its edge types
            etypes.append(b.edge_type.to(device))
    return model(x, blocks, etypes)


@dataclass
class Ctx:
    """What every task needs from the trainer."""

    model: nn.Module
    cache: Any
    device: torch.device
    typed: bool
    dist: Dist
    batch_size: int
    eval_batch_size: int
    max_batches: int
    seed: int
    embeddings: Any = None  # glisp_train.node_embeddings.NodeEmbeddings: learnable rows beside the features


@torch.no_grad()
def embed(ctx: Ctx, loader: Loader, ids: np.ndarray, times: LoaderTimes) -> tuple[np.ndarray, np.ndarray]:
    """Model outputs of this process's share of ``ids``: (share ids, rows)."""
    ctx.model.eval()
    got_ids, rows = [], []
    for b in loader.batches(rank_batches(ids, ctx.dist, ctx.eval_batch_size), ctx.seed + EVAL_SEED, times):
        if b.empty:
            continue
        out = run_model(ctx.model, b, b.features(ctx.cache, ctx.device), ctx.device, ctx.typed)
        got_ids.append(b.seeds)
        rows.append(out.float().cpu().numpy())
    if not rows:
        return np.empty(0, np.int64), np.empty((0, 0), np.float32)
    return np.concatenate(got_ids), np.concatenate(rows)


# ---------------------------------------------------------------------------------------------- node
@dataclass
class NodeTask:
    labels: np.ndarray  # per vertex, -1 = none
    train_ids: np.ndarray
    val_ids: np.ndarray
    test_ids: np.ndarray
    num_classes: int
    name: str = "node"
    metric: str = "acc"

    def expand(self) -> None:
        return None

    def epoch_items(self, ctx: Ctx, epoch: int) -> list[np.ndarray]:
        order = np.random.default_rng([ctx.seed, epoch]).permutation(self.train_ids)
        return rank_batches(order, ctx.dist, ctx.batch_size, ctx.max_batches)

    def loss(self, ctx: Ctx, b: Batch) -> tuple[torch.Tensor, int, dict[str, float]]:
        out = run_model(ctx.model, b, b.features(ctx.cache, ctx.device), ctx.device, ctx.typed)
        y = torch.from_numpy(self.labels[b.seeds]).to(ctx.device)
        loss = F.cross_entropy(out, y, reduction="sum")
        correct = float((out.argmax(1) == y).sum())
        return loss, len(b.seeds), {"correct": correct}

    def evaluate(self, ctx: Ctx, evaluator: Any, which: str, times: LoaderTimes) -> dict[str, Any]:
        """Accuracy (and ROC-AUC of a binary task, where accuracy alone says little on imbalanced labels) of the
        outputs ``evaluator`` gives (glisp_train.full_eval: full neighbourhoods or sampled trees)."""
        ids = self.val_ids if which == "val" else self.test_ids
        got, out = evaluator.embed(ctx, ids, times)
        pred = out.argmax(1) if len(out) else np.empty(0, np.int64)
        correct, total = all_sum([float((pred == self.labels[got]).sum()), float(len(got))], ctx.dist)
        res: dict[str, Any] = {"acc": correct / total if total else 0.0}
        binary = self.num_classes == 2
        if which == "test" or binary:
            margin = out[:, 1] - out[:, 0] if binary and len(out) else np.empty(0, np.float32)
            prob = top_probability(out)
            parts = all_gather((got, pred, margin, prob), ctx.dist)
            got, pred, margin, prob = (np.concatenate([p[i] for p in parts]) for i in range(4))
            if binary:
                y = self.labels[got]
                res["auc"] = roc_auc(margin[y == 1], margin[y == 0])
            if which == "test":
                res["predictions"] = (got, pred, prob)
        return res


def top_probability(out: np.ndarray) -> np.ndarray:
    """The softmax probability of each row's arg-max class: the ``score`` column of predictions, as inference
    writes it."""
    if not len(out):
        return np.empty(0, np.float32)
    z = np.exp(out - out.max(axis=1, keepdims=True))
    return (z.max(axis=1) / z.sum(axis=1)).astype(np.float32)


def node_split(labels: np.ndarray, split: np.ndarray, shares: list[float], seed: int) -> tuple[dict, str]:
    """Train/val/test vertex ids: the dataset's split when it has one, else a seeded random one.

    A dataset split counts when any labelled vertex has a split code; labelled vertices without one are
    then used in no set. The random split shuffles the labelled vertices and cuts them by ``shares``.
    """
    labelled = np.flatnonzero(labels >= 0)
    if len(labelled) == 0:
        from glisp_core.errors import GlispError

        raise GlispError("node classification: the dataset has no labelled vertices (ingest a label column)")
    if (split[labelled] >= 0).any():
        sets = {k: labelled[split[labelled] == code] for k, code in (("train", 0), ("val", 1), ("test", 2))}
        return sets, "dataset"
    from glisp_core.errors import ConfigError

    if len(shares) != 3 or min(shares) < 0 or sum(shares) <= 0 or sum(shares) > 1 + 1e-9:
        raise ConfigError("train", "split", f"expected three non-negative shares summing to at most 1 (got {shares})")
    perm = np.random.default_rng(seed).permutation(labelled)
    cut = np.round(np.cumsum(shares) * len(labelled)).astype(np.int64)
    sets = {
        "train": np.sort(perm[: cut[0]]),
        "val": np.sort(perm[cut[0] : cut[1]]),
        "test": np.sort(perm[cut[1] : cut[2]]),
    }
    return sets, "random"


# ---------------------------------------------------------------------------------------------- link
@dataclass
class LinkTask:
    backend: Any
    out_degree: np.ndarray  # of the served (training) graph
    num_train_edges: int
    heldout: dict[str, np.ndarray]
    num_vertices: int
    negatives: int
    eval_negatives: int
    vtype: np.ndarray | None = None  # vertex type code per vertex of a typed graph: negatives keep the type
    loss_kind: str = "bce"  # or "bpr": -log sigmoid(positive - negative), averaged over each positive's negatives
    submit: Any = None  # runs a coroutine of ``backend`` (the source's): the test ranking's Gathers
    epoch_edges: int = 0  # positives per epoch: the training interactions (pairs on an undirected graph); 0 = edges
    rank_from: int = -1  # vertex type code of the test ranking's queries; -1: glisp_train.rank_test decides
    undirected: bool = False  # every edge is stored both ways (a held-out pair is two held-out edges)
    type_names: tuple[str, ...] = ()  # vertex type names by code (the test ranking's record names its side)
    name: str = "link"
    metric: str = "mrr"
    _eval_negs: dict[str, np.ndarray] = field(default_factory=dict)

    def __post_init__(self) -> None:
        deg = np.asarray(self.out_degree, np.float64)
        self._cdf = np.cumsum(deg) / deg.sum() if deg.sum() else np.zeros(len(deg))
        self.typed = self.vtype is not None and len(np.unique(self.vtype)) > 1
        if self.typed:
            vt = np.asarray(self.vtype, np.int64)
            self._members = np.argsort(vt, kind="stable")  # vertices grouped by type
            self._count = np.bincount(vt)
            self._start = np.concatenate([[0], np.cumsum(self._count)[:-1]])

    def draw(self, u: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """Negative destinations from uniforms ``u`` (rows: edges): any vertex on an untyped graph, a vertex of
        the type of each row's ``dst`` on a typed one."""
        if not self.typed:
            return np.minimum((u * self.num_vertices).astype(np.int64), self.num_vertices - 1)
        t = np.asarray(self.vtype)[dst]
        k = self._count[t][:, None]
        idx = self._start[t][:, None] + np.minimum((u * k).astype(np.int64), k - 1)
        return np.asarray(self._members[idx], np.int64)

    def epoch_items(self, ctx: Ctx, epoch: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """(sources, negative destinations) per step; every process takes the same number of steps, together one
        pass over the training interactions (an undirected edge, stored both ways, is one)."""
        steps = max(1, -(-(self.epoch_edges or self.num_train_edges) // (ctx.batch_size * ctx.dist.world)))
        if ctx.max_batches > 0:
            steps = min(steps, ctx.max_batches)
        rng = np.random.default_rng([ctx.seed, epoch, ctx.dist.rank])
        items = []
        for _ in range(steps):
            src = np.minimum(np.searchsorted(self._cdf, rng.random(ctx.batch_size), side="right"), len(self._cdf) - 1)
            shape = (ctx.batch_size, self.negatives)
            # typed: uniforms, as the destination (hence the negatives' type) is known only after the Gather
            neg: np.ndarray = rng.random(shape) if self.typed else rng.integers(0, self.num_vertices, shape)
            items.append((src.astype(np.int64), neg))
        return items

    def expand(self):
        backend, task = self.backend, self

        async def pairs(item: tuple[np.ndarray, np.ndarray], seed: int) -> tuple[np.ndarray, Any]:
            src, neg = item
            # exactly one out-edge per source, uniformly (the quota method is exact only in expectation)
            hop = await backend.gather(src, HopRequest(fanout=1, method="uniform_exact", direction="out", seed=seed))
            ok = hop.per_vertex > 0  # every drawn source has an out-edge; guard anyway
            src, dst, neg = src[ok], hop.nbrs, neg[ok]
            neg = task.draw(neg, dst) if task.typed else neg.astype(np.int64)
            seeds, inv = np.unique(np.concatenate([src, dst, neg.ravel()]), return_inverse=True)
            k = len(src)
            return seeds, (inv[:k], inv[k : 2 * k], inv[2 * k :].reshape(k, -1))

        return pairs

    def loss(self, ctx: Ctx, b: Batch) -> tuple[torch.Tensor, int, dict[str, float]]:
        h = run_model(ctx.model, b, b.features(ctx.cache, ctx.device), ctx.device, ctx.typed)
        s, d, n = (torch.from_numpy(a).to(ctx.device) for a in b.extra)
        hs = h.index_select(0, s)  # index_select: its backward is index_add, not advanced indexing's index_put
        pos = link_scores(hs, h.index_select(0, d))
        neg = link_scores(
            hs.unsqueeze(1).expand(-1, n.shape[1], -1), h.index_select(0, n.reshape(-1)).view(*n.shape, -1)
        )
        if self.loss_kind == "bpr":
            return F.softplus(neg - pos.unsqueeze(1)).mean(dim=1).sum(), len(s), {}
        loss = F.binary_cross_entropy_with_logits(pos, torch.ones_like(pos), reduction="sum")
        loss = loss + F.binary_cross_entropy_with_logits(neg, torch.zeros_like(neg), reduction="sum") / n.shape[1]
        return loss, len(s), {}

    def eval_negatives_of(self, which: str, seed: int) -> np.ndarray:
        """Uniform negative destinations per held-out edge (of its destination's type on a typed graph), fixed
        for the run (the same every epoch)."""
        if which not in self._eval_negs:
            m = self.heldout["split"] == (1 if which == "val" else 2)
            rng = np.random.default_rng([seed, 1 if which == "val" else 2])
            shape = (int(m.sum()), self.eval_negatives)
            if self.typed:
                self._eval_negs[which] = self.draw(rng.random(shape), self.heldout["dst"][m])
            else:
                self._eval_negs[which] = rng.integers(0, self.num_vertices, shape)
        return self._eval_negs[which]

    def evaluate(self, ctx: Ctx, evaluator: Any, which: str, times: LoaderTimes) -> dict[str, Any]:
        m = self.heldout["split"] == (1 if which == "val" else 2)
        src, dst = self.heldout["src"][m], self.heldout["dst"][m]
        neg = self.eval_negatives_of(which, ctx.seed)
        need = np.unique(np.concatenate([src, dst, neg.ravel()]))
        got, rows = evaluator.embed(ctx, need, times)
        parts = all_gather((got, rows), ctx.dist)
        ids = np.concatenate([p[0] for p in parts])
        emb = np.concatenate([p[1] for p in parts if len(p[1])])
        order = np.argsort(ids)
        ids, emb = ids[order], emb[order]
        hs, hd = emb[np.searchsorted(ids, src)], emb[np.searchsorted(ids, dst)]
        hn = emb[np.searchsorted(ids, neg)]
        pos_s = (hs * hd).sum(-1)
        neg_s = (hs[:, None, :] * hn).sum(-1)
        res: dict[str, Any] = mrr_auc(pos_s, neg_s)
        if which == "test":
            res["predictions"] = (src, dst, pos_s)
            if self.submit is not None:
                from glisp_train.rank_test import rank_test_edges

                res.update(rank_test_edges(ctx, evaluator, self, times))
        return res
