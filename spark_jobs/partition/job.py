"""``run_partition``: run one partitioner of the registry on a dataset version and publish its outputs.

Stage ``partition/<run>`` (run default ``<algorithm>-p<P>``) depends on ``ingest``; it is a no-op when
published with the same parameters and ingest, unless forced.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from glisp_core.config import Config
from glisp_core.dataset.layout import DatasetVersion, check_name
from glisp_core.dataset.manifest import StageRecord, read_manifest
from glisp_core.dataset.publish import StagePublisher, up_to_date
from glisp_core.dataset.versions import VersionLease
from glisp_core.storage.uri import StoreURI
from glisp_spark.phases import Phases
from glisp_spark.session import size_shuffles
from glisp_spark.tables import read_parquet
from spark_jobs.partition import incremental
from spark_jobs.partition.base import PartitionContext
from spark_jobs.partition.metrics import write_outputs
from spark_jobs.partition.registry import get_partitioner

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def run_name(cfg: Config) -> str:
    """``partition.name``, else ``<algorithm>-p<parts>``, with ``-s<seed>`` when the seed is not the default 1.

    Runs with different seeds are different partitionings, so by default they never share a name (and a
    directory) that one could overwrite under the other's manifest record.
    """
    pc = cfg.partition
    return check_name(
        "partition run", pc.name or f"{pc.algorithm}-p{pc.parts}" + (f"-s{pc.seed}" if pc.seed != 1 else "")
    )


def run_partition(spark: SparkSession, cfg: Config, dv: DatasetVersion, force: bool = False) -> StageRecord:
    """Partition ``dv``'s edges with ``cfg.partition``; returns the published StageRecord."""
    pcfg = cfg.partition
    algo = get_partitioner(pcfg)
    run = run_name(cfg)
    params = {"algorithm": algo.name, "parts": pcfg.parts, "seed": pcfg.seed, **algo.params()}
    base = incremental.find_base(cfg, dv, run) if pcfg.incremental else None
    if base is not None:  # the record names the base it derives from; a new base is a new fingerprint
        params["incremental"] = incremental.incremental_params(cfg, *base)
    pub = StagePublisher(dv, f"partition/{run}", params, depends=["ingest"])
    if not force and (pub.is_current() or not pub.claim()):
        rec = pub.record()
        assert rec is not None
        print(up_to_date(f"partition/{run}"), flush=True)  # a result line: printed with progress off too
        return rec
    schema = read_manifest(dv).schema
    n, m = int(schema["num_vertices"]), int(schema["num_edges"])
    size_shuffles(spark, cfg.spark, m)
    clock = Phases(spark, "partition")
    with pub:
        edges = read_parquet(spark, dv.edges).select("eid", "src", "dst")
        staging = pub.tmp / "_staging"  # tasks and the driver hand files over here, in the store
        ctx = PartitionContext(
            spark=spark, edges=edges, num_vertices=n, num_edges=m, cfg=pcfg, staging=staging, source=dv.edges
        )
        if not pcfg.progress:
            ctx.log = lambda s: None
        inc = None
        if pcfg.incremental:
            inc = _try_refresh(ctx, dv, base, run, pub.tmp, clock)
        if inc is not None and not inc.fallback:
            counts, metrics, result = inc.counts, inc.metrics, None
        else:
            with clock("partition"):
                result = algo.partition(ctx)
            with clock("write"):
                counts, metrics = write_outputs(
                    spark, result.alloc, pub.tmp, pcfg.parts, m, result.replica_bits, result.edges_per_part
                )
        dv.store.delete(staging)
        if result is not None:
            if result.rounds is not None:
                counts["rounds"] = result.rounds
            counts.update(result.counts)
        if inc is not None:
            counts["incremental"] = inc.info
        timings = {**clock.timings(), **(result.timings if result is not None else {})}
        rec = pub.commit(counts=counts, metrics=metrics, timings=timings)
    if pcfg.progress and inc is not None:
        print(f"partition/{run}: {inc.info['path']} path ({inc.info['reason']})", flush=True)
    print(  # the result line, whatever partition.progress says (it hides progress only)
        f"partition/{run}: RF {metrics['rf']:.3f} VB {metrics['vb']:.3f} EB {metrics['eb']:.3f} "
        f"interior {metrics['interior_fraction']:.3f} in {rec.timings['total_s']:.1f}s",
        flush=True,
    )
    return rec


def _try_refresh(
    ctx: PartitionContext,
    dv: DatasetVersion,
    base: tuple[DatasetVersion, StageRecord] | None,
    run: str,
    out: StoreURI,
    clock: Phases,
) -> incremental.Refresh:
    """The incremental path (``partition.incremental``); ``fallback`` set when a full run must follow."""
    if base is None:
        info = {"path": "full", "reason": "no earlier version holds a published run of this algorithm and p"}
        return incremental.Refresh({}, {}, info, info["reason"])
    with clock("incremental"), VersionLease(base[0], f"incremental refresh of {dv.graph}/{dv.version}"):
        inc = incremental.refresh(ctx, dv, base[0], base[1], run, out)
    if inc.fallback:
        for d in ("assignment", "replicas"):
            dv.store.delete(out / d)
        inc.info["incremental_metrics"] = inc.metrics
        ctx.log(f"partition/{run}: incremental result rejected ({inc.fallback}); re-partitioning from scratch")
    inc.info.update(path="full" if inc.fallback else "incremental", reason=inc.fallback or "within the drift bounds")
    return inc
