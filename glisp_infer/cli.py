"""``glisp infer DATASET --model TRAIN_RUN [--order pds] [--fanouts 15,10,5|full] [--store URL] [--edges FILE]
[--incremental]``."""

from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING

from glisp_core.config import Config, with_values
from glisp_core.dataset.layout import resolve_dataset
from glisp_core.errors import GlispError

if TYPE_CHECKING:
    from glisp_core.dataset.layout import DatasetVersion

TASK_MODULES = ("torch", "torch_geometric")  # what every inference task imports (the model: glisp_core.models)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dataset", help="graph, graph/version or a version directory")
    p.add_argument("--model", help="training run (train/<run>; infer.model, default the latest)")
    p.add_argument("--order", help="pds, ns, ds or ps (infer.order, default pds); a comma list runs each")
    p.add_argument("--fanouts", help="per hop, first hop first, e.g. 15,10,5; 'full' = every neighbour (default)")
    p.add_argument("--run", help="inference run name (infer.run; default <model>-<order>)")
    p.add_argument("--store", help="Zarr store: a local directory or an fsspec URL (infer.store; default in the stage)")
    p.add_argument("--edges", help="link task: Parquet/CSV edge list of original ids to score (infer.edges)")
    p.add_argument(
        "--incremental",
        action="store_true",
        default=None,
        help="recompute only rows whose input changed since the previous version's run (infer.incremental)",
    )
    p.add_argument("--force", action="store_true", help="recompute even if the published stage is current")


def parse_fanouts(text: str | None) -> list[int] | None:
    if text is None:
        return None
    if text.strip().lower() == "full":
        return []
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise GlispError(f"--fanouts: expected integers like 15,10,5 or 'full' (got {text!r})") from None


def main(args: argparse.Namespace, cfg: Config) -> int:
    from glisp_spark.session import lazy_spark, prestart
    from spark_jobs.serialize.reorder import check_order

    orders = [o.strip() for o in args.order.split(",")] if args.order else [cfg.infer.order]
    for o in orders:
        check_order(o)  # a bad name fails before Spark starts
    cfg = with_values(
        cfg,
        "infer",
        model=args.model,
        fanouts=parse_fanouts(args.fanouts),
        store=args.store,
        edges=args.edges,
        incremental=args.incremental,
    )
    dv = resolve_dataset(args.dataset, cfg.dataset.root)
    # none when up to date; every task loads the model, so its workers start with torch and PyG imported
    spark = lazy_spark(cfg.spark, checkpoint_dir=str(dv.root / "_checkpoints"), preload=TASK_MODULES)
    names = [_run_name(args.run or cfg.infer.run, o, len(orders)) for o in orders]
    if args.force or not _published(dv, list(zip(names, orders, strict=True)), cfg.infer.model):
        prestart(spark)  # work to do: the JVM starts while the next import loads torch and PyG

    from glisp_infer.job import run_infer

    for o, name in zip(orders, names, strict=True):
        t0 = time.time()
        rec = run_infer(spark, with_values(cfg, "infer", order=o, run=name or None), dv, force=args.force)
        if rec.completed_at < time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t0)):
            continue  # up to date: run_infer said so
        met = rec.metrics
        inc = rec.counts.get("incremental")
        if inc:
            print(f"{rec.name}: {inc['path']} ({inc.get('reason') or 'rows copied from ' + str(inc.get('previous'))})")
        print(
            f"{rec.name}: {rec.counts.get('vertices'):,} vertices x {rec.counts.get('layers')} layers at "
            f"{dv.path / rec.path}; chunk reads {met.get('chunk_reads'):,}, dynamic-cache hit ratio "
            f"{met.get('dynamic_hit_ratio')}, fill/model {met.get('fill_over_model')} "
            f"({rec.timings.get('total_s')} s)"
        )
        if "evaluation" in met:
            print(f"{rec.name}: {describe_scores(met['evaluation'])}")
    return 0


def _run_name(run: str | None, order: str, orders: int) -> str:
    """The run's name as given (``--run``, suffixed by the order when several run), "" for the default."""
    return (f"{run}-{order}" if orders > 1 else run) if run else ""


def _published(dv: DatasetVersion, runs: list[tuple[str, str]], model: str | None) -> bool:
    """Whether the version already holds a record of every run (name, else "", and order; named as the job
    names them), from its manifest alone: without one a run surely has work, and the session can start before
    the model is loaded; with one, whether it is current needs the model, and is decided later."""
    from glisp_core.dataset.manifest import read_manifest
    from glisp_infer.run_name import latest_train_run, run_name

    try:
        man = read_manifest(dv)
        model_run = model or latest_train_run(man)
    except GlispError:
        return True  # the run fails on its own, before any job: nothing to start
    return all(f"infer/{run_name(name, model_run, order)}" in man.stages for name, order in runs)


def describe_scores(ev: dict) -> str:
    """The scores line of ``glisp infer``: what was measured, on how many vertices or edges, at which fanouts."""
    if "skipped" in ev:
        return str(ev["skipped"])
    how = "full neighbourhoods" if ev.get("neighbourhoods") == "full" else f"sampled neighbourhoods {ev.get('fanouts')}"
    if "mrr" in ev:
        rank = "".join(f" {k} {ev[k]:.4f}" for k in ev if k.startswith(("recall@", "ndcg@")))
        users = f" over {ev['ranked_users']:,} sources" if "ranked_users" in ev else ""
        users += f" of type {ev['ranked_from']}" if "ranked_from" in ev else ""
        return f"test edges {ev['test_edges']:,}: mrr {ev['mrr']:.4f} auc {ev['auc']:.4f}{rank}{users} ({how})"
    parts = [f"accuracy on {ev['labelled']:,} labelled vertices {ev['acc']:.4f}"]
    parts += [f"{k} {ev[f'acc_{k}']:.4f}" for k in ("train", "val", "test") if f"acc_{k}" in ev]
    return ", ".join(parts) + f" (split from the {ev['split_from']}; {how})"
