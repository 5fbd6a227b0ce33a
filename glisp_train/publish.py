"""A training run's outputs: the checkpoint, the split it used and its test predictions, in original ids.

Published as stage ``train/<name>`` of the dataset version (atomic, like every stage) with the model
config and the partition run's fingerprint in ``model.json`` (what ``glisp infer`` rebuilds the model
from) and the per-epoch metrics in the manifest (what ``glisp report`` draws the curve from). A trainer
that cannot read the dataset directory writes the same files to ``--output DIR`` instead, with the
manifest record beside them as ``run.json``.

Files: ``model.json`` + ``weights.pt`` (glisp_core.models), ``split.parquet`` (node: vid, orig_id, split
code 0/1/2 of every vertex used), ``predictions.parquet`` (node: the test vertices with label and
prediction; link: the test edges with their score), with ``orig_id`` columns when the id map is readable;
``node_embeddings/`` (the learnable rows of every vertex at the best epoch, with ``train.node_embeddings``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import numpy as np

from glisp_core.config import Config, to_dict
from glisp_core.dataset.layout import (
    DST,
    LABEL,
    LINK_SCORE_COLUMNS,
    ORIG_ID,
    PREDICTION_COLUMNS,
    SPLIT,
    SRC,
    VID,
    VTYPE,
    DatasetVersion,
)
from glisp_core.dataset.manifest import StageRecord, read_manifest
from glisp_core.dataset.publish import StagePublisher
from glisp_core.models import save_checkpoint, typed_relations
from glisp_core.storage.store import store_for
from glisp_core.storage.uri import StoreURI
from glisp_train.source import GraphSource
from glisp_train.trainer import TrainResult, hop_fanouts

NODE_EMBEDDINGS = "node_embeddings"  # the checkpoint's directory of learnable rows (train.node_embeddings)


def run_params(cfg: Config, source: GraphSource, world: int, device: str) -> dict[str, Any]:
    """What the run is, recorded in the manifest (and its fingerprint)."""
    return params_for(cfg, source.kind, source.run, source.info.run_fingerprint, world, device)


def params_for(cfg: Config, kind: str, run: str, fingerprint: str, world: int, device: str) -> dict[str, Any]:
    """:func:`run_params` from its parts: whether a run is up to date is known before any server starts."""
    return {
        "task": cfg.train.task,
        "model": cfg.train.model,
        "source": kind,
        "partition_run": run,
        "partition_fingerprint": fingerprint,
        "world_size": world,
        "device": device,
        "train": to_dict(cfg.train),
    }


def train_publisher(dv: DatasetVersion, name: str, partition_run: str, params: dict[str, Any]) -> StagePublisher:
    """The publisher of stage ``train/<name>`` of a model trained on ``partition_run``."""
    return StagePublisher(dv, f"train/{name}", params, depends=[f"serialize/{partition_run}"])


def publish_model(
    dv: DatasetVersion,
    name: str,
    model: Any,
    partition_run: str,
    direction: str = "in",
    extra: dict[str, Any] | None = None,
    node_embeddings: np.ndarray | None = None,
) -> StageRecord:
    """Publish a model trained elsewhere (or untrained: tests, benchmarks) as ``train/<name>``.

    The checkpoint and the record carry the fields ``glisp train`` writes for ``glisp infer`` (task,
    partition run and its fingerprint, sampling direction), so inference reads both alike; the params
    hold a hash of the weights, so publishing other weights under the same name replaces the stage.
    ``node_embeddings``: learnable rows of every vertex (by vid), which inference appends to the features.
    """
    import hashlib

    import torch

    h = hashlib.sha256()
    for k, v in sorted(model.state_dict().items()):
        h.update(k.encode())
        h.update(v.detach().cpu().to(torch.float32).numpy().tobytes())
    if node_embeddings is not None:
        h.update(np.ascontiguousarray(node_embeddings, np.float32).tobytes())
    fp = read_manifest(dv).stage(f"serialize/{partition_run}").fingerprint
    params = {
        "task": model.spec.task,
        "model": model.spec.factory or model.spec.arch,
        "source": "external",
        "partition_run": partition_run,
        "partition_fingerprint": fp,
        "weights_sha256": h.hexdigest(),
    }
    pub = train_publisher(dv, name, partition_run, params)
    if node_embeddings is not None:
        extra = {**(extra or {}), "node_embeddings": {"dim": int(node_embeddings.shape[1]), "path": NODE_EMBEDDINGS}}
    with pub:
        if node_embeddings is not None:
            ids = np.arange(len(node_embeddings), dtype=np.int64)
            write_node_embeddings(pub.tmp / NODE_EMBEDDINGS, [(ids, np.asarray(node_embeddings, np.float32))])
        save_checkpoint(
            pub.tmp,
            model,
            extra={
                "task": model.spec.task,
                "dataset": str(dv.path),
                "partition_run": partition_run,
                "partition_fingerprint": fp,
                "direction": direction,
                **(extra or {}),
            },
        )
        return pub.commit(counts={"parameters": sum(p.numel() for p in model.parameters())})


def record(result: TrainResult) -> tuple[dict[str, Any], dict[str, Any], dict[str, float]]:
    """(counts, metrics, timings) of the manifest record."""
    counts = {
        **result.counts,
        "epochs_run": len(result.epochs),
        "parameters": sum(p.numel() for p in result.model.parameters()),
        "cache_vertices": result.cache_rows,
        "cache_bytes": result.cache_bytes,
    }
    test = {f"test_{k}": round(float(v), 6) for k, v in result.test.items() if k != "predictions"}
    metrics = {
        "best_epoch": result.best_epoch,
        **result.val,
        **test,
        "stopped_early": result.stopped_early,
        "split": result.split_source,
        "evaluation": result.evaluation,
        "epochs": result.epochs,
    }
    return counts, metrics, dict(result.timings)


def write_outputs(out: StoreURI, result: TrainResult, cfg: Config, source: GraphSource) -> None:
    """Checkpoint, split and predictions into ``out`` (a stage's attempt prefix or --output), through its store."""
    import pyarrow as pa

    store = store_for(out)
    tc = cfg.train
    typed = bool(typed_relations(result.model))
    extra = {
        "task": tc.task,
        "dataset": str(source.dv.path) if source.dv else "",
        "partition_run": source.run,
        "partition_fingerprint": source.info.run_fingerprint,
        "direction": tc.direction,
        "fanouts": hop_fanouts(tc, source.edge_types, typed=typed),
        "eval_fanouts": hop_fanouts(tc, source.edge_types, evaluation=True, typed=typed),
        "best_epoch": result.best_epoch,
        "val": result.val,
        "test": {k: v for k, v in result.test.items() if k != "predictions"},
        "evaluation": result.evaluation,
    }
    idmap = _idmap(source)
    if result.embeddings is not None:
        extra["node_embeddings"] = {"dim": result.embeddings.dim, "path": NODE_EMBEDDINGS}
        write_node_embeddings(out / NODE_EMBEDDINGS, result.embeddings.chunks(source.num_vertices), idmap)
    save_checkpoint(out, result.model, extra=extra)
    if tc.task == "node":
        t = result.task
        vids = np.concatenate([t.train_ids, t.val_ids, t.test_ids])
        codes = np.repeat(np.array([0, 1, 2], np.int8), [len(t.train_ids), len(t.val_ids), len(t.test_ids)])
        store.write_table(pa.table({VID: vids, **_orig(idmap, vids), SPLIT: codes}), out / "split.parquet")
        got, pred, prob = result.test["predictions"]
        order = np.argsort(got)
        got = got[order]
        labels = pa.array(t.labels[got], pa.int64(), mask=t.labels[got] < 0)  # null: no label
        cols = {**_orig(idmap, got), VID: got, LABEL: labels, "prediction": pred[order], "score": prob[order]}
        table = pa.table(cols).cast(_prediction_schema(pa.table(cols).schema))
        store.write_table(table.select([c for c in PREDICTION_COLUMNS if c in cols]), out / "predictions.parquet")
    else:
        src, dst, score = result.test["predictions"]
        so, do = _orig(idmap, src).get(ORIG_ID), _orig(idmap, dst).get(ORIG_ID)
        cols = {
            SRC: so if so is not None else src,
            DST: do if do is not None else dst,
            "score": score.astype(np.float32),
        }
        cols.update(src_vid=src, dst_vid=dst)
        store.write_table(pa.table(cols).select(list(LINK_SCORE_COLUMNS)), out / "predictions.parquet")


def write_node_embeddings(out: StoreURI, chunks: Iterable[tuple[np.ndarray, np.ndarray]], idmap: Any = None) -> None:
    """Learnable rows of every vertex (the best epoch's), one Parquet file per chunk of (ids, rows) (``vid``,
    ``orig_id`` when the id map is readable, ``embedding``): the trainer never holds the whole table."""
    import pyarrow as pa

    store = store_for(out)
    for i, (ids, rows) in enumerate(chunks):
        col = pa.FixedSizeListArray.from_arrays(pa.array(rows.reshape(-1), pa.float32()), rows.shape[1])
        store.write_table(pa.table({VID: ids, **_orig(idmap, ids), "embedding": col}), out / f"part-{i:05d}.parquet")


def _orig(idmap: Any, vids: np.ndarray) -> dict[str, Any]:
    """The original id and vertex type name of ``vids`` (nothing when the id map is not readable here)."""
    if idmap is None:
        return {}
    names = np.asarray(idmap.vertex_types, dtype=object)
    return {ORIG_ID: idmap.to_orig(vids), VTYPE: names[idmap.vtype[vids]]}


def _prediction_schema(schema: Any) -> Any:
    """Prediction columns as inference writes them: int32 classes, float32 scores."""
    import pyarrow as pa

    types = {"prediction": pa.int32(), "score": pa.float32(), VID: pa.int64(), VTYPE: pa.string()}
    return pa.schema([pa.field(f.name, types.get(f.name, f.type)) for f in schema])


def _idmap(source: GraphSource):
    from glisp_core.dataset.idmap import IdMap

    if source.dv is None or not source.dv.store.is_dir(source.dv.idmap):
        return None
    return IdMap.load(source.dv)


def write_standalone(
    out: StoreURI, result: TrainResult, cfg: Config, source: GraphSource, params: dict[str, Any]
) -> StoreURI:
    """--output DIR (a local directory or a store URI): the run's files plus run.json (what the record would hold)."""
    write_outputs(out, result, cfg, source)
    counts, metrics, timings = record(result)
    doc = {"params": params, "counts": counts, "metrics": metrics, "timings": timings}
    store_for(out).write_bytes(out / "run.json", json.dumps(doc, indent=2, default=str).encode())
    return out
