"""``run_partition``: run one registered partitioner on a dataset version and publish its outputs.

Stage ``partition/<run>`` (run default ``<algorithm>-p<P>``) depends on ``ingest``; it is a no-op when
published with the same parameters and ingest, unless forced.
"""

from __future__ import annotations

import shutil
from typing import Any

from glisp_core.config import Config
from glisp_core.dataset.layout import DatasetVersion, check_name
from glisp_core.dataset.manifest import Manifest, StageRecord
from glisp_core.dataset.publish import StagePublisher
from spark_jobs.partition.base import Clock, PartitionContext, get_partitioner
from spark_jobs.partition.metrics import write_outputs


def run_name(cfg: Config) -> str:
    """``partition.name``, else ``<algorithm>-p<parts>``, with ``-s<seed>`` when the seed is not the default 1.

    Runs with different seeds are different partitionings, so by default they never share a name (and a
    directory) that one could overwrite under the other's manifest record.
    """
    pc = cfg.partition
    return check_name(
        "partition run", pc.name or f"{pc.algorithm}-p{pc.parts}" + (f"-s{pc.seed}" if pc.seed != 1 else "")
    )


def run_partition(spark: Any, cfg: Config, dv: DatasetVersion, force: bool = False) -> StageRecord:
    """Partition ``dv``'s edges with ``cfg.partition``; returns the published StageRecord."""
    pcfg = cfg.partition
    algo = get_partitioner(pcfg)
    run = run_name(cfg)
    params = {"algorithm": algo.name, "parts": pcfg.parts, "seed": pcfg.seed, **algo.params()}
    pub = StagePublisher(dv, f"partition/{run}", dv.partition(run), params, depends=["ingest"])
    if pub.is_current() and not force:
        rec = pub.record()
        assert rec is not None
        if pcfg.progress:
            print(f"partition/{run}: up to date (use --force to recompute)", flush=True)
        return rec
    schema = Manifest.read(dv.manifest_path).schema
    n, m = int(schema["num_vertices"]), int(schema["num_edges"])
    clock = Clock()
    with pub:
        edges = spark.read.parquet(str(dv.edges)).select("eid", "src", "dst")
        staging = pub.tmp / "_staging"
        ctx = PartitionContext(spark=spark, edges=edges, num_vertices=n, num_edges=m, cfg=pcfg, staging=staging)
        if not pcfg.progress:
            ctx.log = lambda s: None
        with clock.section("partition_s"):
            result = algo.partition(ctx)
        with clock.section("write_s"):
            counts, metrics = write_outputs(
                spark, result.alloc, pub.tmp, pcfg.parts, m, result.replica_bits, result.edges_per_part
            )
        shutil.rmtree(staging, ignore_errors=True)
        if result.rounds is not None:
            counts["rounds"] = result.rounds
        counts.update(result.counts)
        timings = {**clock.t, **result.timings}
        rec = pub.commit(counts=counts, metrics=metrics, timings=timings)
    if pcfg.progress:
        print(
            f"partition/{run}: RF {metrics['rf']:.3f} VB {metrics['vb']:.3f} EB {metrics['eb']:.3f} "
            f"interior {metrics['interior_fraction']:.3f} in {rec.timings['total_s']:.1f}s",
            flush=True,
        )
    return rec
