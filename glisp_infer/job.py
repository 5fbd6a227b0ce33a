"""``glisp infer``: the Spark driver of layerwise inference. It resolves the inputs, schedules one task per
partition per layer, and publishes ``infer/<run>/`` atomically. It never holds embeddings: tasks read and
write the Zarr arrays themselves and return only metrics.

Stage layout (``infer/<run>/``)::

    zarr/          the Zarr v3 group (glisp_infer.store), unless infer.store names another place
    store.json     where the group lives when infer.store is set (a local directory, s3://... or an fsspec URL)
    index/         Parquet: orig_id, vtype, vid, part, row
    embeddings/    Parquet: orig_id, vtype, vid, embedding (the last layer's rows)
    predictions/   Parquet (node task): orig_id, vtype, vid, label, prediction, score (layout.PREDICTION_COLUMNS)
    scores/        Parquet (link task): src, src_type, dst, dst_type, etype, score, src_vid, dst_vid
    model.json     the checkpoint's model.json, for the record

The root may be a local disk or an object store: the driver and every task reach the stage, the Zarr group,
the checkpoint and the halo exchange (``exchange/``, under the attempt until it is published) through the
dataset's store, each opening it itself; tasks map partitions of an object-store dataset from their host's
verified copies (``serve.cache_dir``). Nothing passes between driver and tasks through a local path.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from glisp_core.config import Config
from glisp_core.dataset.layout import DatasetVersion
from glisp_core.dataset.manifest import Manifest, StageRecord, read_manifest
from glisp_core.dataset.order_index import INDEX_DIR, index_url
from glisp_core.dataset.publish import StagePublisher, file_fingerprints, up_to_date
from glisp_core.errors import GlispError, StageError
from glisp_core.models import follows_slice_protocol, layer_widths, typed_relations
from glisp_core.storage.store import store_for
from glisp_core.storage.uri import StoreURI, parse_uri
from glisp_core.storage.zarr_arrays import in_dataset_store
from glisp_infer.halo import remove_layer_files
from glisp_infer.metrics import summarize_layers
from glisp_infer.plan import SHADOW_FRACTIONS, InferPlan
from glisp_infer.run_name import latest_train_run, run_name
from glisp_infer.sampling import check_fanouts
from glisp_infer.scratch import disk_scratch, marker
from glisp_infer.store import STORE_FILE, ZARR_DIR, Codec, RowLayout, create_arrays, store_url

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from glisp_infer.predict import Prediction
    from glisp_infer.refresh import Refresh

EXCHANGE_DIR = "exchange"  # the halo exchange between layers (glisp_infer.halo), removed before publishing


def effective_chunk_rows(chunk_rows: int, counts: list[int]) -> int:
    """``infer.chunk_rows``, or less when every partition is smaller: its largest size rounded up to a
    multiple of 256, so that a small graph is not padded to 32,768 rows per partition."""
    largest = -(-max(counts, default=0) // 256) * 256
    return max(1, min(chunk_rows, max(largest, 256)))


def _published_store_url(dv: DatasetVersion, run: str) -> str | None:
    """The external store of the published ``infer/<run>``, if it has one."""
    rec = read_manifest(dv).stages.get(f"infer/{run}")
    if rec is None or not dv.store.exists(dv.path / rec.path / STORE_FILE):
        return None
    return store_url(dv, dv.path / rec.path)


def _remove_store(url: str, attempts: int = 5) -> None:
    """Best-effort removal of an external store that no published stage points to. It never raises: after a
    failed run, a task of the aborted Spark job may still be writing a chunk while the driver removes the
    store ("Directory not empty"), so it tries again a few times, and an error here must not hide the
    run's own."""
    import fsspec

    if in_dataset_store(url):
        store = store_for(url)

        def rm() -> None:
            store.delete(url)
    else:
        fs, path = fsspec.core.url_to_fs(url) if "://" in url else (fsspec.filesystem("file"), url)

        def rm() -> None:
            fs.rm(path, recursive=True)

    for attempt in range(attempts):
        try:
            rm()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.2 * (attempt + 1))
    print(f"glisp infer: could not remove the unpublished store {url}; nothing points to it", file=sys.stderr)


def full_run(man: Manifest, run: str | None) -> str | None:
    """The run a model trained on ``run`` infers over: for a ``glisp link-split`` training-only run (its held-out
    edges left out), the full run it was derived from, so inference and link scores see every edge."""
    if not run or not man.has_stage(f"partition/{run}"):
        return run
    p = man.stage(f"partition/{run}").params
    return str(p["derived_from"]) if p.get("edge_subset") and p.get("derived_from") else run


class Inputs:
    """Everything the driver resolves before scheduling: the model, the partition run, the order."""

    def __init__(self, spark: SparkSession, cfg: Config, dv: DatasetVersion) -> None:
        from glisp_core.models import load_checkpoint
        from spark_jobs.serialize.reorder import check_order, run_reorder

        ic = cfg.infer
        check_order(ic.order)
        man = read_manifest(dv)
        self.model_run = ic.model or latest_train_run(man)
        trec = man.stage(f"train/{self.model_run}")
        self.dataset = dv.path
        self.checkpoint = dv.path / trec.path
        model, self.doc = load_checkpoint(self.checkpoint)
        self.model = model
        self.spec = model.spec
        self.layerwise = follows_slice_protocol(model)  # else sample-wise, in the driver (glisp_infer.samplewise)
        from spark_jobs.serialize.job import resolve_run

        trained_on = trec.params.get("partition_run") or trec.params.get("partition") or self.doc.get("partition_run")
        self.partition, self.num_parts = resolve_run(man, ic.partition or full_run(man, trained_on) or None)
        self.partition_counts = man.stage(f"partition/{self.partition}").counts  # a refresh's hint: same_vids
        man.stage(f"serialize/{self.partition}")
        self.parts_dir = dv.serialized(self.partition)
        schema = man.schema
        self.num_edges = int(schema["num_edges"])  # sizes the stage's shuffles
        self.node_embeddings, ndim = self._node_embeddings()
        fdim = int(schema.get("feature_dim", 0))
        if fdim + ndim == 0:
            raise StageError(
                f"{dv}: the graph has no vertex features; layerwise inference starts from them "
                "(ingest features with the vertex table, or train with train.node_embeddings)"
            )
        if fdim + ndim != self.spec.in_dim:
            raise StageError(
                f"model {self.model_run}: in_dim {self.spec.in_dim} does not match the graph's feature_dim {fdim}"
                + (f" + {ndim} node embedding columns" if ndim else "")
            )
        unknown = sorted(set(self.spec.relations) - set(schema.get("edge_types", [])))
        if unknown:
            raise StageError(
                f"model {self.model_run}: relations {unknown} are not edge types of the graph "
                f"(edge types: {schema.get('edge_types')})"
            )
        self.fanouts = check_fanouts(ic.fanouts, self.spec.layers)
        self.direction = ic.direction or str(self.doc.get("direction") or "in")  # glisp train's default
        rcfg = replace(cfg, reorder=replace(cfg.reorder, order=ic.order))
        self.reorder = run_reorder(spark, rcfg, dv, order=ic.order, run=self.partition)
        order_index = dv.path / self.reorder.path / INDEX_DIR
        if not dv.store.exists(order_index / "zarr.json"):
            raise StageError(
                f"{order_index.qualified}: the reorder stage's lookup arrays are missing (the tasks read them); "
                f"run `glisp reorder {dv.path.qualified} --order {ic.order} --partition {self.partition} --force`"
            )
        self.num_vertices = int(schema.get("num_vertices", 0))
        self.vertex_types = list(schema.get("vertex_types", []))
        self.edge_types = list(schema.get("edge_types", []))
        self.name = run_name(ic.run, self.model_run, ic.order)

    def _node_embeddings(self) -> tuple[str, int]:
        """The checkpoint's learnable node embeddings (train.node_embeddings): their directory and width, which
        layer 0 appends to the features; ("", 0) without them."""
        ne = self.doc.get("node_embeddings") or {}
        if not ne:
            return "", 0
        if not self.layerwise:
            raise StageError(
                f"model {self.model_run}: trained with node embeddings but without the slice protocol; sample-wise "
                "inference reads features only"
            )
        return str(self.checkpoint / str(ne["path"])), int(ne["dim"])

    @property
    def dims(self) -> tuple[int, ...]:
        return layer_widths(self.model)


def _check_settings(ic: Any) -> None:
    """Settings no run can use, refused before any work."""
    if ic.chunk_rows < 1 or ic.batch_size < 1:
        raise GlispError(
            f"infer.chunk_rows and infer.batch_size must be positive (got {ic.chunk_rows}, {ic.batch_size})"
        )
    if ic.cache_admit_window < -1:
        raise GlispError(
            f"infer.cache_admit_window: expected -1 (never), 0 (always) or N >= 1 batches (got {ic.cache_admit_window})"
        )


def _params(ic: Any, inp: Inputs, layout: RowLayout) -> dict[str, Any]:
    """The stage's parameters: what makes a published run current or not."""
    params: dict[str, Any] = {
        "model": inp.model_run,
        "partition": inp.partition,
        "parts": inp.num_parts,
        "order": ic.order,
        "fanouts": inp.fanouts,
        "seed": ic.seed,
        "direction": inp.direction,
        "chunk_rows": layout.chunk_rows,
        "compressor": ic.compressor,
        "clevel": ic.clevel,
        "shuffle": ic.shuffle,
        "intermediate_compressor": ic.intermediate_compressor,
        "batch_size": ic.batch_size,
        "cache_chunk_rows": ic.cache_chunk_rows or layout.chunk_rows,
        "cache_policy": ic.cache_policy,
        "cache_admit_window": ic.cache_admit_window,
        "cache_fraction": ic.cache_fraction,
        "cache_chunks": ic.cache_chunks,
        "store": ic.store,
        "edges": ic.edges,
        "task": inp.spec.task,
        "arch": inp.spec.arch,
        "dims": list(inp.dims),
        "halo": ic.halo,
        "project_first": ic.project_first,
    }
    if ic.incremental:  # a different draw than the kernels': not the same result as a run without it
        params["sampling"] = "stable"
    return params


def _predict(ic: Any, dv: DatasetVersion, inp: Inputs, params: dict[str, Any]) -> Prediction | None:
    """A refresh predicted to compute every row (:mod:`glisp_infer.predict`): the run is then a plain one, and its
    parameters say it drew kernel samples."""
    if not (ic.incremental and inp.layerwise):
        return None
    from glisp_infer.predict import predict

    got = predict(ic, dv, inp, params)
    if got is not None:
        params["sampling"] = "kernel"
    return got


def _predicted_drift(p: Prediction, cfg: Config, inp: Inputs, url: str) -> dict[str, Any]:
    """A predicted run's drift against its previous run, on a sample of the vertices."""
    from glisp_infer.predict import sampled_drift

    pdv, prec = p.prev
    prev_url = store_url(pdv, pdv.path / prec.path)
    return sampled_drift(p, url, prev_url, len(inp.dims) - 1, inp.num_vertices, cfg.infer.seed, inp.spec.task)


def run_infer(
    spark: SparkSession,
    cfg: Config,
    dv: DatasetVersion,
    force: bool = False,
    fault: str | None = None,
    log: Any = print,
) -> StageRecord:
    """Run layerwise inference and publish ``infer/<run>``; a current stage is reused unless forced.

    ``fault`` (tests only; also env ``GLISP_INFER_FAULT``) = ``"layer:part:chunks[:raise]"`` makes the
    first attempt of that task die after writing that many chunks.
    """
    ic = cfg.infer
    inp = Inputs(spark, cfg, dv)
    counts = [int(x) for x in inp.reorder.counts["vertices_per_part"]]
    _check_settings(ic)
    layout = RowLayout(effective_chunk_rows(ic.chunk_rows, counts), tuple(counts))
    codec = Codec(ic.compressor, ic.clevel, ic.shuffle, ic.intermediate_compressor)
    params = _params(ic, inp, layout)
    predicted = _predict(ic, dv, inp, params)
    extra = None
    if ic.edges:  # a local edge list is fingerprinted; a URL is taken as named
        extra = (
            {"edges": ic.edges} if "://" in ic.edges else file_fingerprints(_edge_files(ic.edges), cfg.dataset.checksum)
        )
    depends = [
        "ingest",
        f"partition/{inp.partition}",
        f"serialize/{inp.partition}",
        f"reorder/{inp.partition}/{ic.order}",
        f"train/{inp.model_run}",
    ]
    pub = StagePublisher(dv, f"infer/{inp.name}", params, depends=depends, extra_inputs=extra)
    if not force and (pub.is_current() or not pub.claim()):  # an identical run in progress: wait for its record
        log(up_to_date(f"infer/{inp.name}"))
        return pub.record()  # type: ignore[return-value]
    from glisp_spark.session import size_shuffles

    size_shuffles(spark, cfg.spark, inp.num_edges)
    old_url = _published_store_url(dv, inp.name)
    url = None
    refresh = None
    try:
        with pub:
            if predicted is not None:
                predicted.acquire(dv)  # its drift reads the previous run
            elif ic.incremental and not inp.layerwise:
                log(f"infer/{inp.name}: a full run: incremental inference needs the slice protocol")
            elif ic.incremental:
                from glisp_infer.refresh import Refresh

                refresh = Refresh.resolve(ic, dv, inp.name, params, inp)
            url = _new_store(dv, ic.store, inp.name, pub.tmp)
            rec = _run(spark, cfg, dv, inp, layout, codec, url, pub, fault, log, refresh, predicted)
    except BaseException:
        if url and ic.store:
            _remove_store(url)
        raise
    finally:
        for held in (refresh, predicted):
            if held is not None:
                held.close()
    if old_url and old_url != url:
        _remove_store(old_url)
    return rec


def _edge_files(path: str) -> list[Path]:
    p = Path(path)
    if p.is_dir():
        return sorted(f for f in p.rglob("*") if f.is_file() and not f.name.startswith((".", "_")))
    if not p.exists():
        raise GlispError(f"infer.edges: {path}: no such file or directory")
    return [p]


def _new_store(dv: DatasetVersion, base: str, name: str, tmp: StoreURI) -> str:
    """The Zarr group of this attempt: inside the stage, or a fresh prefix under ``base``."""
    if not base:
        return str(tmp / ZARR_DIR)
    url = f"{base.rstrip('/')}/{dv.graph}/{dv.version}/infer/{name}-{uuid.uuid4().hex[:12]}"
    dv.store.write_bytes(tmp / STORE_FILE, json.dumps({"url": url}, indent=2).encode())
    return url


def _plan(
    cfg: Config,
    spark: SparkSession,
    inp: Inputs,
    layout: RowLayout,
    codec: Codec,
    url: str,
    fault: str | None,
    tmp: StoreURI,
) -> InferPlan:
    ic = cfg.infer
    cores = os.cpu_count() or 1
    threads = ic.threads or max(1, cores // max(1, int(spark.sparkContext.defaultParallelism)))
    return InferPlan(
        store=url,
        parts_dir=str(inp.parts_dir),
        order_url=index_url(inp.dataset / inp.reorder.path),
        num_parts=inp.num_parts,
        layout=layout,
        codec=codec,
        order=ic.order,
        dims=inp.dims,
        fanouts=tuple(inp.fanouts),
        seed=ic.seed,
        direction=inp.direction,
        relations=typed_relations(inp.model),
        checkpoint=str(inp.checkpoint),
        node_embeddings=inp.node_embeddings,
        task=inp.spec.task,
        batch_size=ic.batch_size,
        cache_chunk_rows=ic.cache_chunk_rows or layout.chunk_rows,
        cache_policy=ic.cache_policy,
        cache_admit_window=ic.cache_admit_window,
        cache_fraction=ic.cache_fraction,
        cache_chunks=ic.cache_chunks,
        shadow_fractions=SHADOW_FRACTIONS if ic.cache_replays else (),
        scratch_dir=ic.scratch_dir,
        device=ic.device,
        threads=threads,
        local_own_rows=ic.local_own_rows,
        project_first=ic.project_first,
        exchange_dir=str(tmp / EXCHANGE_DIR) if ic.halo else "",
        dataset=inp.dataset.qualified,
        partition_cache=cfg.serve.cache_dir,
        verify_copies=cfg.serve.verify != "off",
        token=f"{inp.name}-{uuid.uuid4().hex[:12]}",
        fault=fault if fault is not None else os.environ.get("GLISP_INFER_FAULT", ""),
    )


def run_tasks(spark: SparkSession, plan: InferPlan, fn: Any, what: str) -> list[dict[str, Any]]:
    """One Spark task per partition running ``fn(plan, part, attempt)``; only metrics come back. The tasks run on
    the SQL runner's Python workers (``glisp_spark.tasks.run_tasks``), which the index and output jobs use as
    well: the RDD runner would start a second set of workers, each importing torch, numba and zarr again."""
    from glisp_spark.tasks import run_tasks as indexed_tasks

    def one(part: int) -> dict[str, Any]:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        return fn(plan, part, ctx.attemptNumber() if ctx is not None else 0)

    sc = spark.sparkContext
    sc.setJobDescription(f"glisp infer: {what}")
    try:
        return indexed_tasks(spark, plan.num_parts, one)
    finally:
        sc.setJobDescription(None)  # type: ignore[arg-type]  # None clears it; pyspark annotates str only


def _run(
    spark: SparkSession,
    cfg: Config,
    dv: DatasetVersion,
    inp: Inputs,
    layout: RowLayout,
    codec: Codec,
    url: str,
    pub: StagePublisher,
    fault: str | None,
    log: Any,
    refresh: Refresh | None = None,
    predicted: Prediction | None = None,
) -> StageRecord:
    t0 = time.perf_counter()
    plan = _plan(cfg, spark, inp, layout, codec, url, fault, pub.tmp)
    if refresh is not None:
        plan = replace(plan, **refresh.plan_fields(pub.tmp, list(inp.dims)))
    try:
        return _run_layers(spark, cfg, dv, inp, plan, pub, log, t0, refresh, predicted)
    finally:
        shutil.rmtree(plan.scratch(), ignore_errors=True)  # this host's leftovers (tasks remove their own)
        shutil.rmtree(disk_scratch(plan.token), ignore_errors=True)
        marker(plan.token).unlink(missing_ok=True)
        _remove_exchange(plan)


log = logging.getLogger("glisp.infer")


def _scores(spark: SparkSession, dv: DatasetVersion, inp: Inputs, plan: InferPlan, out: StoreURI) -> dict[str, Any]:
    """The run's scores where the dataset has answers (glisp_infer.evaluate), said with the fanouts they used."""
    from glisp_infer.evaluate import link_scores_of, node_scores

    if inp.spec.task == "node":
        if not int(read_manifest(dv).schema.get("num_classes") or 0):
            return {}
        got = node_scores(spark, dv, out / "predictions", inp.checkpoint)
    else:
        trec = read_manifest(dv).stage(f"train/{inp.model_run}")
        got = link_scores_of(spark, plan, dv, trec, inp.partition, out)
    if not got or "skipped" in got:
        return got
    full = all(f == -1 for f in plan.fanouts)
    return {"neighbourhoods": "full" if full else "sampled", "fanouts": list(plan.fanouts), **got}


def _remove_exchange(plan: InferPlan) -> None:
    """The halo exchange and the refresh's masks are no part of the published stage; a failed run's are removed
    with its attempt."""
    for d in (plan.exchange(), parse_uri(plan.incremental_dir) if plan.incremental_dir else None):
        if d is None:
            continue
        try:
            if store_for(d).exists(d):
                store_for(d).delete(d)
        except OSError as e:  # garbage in an attempt: retention removes it with the attempt if it is unpublished
            log.warning("infer: could not remove %s (%s)", d, e)


def _layout_counts(plan: InferPlan) -> dict[str, Any]:
    """The run's shape: vertices and rows, per partition, layers and widths, chunks per layer."""
    layout = plan.layout
    return {
        "vertices": layout.num_vertices,
        "rows": layout.rows,
        "vertices_per_part": list(layout.counts),
        "row_start_per_part": list(layout.starts),
        "layers": plan.layers,
        "dims": list(plan.dims),
        "chunks_per_layer": layout.rows // layout.chunk_rows,
    }


def _infer_layers(
    spark: SparkSession,
    plan: InferPlan,
    inp: Inputs,
    planned: dict[int, dict[str, Any]],
    timings: dict[str, float],
    log: Any,
    refresh: Refresh | None,
) -> tuple[list[list[dict[str, Any]]], dict[str, Any]]:
    """Layer 0 (the features), then each layer's tasks in turn (layer 0 only for a sample-wise model); returns the
    tasks' metrics per layer and, for a refresh, the last layer's drift."""
    from glisp_infer import task as T

    exchange, url = plan.exchange(), plan.store
    compare = refresh is not None and refresh.incremental  # in layer 0's tasks: no job of its own
    per_layer: list[list[dict[str, Any]]] = []
    drift: dict[str, Any] = {}
    if not inp.layerwise:
        log(
            f"infer/{inp.name}: model {inp.model_run} ({inp.spec.factory or inp.spec.arch}) has no slice protocol "
            "(num_layers and layer(i, x_src, edge_index, num_dst, edge_type); docs/inference.md), so it cannot run one "
            "layer at a time: sample-wise inference instead, every vertex's tree through the whole model, in the driver"
        )
    for layer in range(plan.layers + 1 if inp.layerwise else 1):
        t = time.perf_counter()
        if layer == 0:
            features = T.write_features_and_compare if compare else T.write_features
            res = run_tasks(spark, plan, lambda p, k, a, f=features: f(p, k, a), "layer 0 (features)")
        else:
            mode = refresh.layer_mode(layer) if refresh is not None else ""
            res = run_tasks(
                spark, plan, lambda p, k, a, ly=layer, md=mode: T.infer_layer(p, ly, k, a, md), f"layer {layer}"
            )
        wall = time.perf_counter() - t
        timings[f"layer{layer}_s"] = wall
        for r in res:
            r["wall_s"] = wall
            if layer and planned:  # the layer's sampling and needs ran in the plan job
                r["sample_s"] += planned[r["part"]]["sample_s"][layer - 1]
                r["needs_s"] = planned[r["part"]]["needs_s"][layer - 1]
        if layer and exchange is not None:
            remove_layer_files(exchange, layer - 1)
        if refresh is not None:
            if layer == 0:
                if compare:
                    refresh.after_features([r.pop(T.CHANGES) for r in res])
                    timings["refresh_compare_s"] = max(r["compare_s"] for r in res)  # the longest task's
                    plan = replace(plan, double=refresh.double)  # float32 after a fallback from layer 1
            else:
                refresh.after_layer(layer, res)
            if layer == plan.layers:
                t = time.perf_counter()
                drift = refresh.drift(url, res, layer, inp.spec.task)
                timings["drift_s"] = time.perf_counter() - t
        per_layer.append(sorted(res, key=lambda r: r["part"]))
        log(f"infer/{inp.name}: layer {layer} done in {wall:.1f}s")
    return per_layer, drift


def _create_layer_arrays(dv: DatasetVersion, inp: Inputs, plan: InferPlan) -> None:
    """The run's Zarr arrays, every layer's, with what the run was made from in their attributes."""
    attrs = {
        "order": plan.order,
        "model": inp.model_run,
        "partition": inp.partition,
        "graph": dv.graph,
        "version": dv.version,
        "fanouts": list(plan.fanouts),
        "seed": plan.seed,
        "direction": plan.direction,
    }
    create_arrays(
        plan.store,
        plan.layout,
        list(plan.dims),
        inp.num_vertices,
        plan.codec,
        attrs,
        stable=plan.stable,
        labels=plan.task == "node",
    )


def _work_profile(plan: InferPlan, planned: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """``work_profile`` (:mod:`glisp_infer.profile`) from the plan job's tasks: a later refresh predicts from it."""
    from glisp_infer import task as T
    from glisp_infer.profile import record

    hists = [r.pop(T.WORK_PROFILE) for r in planned.values() if r.get(T.WORK_PROFILE) is not None]
    got = record(hists, T.profile_capped(plan)) if len(hists) == len(planned) else None
    return {T.WORK_PROFILE: got} if got else {}


def _plan_metrics(planned: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """The plan job's seconds and CPU summed over its tasks, and its attempts per partition."""
    return {
        "total_s": round(sum(r["total_s"] for r in planned.values()), 3),
        "cpu_s": round(sum(r["cpu_s"] for r in planned.values()), 3),
        "attempts_per_part": [int(planned[k]["attempt"]) + 1 for k in sorted(planned)],
    }


def _run_layers(
    spark: SparkSession,
    cfg: Config,
    dv: DatasetVersion,
    inp: Inputs,
    plan: InferPlan,
    pub: StagePublisher,
    log: Any,
    t0: float,
    refresh: Refresh | None = None,
    predicted: Prediction | None = None,
) -> StageRecord:
    """Arrays, the plan job, every layer, the outputs and scores; publishes the stage."""
    from glisp_infer import task as T
    from glisp_infer.outputs import write_outputs
    from glisp_infer.samplewise import samplewise_last_layer

    url, exchange = plan.store, plan.exchange()
    _create_layer_arrays(dv, inp, plan)
    timings: dict[str, float] = {}
    if refresh is not None:
        t = time.perf_counter()
        refresh.start(spark, url)
        timings["refresh_start_s"] = time.perf_counter() - t  # the vertex keys and the row map
    # no index job: tasks read the reorder stage's lookup arrays, layer 0 writes the run's own index arrays, and
    # the outputs' pass writes the Parquet index (original ids to rows)
    planned: dict[int, dict[str, Any]] = {}
    if exchange is not None:
        t = time.perf_counter()
        planned = {r["part"]: r for r in run_tasks(spark, plan, T.plan_exchange, "plan (samples, halo needs)")}
        timings["plan_s"] = time.perf_counter() - t
    extra_metrics: dict[str, Any] = {}
    per_layer, drift = _infer_layers(spark, plan, inp, planned, timings, log, refresh)
    if not inp.layerwise:
        t = time.perf_counter()
        extra_metrics["samplewise"] = samplewise_last_layer(plan, dv, inp.partition, inp.model)
        timings["samplewise_s"] = time.perf_counter() - t
    t = time.perf_counter()
    out_counts = write_outputs(spark, plan, cfg, dv, pub.tmp, inp.vertex_types, inp.edge_types)
    timings["outputs_s"] = time.perf_counter() - t
    t = time.perf_counter()
    scores = _scores(spark, dv, inp, plan, pub.tmp)
    timings["scores_s"] = time.perf_counter() - t
    _remove_exchange(plan)  # not part of the published stage
    from glisp_core.models import SPEC_FILE

    dv.store.write_bytes(pub.tmp / SPEC_FILE, store_for(inp.checkpoint).read_bytes(inp.checkpoint / SPEC_FILE))
    metrics = {**summarize_layers(per_layer), **extra_metrics, "layerwise": inp.layerwise}
    if scores:
        metrics["evaluation"] = scores
    if planned:
        metrics["plan"] = _plan_metrics(planned)
    counts = {**_layout_counts(plan), **out_counts, **_work_profile(plan, planned)}
    if refresh is not None:
        counts["incremental"] = refresh.record()
        counts["model_digest"] = refresh.digest
        if drift:
            metrics["drift"] = drift
    if predicted is not None:
        t = time.perf_counter()
        counts["incremental"], metrics["drift"] = predicted.record(), _predicted_drift(predicted, cfg, inp, url)
        timings["drift_s"] = time.perf_counter() - t
    timings["total_s"] = time.perf_counter() - t0
    return pub.commit(counts=counts, metrics=metrics, timings={k: round(v, 3) for k, v in timings.items()})
