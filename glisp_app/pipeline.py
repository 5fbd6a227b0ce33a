"""``glisp pipeline``: every batch stage end to end on one graph, in one Spark session.

ingest -> partition -> serialize -> reorder -> (train, ``pipeline.train``) -> (infer, ``infer.model`` or
the model just trained) -> promote ``latest`` -> retention. Each stage is idempotent, so re-running the
pipeline on an unchanged snapshot does nothing, and a new snapshot yields a new dataset version
(the scheduled-refresh use). Stage failures leave earlier published stages intact.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

from glisp_app.promote import promote
from glisp_core.config import Config, with_values
from glisp_core.dataset.manifest import Manifest, read_manifest
from glisp_core.dataset.stages import StageName, run_of
from glisp_core.dataset.versions import GraphLock
from glisp_core.errors import GlispError, StageError, failure_reason
from glisp_core.storage.uri import parse_uri


def add_arguments(p: argparse.ArgumentParser) -> None:
    src = p.add_mutually_exclusive_group()
    src.add_argument("--builtin", help="a built-in graph: cora, lastfm, imdb")
    src.add_argument("--edges", action="append", help="an edge list file/glob (CSV with header src,dst)")
    p.add_argument("--graph", help="graph name (ingest.graph)")
    p.add_argument("--algorithm", help="partition algorithm (partition.algorithm)")
    p.add_argument("--parts", type=int, help="number of partitions (partition.parts)")
    p.add_argument("--order", help="inference order for reorder (reorder.order)")
    p.add_argument(
        "--incremental",
        action="store_true",
        default=None,
        help="partition by refreshing the previous version's run (partition.incremental)",
    )
    p.add_argument(
        "--train",
        action="store_true",
        default=None,
        help="train the model on the new version before inference (pipeline.train)",
    )
    p.add_argument(
        "--model",
        help="with --train: train.model, a built-in (sage, gcn, gat, rgcn) or 'package.module:factory' (docs/training.md)",
    )
    p.add_argument("--force", action="store_true", help="re-run stages even when up to date")


def run_stage(name: str, fn: Callable[[], Any], timings: dict[str, float]) -> Any:
    """Run one stage; any failure becomes a StageError naming the stage and the reason.

    Logs one structured line when the stage starts and one when it ends (``key=value``, so a scheduler's
    log search finds ``stage=partition status=failed``).
    """
    t = time.perf_counter()
    _progress(name, "started")
    status = "failed"
    try:
        out = fn()
        status = "done"
        return out
    except GlispError as e:
        raise StageError(f"pipeline stage {name!r} failed: {e}") from e
    except Exception as e:  # a Spark or Py4J failure: one line, not a Java stack trace
        raise StageError(f"pipeline stage {name!r} failed: {failure_reason(e)}") from e
    finally:
        timings[name] = time.perf_counter() - t
        _progress(name, status, timings[name])


def _progress(stage: str, status: str, seconds: float | None = None) -> None:
    took = f" seconds={seconds:.1f}" if seconds is not None else ""
    print(f"glisp pipeline: stage={stage} status={status}{took}", flush=True)


def run_pipeline(spark, cfg: Config, builtin: str | None = None, force: bool = False):
    """Run all batch stages; returns the dataset version.

    Each stage is idempotent, so a re-run after a failure resumes at the first stage that is not
    published (or whose inputs changed).
    """
    from spark_jobs.ingest.job import run_ingest
    from spark_jobs.partition.job import run_partition
    from spark_jobs.serialize.job import run_serialize
    from spark_jobs.serialize.reorder import run_reorder

    ingest_cfg = None
    if builtin:
        from glisp_spark.session import is_local_master, planned_master, started
        from spark_jobs.generate.builtin import builtin_config, share_builtin

        ingest_cfg = builtin_config(builtin, cfg.ingest)
        root = parse_uri(cfg.dataset.root)
        master = spark.sparkContext.master if started(spark) else planned_master(cfg.spark)
        if not root.is_local or not is_local_master(master):  # executors elsewhere read them
            ingest_cfg = share_builtin(ingest_cfg, root / "_builtin")
    timings: dict[str, float] = {}
    root = parse_uri(cfg.dataset.root)
    graph = (ingest_cfg or cfg.ingest).graph
    with GraphLock(root, graph) as lock:
        dv = run_stage("ingest", lambda: run_ingest(spark, cfg, ingest_cfg, force=force), timings)
        prec = run_stage("partition", lambda: run_partition(spark, cfg, dv, force=force), timings)
        run = run_of(prec.name)
        run_stage("serialize", lambda: run_serialize(spark, cfg, dv, run=run, force=force), timings)
        run_stage(
            "reorder", lambda: run_reorder(spark, cfg, dv, run=run, order=cfg.reorder.order, force=force), timings
        )
        required = [f"reorder/{run}/{cfg.reorder.order}"]
        required += _model_stages(spark, cfg, dv, run, force, timings)
        # only now, with every configured stage published: move latest, then apply retention
        lock.check()  # a run that stalled past its lock's expiry must not move latest under a newer one
        promote(dv, run, required, cfg.dataset.keep_versions)
    print("pipeline stage times: " + ", ".join(f"{k} {v:.1f}s" for k, v in timings.items()))
    return dv


def _model_stages(spark, cfg: Config, dv, run: str, force: bool, timings: dict[str, float]) -> list[str]:
    """Train (``pipeline.train``) and infer (``infer.model`` or the model just trained); their stage names."""
    from glisp_app.model_stages import infer_stage, train_stage

    done = []
    if cfg.pipeline.train:
        done.append(run_stage("train", lambda: train_stage(spark, cfg, dv, run, force=force), timings))
        if not cfg.infer.model:
            cfg = with_values(cfg, "infer", model=run_of(done[-1]))
    if cfg.infer.model:  # a configured model is re-applied to every new version
        done.append(run_stage("infer", lambda: infer_stage(spark, cfg, dv, run, force=force), timings))
    return done


def main(args: argparse.Namespace, cfg: Config) -> int:
    from glisp_core.config import EdgeSource
    from glisp_spark.session import lazy_spark

    cfg = with_values(cfg, "ingest", graph=args.graph)
    if args.edges:
        if not (args.graph or cfg.ingest.graph):
            raise GlispError("--edges needs --graph NAME")
        cfg = with_values(cfg, "", ingest=_replace_edges(cfg, [EdgeSource(path=e) for e in args.edges]))
    elif not args.builtin and not cfg.ingest.edges:
        raise GlispError("give --builtin NAME, --edges FILE or a --config with [[ingest.edges]]")
    cfg = with_values(cfg, "partition", algorithm=args.algorithm, parts=args.parts, incremental=args.incremental)
    cfg = with_values(cfg, "reorder", order=args.order)
    cfg = with_values(cfg, "pipeline", train=args.train)
    cfg = with_values(cfg, "train", model=args.model)
    spark = lazy_spark(cfg.spark, checkpoint_dir=f"{cfg.dataset.root}/_checkpoints")  # none when all is up to date
    dv = run_pipeline(spark, cfg, builtin=args.builtin, force=args.force)
    print(brief(read_manifest(dv), dv))
    return 0


def brief(m: Manifest, dv) -> str:
    """One line per published stage; `glisp report` prints everything."""
    lines = [f"dataset {m.graph}/{m.version} at {dv.path}"]
    for name, rec in sorted(m.stages.items(), key=lambda kv: kv[1].completed_at):  # in the order they ran
        secs = f"{rec.timings.get('total_s', 0):.1f} s"
        kind = StageName.parse(name).kind
        if kind == "ingest":
            what = f"|V| {rec.counts.get('vertices', 0):,}  |E| {rec.counts.get('edges', 0):,}"
        elif kind == "partition":
            mt = rec.metrics
            what = f"RF {mt['rf']:.3f}  VB {mt['vb']:.3f}  EB {mt['eb']:.3f}  rounds {rec.counts.get('rounds', '-')}"
        elif kind == "serialize":
            mt = rec.metrics
            what = (
                f"{rec.counts.get('parts')} partitions, structure {mt.get('structure_bytes_per_edge', 0):.2f} B/edge,"
                f" {mt.get('bytes_total', 0) / 2**20:.1f} MiB in all"
            )
        elif kind == "train":
            test = ", ".join(f"{k} {v:.4f}" for k, v in rec.metrics.items() if k.startswith("test_"))
            what = f"{rec.params.get('model', '')} on {rec.params.get('partition_run', '')}: {test or 'no test split'}"
        elif kind == "infer":
            what = f"{rec.counts.get('vertices', 0):,} vertices inferred"
        else:
            what = f"{rec.counts.get('vertices', 0):,} vertices ordered"
        lines.append(f"  {name:<28} {what}  ({secs})")
    lines.append(f"full report: glisp report {dv.path}")
    lines.append(f"serve it:    glisp serve-cluster {dv.path} --cluster-file cluster.json")
    return "\n".join(lines)


def _replace_edges(cfg: Config, edges):
    import dataclasses

    return dataclasses.replace(cfg.ingest, edges=edges)
