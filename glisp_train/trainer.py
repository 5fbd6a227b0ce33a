"""The training loop: epochs of prefetched batches, gradient all-reduce, validation, early stopping, test.

One code path for CPU and CUDA (``glisp_core.models.default_device``), for one process and for a torchrun
group (:mod:`glisp_train.dist`), and for both sources (a cluster, or one partition in process). Every
epoch records its loss and validation score, the time the trainer waited for data and computed, the
sampled edges, and the feature cache's hit ratio and bytes fetched; the checkpoint keeps the weights of
the epoch with the best validation score.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from glisp_core.config import Config, TrainConfig
from glisp_core.errors import ConfigError, GlispError
from glisp_core.models import ARCHS, ModelSpec, build_model, follows_slice_protocol, is_factory, typed_relations
from glisp_core.sparse_embedding import TableSpec
from glisp_sampling.khop import Fanout
from glisp_train.cache import CacheCounters, FeatureCache, hot_degree
from glisp_train.dist import Dist, all_sum, broadcast_params, reduce_gradients
from glisp_train.full_eval import FullEval, SampledEval
from glisp_train.loader import Loader, LoaderTimes
from glisp_train.node_embeddings import NodeEmbeddings, table_name
from glisp_train.progress import Progress
from glisp_train.source import GraphSource
from glisp_train.tasks import Ctx, LinkTask, NodeTask, node_split


@dataclass
class TrainResult:
    model: Any
    task: Any
    epochs: list[dict[str, Any]]
    best_epoch: int
    val: dict[str, Any]
    test: dict[str, Any]
    stopped_early: bool
    split_source: str = ""
    counts: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    cache_rows: int = 0
    cache_bytes: int = 0
    evaluation: dict[str, Any] = field(default_factory=dict)  # what val and test were measured on (evaluation_of)
    embeddings: NodeEmbeddings | None = None  # the learnable rows (their best-epoch snapshot), still on the holder


def hop_fanouts(
    tc: TrainConfig, edge_types: list[str], evaluation: bool = False, typed: bool | None = None
) -> list[Fanout]:
    """Per-hop fanouts (the seeds' hop first); per edge type for rgcn or when type_fanouts is set.

    R-GCN's relation id is the slot of the per-type fanout, so it samples every edge type of the dataset
    in schema order (a type not named in ``type_fanouts`` gets fanout 0).
    """
    base = list(tc.eval_fanouts) if evaluation and tc.eval_fanouts else list(tc.fanouts)
    if len(base) != tc.layers:
        key = "eval_fanouts" if evaluation and tc.eval_fanouts else "fanouts"
        raise ConfigError("train", key, f"expected one fanout per layer ({tc.layers} layers; got {base})")
    if tc.type_fanouts:
        if len(tc.type_fanouts) != tc.layers:
            raise ConfigError(
                "train", "type_fanouts", f"expected one table per layer ({tc.layers}; got {tc.type_fanouts})"
            )
        unknown = sorted({t for hop in tc.type_fanouts for t in hop} - set(edge_types))
        if unknown:
            raise ConfigError("train", "type_fanouts", f"unknown edge types {unknown} (the dataset has {edge_types})")
        if not evaluation or not tc.eval_fanouts:
            return [[(t, int(hop.get(t, 0))) for t in edge_types] for hop in tc.type_fanouts]
    if tc.model == "rgcn" if typed is None else typed:
        return [[(t, int(f)) for t in edge_types] for f in base]
    return [int(f) for f in base]


def model_spec(tc: TrainConfig, source: GraphSource, out_dim: int) -> ModelSpec:
    d = source.feature_dim + max(0, tc.node_embeddings)  # features, then the learnable rows
    if d <= 0:
        raise GlispError(
            f"{source.description}: the dataset has no vertex features (schema feature_dim = 0); learn a row per "
            "vertex instead with train.node_embeddings = DIM (--node-embeddings DIM)"
        )
    if tc.model == "lightgcn" and tc.task == "link":
        out_dim = d  # LightGCN has no weights: its output is as wide as its input
    custom = is_factory(tc.model)
    if not custom and tc.model not in ARCHS:
        raise ConfigError("train", "model", f"expected one of {ARCHS} or 'package.module:factory' (got {tc.model!r})")
    rel = tuple(source.edge_types) if tc.model == "rgcn" or custom else ()
    return ModelSpec(
        arch="custom" if custom else tc.model,  # type: ignore[arg-type]  # checked above
        factory=tc.model if custom else "",
        in_dim=d,
        hidden=tc.hidden,
        out_dim=out_dim,
        layers=tc.layers,
        task=tc.task,
        dropout=tc.dropout,
        heads=tc.heads,
        relations=rel,
    )


def make_task(tc: TrainConfig, source: GraphSource) -> tuple[Any, str, dict[str, Any]]:
    """The task, where its split came from, and its counts."""
    out_deg, _ = source.info.degrees()
    if tc.task == "node":
        labels, split = source.labels_and_split()
        sets, how = node_split(labels, split, list(tc.split), tc.seed)
        num_classes = int(source.schema.get("num_classes") or (labels.max() + 1))
        task: NodeTask | LinkTask = NodeTask(labels, sets["train"], sets["val"], sets["test"], num_classes)
        return task, how, {f"{k}_vertices": len(v) for k, v in sets.items()}
    held = source.heldout()
    m = int(out_deg.sum())
    typed = len(source.schema.get("vertex_types") or []) > 1
    vtype = source.info.vertex_types() if typed else None  # negatives of the destination's type
    undirected = source.schema.get("directed") is False
    if tc.link_loss not in ("bce", "bpr"):
        raise ConfigError("train", "link_loss", f"expected 'bce' or 'bpr' (got {tc.link_loss!r})")
    task = LinkTask(
        source.backend,
        out_deg,
        m,
        held,
        source.num_vertices,
        tc.negatives,
        tc.eval_negatives,
        vtype,
        tc.link_loss,
        source.submit,
        m // 2 if undirected else m,
        _type_code(source, tc.rank_from),
        undirected,
        tuple(source.schema.get("vertex_types") or ()),
    )
    counts = {
        "train_edges": m,
        "val_edges": int((held["split"] == 1).sum()),
        "test_edges": int((held["split"] == 2).sum()),
    }
    return task, "link-split", counts


def _type_code(source: GraphSource, name: str) -> int:
    """The code of vertex type ``name`` (-1 for ""); ConfigError naming the types when it is not one."""
    if not name:
        return -1
    types = list(source.schema.get("vertex_types") or [])
    if name not in types:
        raise ConfigError("train", "rank_from", f"{name!r} is not a vertex type of the graph (types: {types})")
    return types.index(name)


@dataclass
class Session:
    """Everything one training run holds: the task, the model and optimiser, the cache and the loaders."""

    task: Any
    model: Any  # a GNN, or what a user's factory built
    opt: torch.optim.Optimizer | None  # None: a model without weights (LightGCN learns only node embeddings)
    cache: FeatureCache
    train_loader: Loader
    evaluator: FullEval | SampledEval
    ctx: Ctx
    split_source: str
    counts: dict[str, Any]
    timings: dict[str, float]


def setup(cfg: Config, source: GraphSource, d: Dist) -> Session:
    """Task, model (same initial weights on every process), optimiser, feature cache and loaders."""
    tc = cfg.train
    if tc.batch_size <= 0 or tc.epochs <= 0:
        raise ConfigError("train", "batch_size" if tc.batch_size <= 0 else "epochs", "must be positive")
    if tc.threads:
        torch.set_num_threads(tc.threads)
    torch.manual_seed(tc.seed)
    t0 = time.perf_counter()
    task, split_source, counts = make_task(tc, source)
    spec = model_spec(tc, source, task.num_classes if tc.task == "node" else tc.hidden)
    model = build_model(spec).to(d.device)
    typed = bool(typed_relations(model))
    broadcast_params(model, d)
    params = list(model.parameters())
    opt = torch.optim.Adam(params, lr=tc.lr, weight_decay=tc.weight_decay) if params else None
    out_deg, in_deg = source.info.degrees()
    cache_dev = d.device if tc.cache_device == "auto" else torch.device("cpu")
    t = time.perf_counter()
    cache = source.submit(
        FeatureCache.build(
            source.backend,
            hot_degree(out_deg, in_deg, tc.direction),
            tc.feature_cache_mb << 20,
            source.feature_dim,
            cache_dev,
        )
    ).result()
    cache_fill_s = time.perf_counter() - t
    fan = hop_fanouts(tc, source.edge_types, typed=typed)
    emb = open_node_embeddings(tc, source, d)  # opened last: a failure from here on releases it
    try:
        train_loader = Loader(source, fan, cache, tc.prefetch, tc.direction, task.expand(), emb)
        evaluator = make_evaluator(tc, source, cache, model, typed, emb, cfg.serve.max_fanout)
    except BaseException:
        if emb is not None and d.is_main:
            _release_after_failure(emb, Progress(enabled=False))
        raise
    ctx = Ctx(
        model,
        cache,
        d.device,
        typed,
        d,
        tc.batch_size,
        tc.eval_batch_size or tc.batch_size,
        tc.max_batches,
        tc.seed,
        emb,
    )
    timings = {"setup_s": round(time.perf_counter() - t0, 3), "cache_fill_s": round(cache_fill_s, 3)}
    return Session(task, model, opt, cache, train_loader, evaluator, ctx, split_source, counts, timings)


def open_node_embeddings(tc: TrainConfig, source: GraphSource, d: Dist) -> NodeEmbeddings | None:
    """The run's learnable node embedding table on the source's holder (None when train.node_embeddings = 0).
    With ``train.prefetch = 0`` every update is applied before the next batch is fetched (exact, slower)."""
    if tc.node_embeddings <= 0:
        return None
    if tc.embedding_lr <= 0:
        raise ConfigError("train", "embedding_lr", f"must be positive (got {tc.embedding_lr})")
    spec = TableSpec(table_name(tc.name or f"{tc.task}-{tc.model}", d), tc.node_embeddings, tc.seed, tc.embedding_lr)
    return NodeEmbeddings.open(source.embeddings, spec, source.submit, sync=tc.prefetch == 0)


def make_evaluator(
    tc: TrainConfig,
    source: GraphSource,
    cache: FeatureCache,
    model: Any,
    typed: bool,
    emb: NodeEmbeddings | None,
    max_fanout: int,
) -> FullEval | SampledEval:
    """Validation and test at full neighbourhoods (``train.evaluation = "full"``) or on sampled trees; a model
    without the slice protocol is evaluated on sampled trees, and the evaluation record says why."""
    fan = hop_fanouts(tc, source.edge_types, True, typed)
    sampled = SampledEval(Loader(source, fan, cache, tc.prefetch, tc.direction, embeddings=emb), fan)
    if tc.evaluation == "full" and follows_slice_protocol(model):
        rel = list(source.edge_types) if typed else []
        batch = tc.eval_batch_size or tc.batch_size
        budget = (tc.eval_memory_mb << 20, cache.dim + (emb.dim if emb is not None else 0), tc.hidden)
        return FullEval(source, cache, tc.direction, rel, tc.layers, batch, max_fanout, budget, sampled)
    if tc.evaluation != "sampled":
        sampled.why = "the model has no slice protocol (num_layers, layer(i, ...))"
    return sampled


def evaluation_of(evaluator: FullEval | SampledEval) -> dict[str, Any]:
    """What a reported validation or test score was measured on: ``{"mode": "full"}`` or the sampled fanouts."""
    if isinstance(evaluator, FullEval) and evaluator.fallback is not None and evaluator.over_budget:
        return {"mode": "sampled", "fanouts": evaluator.fallback.fanouts, "why": evaluator.over_budget}
    if isinstance(evaluator, FullEval):
        if evaluator.capped:  # hubs above serve.max_fanout: that many of their neighbours, not all
            return {"mode": "full", "capped_at": evaluator.max_fanout, "capped_vertices": evaluator.capped}
        return {"mode": "full"}
    return {"mode": "sampled", "fanouts": evaluator.fanouts, **({"why": evaluator.why} if evaluator.why else {})}


def describe_evaluation(evaluation: dict[str, Any]) -> str:
    """``evaluation_of``'s record in words, for the lines that report a score."""
    if evaluation.get("mode") == "sampled":
        why = f": {evaluation['why']}" if evaluation.get("why") else ""
        return f"sampled neighbourhoods, fanouts {evaluation.get('fanouts')}{why}"
    if evaluation.get("capped_vertices"):
        return (
            f"full neighbourhoods, but {evaluation['capped_vertices']:,} vertices with more than serve.max_fanout "
            f"{evaluation['capped_at']:,} neighbours had that many"
        )
    return "full neighbourhoods"


def train(cfg: Config, source: GraphSource, d: Dist, progress: Progress | None = None) -> TrainResult:
    """Train ``cfg.train`` on ``source``; every process of the group calls this."""
    progress = progress or Progress(enabled=False)
    s = setup(cfg, source, d)
    try:
        return _fit(cfg, s, progress)
    except BaseException:
        if s.ctx.embeddings is not None and d.is_main:
            _release_after_failure(s.ctx.embeddings, progress)
        raise


def _release_after_failure(emb: NodeEmbeddings, progress: Progress) -> None:
    """A run that fails frees its table on the holder (a table's name is unique to its run: nothing would ever
    release it, and it would hold serve.embedding_mb until the servers restart). Best effort: the failure that
    got here is what the caller must see."""
    try:
        emb.release(failed=True)
    except Exception as e:  # the holder may be what failed
        progress.log(f"glisp train: could not release node embedding table {emb.spec.name!r}: {e}")


def _fit(cfg: Config, s: Session, progress: Progress) -> TrainResult:
    """The epochs, the best epoch's weights (and rows), and the test."""
    task, model = s.task, s.model
    if isinstance(s.evaluator, SampledEval) and s.evaluator.why:
        progress.log(f"glisp train: validation and test on sampled neighbourhoods: {s.evaluator.why}")
    epochs: list[dict[str, Any]] = []
    best, best_state, best_epoch, bad, stopped = -np.inf, None, 0, 0, False
    for epoch in range(1, cfg.train.epochs + 1):
        rec = run_epoch(s.ctx, task, s.train_loader, s.opt, epoch, progress)
        t = time.perf_counter()
        val = task.evaluate(s.ctx, s.evaluator, "val", LoaderTimes())
        rec.update({f"val_{k}": round(float(v), 6) for k, v in val.items() if k != "predictions"})
        rec["eval_s"] = round(time.perf_counter() - t, 3)
        rec["evaluation"] = s.evaluator.mode
        if epoch == 1 and isinstance(s.evaluator, FullEval) and s.evaluator.over_budget:
            progress.log(f"glisp train: validation on sampled neighbourhoods: {s.evaluator.over_budget}")
        epochs.append(rec)
        progress.epoch_done(rec, task.metric)
        if val[task.metric] > best:
            best, best_epoch, bad = val[task.metric], epoch, 0
            best_state = copy.deepcopy({k: v.detach().cpu() for k, v in model.state_dict().items()})
            if s.ctx.embeddings is not None:
                s.ctx.embeddings.snapshot()  # the rows that go with these weights
        else:
            bad += 1
            if cfg.train.patience and bad >= cfg.train.patience:
                stopped = True
                break
    assert best_state is not None
    model.load_state_dict(best_state)
    if s.ctx.embeddings is not None:
        s.ctx.embeddings.use_snapshot = True  # test and the checkpoint: the best epoch's rows
    s.evaluator.drop_plans()  # the epochs' validation plans are not used again
    t = time.perf_counter()
    test = task.evaluate(s.ctx, s.evaluator, "test", LoaderTimes())
    val_best = {k: v for k, v in epochs[best_epoch - 1].items() if k.startswith("val_")}
    timings = {
        **s.timings,
        "epochs_s": round(sum(e["epoch_s"] + e["eval_s"] for e in epochs), 3),
        "test_s": round(time.perf_counter() - t, 3),
    }
    return TrainResult(
        model,
        task,
        epochs,
        best_epoch,
        val_best,
        test,
        stopped,
        s.split_source,
        s.counts,
        timings,
        len(s.cache.ids),
        s.cache.nbytes,
        evaluation_of(s.evaluator),
        s.ctx.embeddings,
    )


def run_epoch(ctx: Ctx, task: Any, loader: Loader, opt: torch.optim.Optimizer | None, epoch: int, progress: Progress):
    """One pass over this process's batches; returns the epoch's record (summed over processes)."""
    ctx.model.train()
    items = task.epoch_items(ctx, epoch)
    times = LoaderTimes()
    c0 = copy.copy(ctx.cache.counters)
    loss_sum = seen = correct = 0.0
    progress.epoch_start(epoch, len(items))
    for b in loader.batches(items, ctx.seed * 7_368_787 + epoch, times):
        if opt is not None:
            opt.zero_grad(set_to_none=True)
        n = 0
        if not b.empty:
            loss, n, st = task.loss(ctx, b)
            loss.backward()
            loss_sum += float(loss.detach())
            correct += st.get("correct", 0.0)
        total = reduce_gradients(ctx.model, n, ctx.dist)
        if total and ctx.embeddings is not None and b.emb_leaf is not None and b.emb_leaf.grad is not None:
            assert b.sampled is not None
            ctx.embeddings.push(b.sampled.input_ids.numpy(), b.emb_leaf.grad / total)
        if total and opt is not None:
            opt.step()
        seen += n
        progress.step(loss_sum / seen if seen else 0.0)
    c = ctx.cache.counters.minus(c0)
    s = all_sum(
        [
            loss_sum,
            seen,
            correct,
            times.wait_s,
            times.compute_s,
            times.total_s,
            times.sampled_edges,
            times.input_rows,
            c.rows,
            c.hits,
            c.bytes_fetched,
            times.batches,
        ],
        ctx.dist,
    )
    w = ctx.dist.world
    wait, compute = s[3] / w, s[4] / w
    rec: dict[str, Any] = {"epoch": epoch, "loss": round(s[0] / s[1], 6) if s[1] else 0.0}
    if task.name == "node":
        rec["train_acc"] = round(s[2] / s[1], 6) if s[1] else 0.0
    rec.update(
        {
            "epoch_s": round(s[5] / w, 3),
            "wait_s": round(wait, 3),
            "compute_s": round(compute, 3),
            "wait_share": round(wait / (wait + compute), 4) if wait + compute else 0.0,
            "batches": int(s[11]),
            "examples": int(s[1]),
            "sampled_edges": int(s[6]),
            "input_rows": int(s[7]),
            "cache_hit_ratio": round(CacheCounters(int(s[8]), int(s[9]), 0).hit_ratio, 4),
            "feature_bytes_fetched": int(s[10]),
        }
    )
    return rec
