"""``run_ingest``: configured edge/vertex tables -> a new dataset version, published atomically.

Phases (each under its own Spark job group; ``timing.Phases`` records wall seconds and job counts in the
manifest timings, see docs/architecture.md "Ingest phases"; each phase is a function of ``phases/``):

  fingerprint   hash the inputs (driver) and look for an identical published version;
  read_check    read every table, row rules as Spark column expressions, ONE scan per table that
                counts rows per (file, reason, column), collects the integer key sets and stages the
                good edge rows as Arrow files; fail or quarantine;
  (decide)      between phases, from those counts: id type, feature width, label names, edge types;
  vertex_checks second-phase vertex rules (feature width, duplicate ids), when there are vertex tables;
  idmap         vertex types and codes, dense vids: a rank map over integer ids (no join) or a sorted
                dictionary; the idmap/vertices/features tables;
  map           endpoints -> vids (numpy tasks with the broadcast rank map, or two joins for string
                ids), missing endpoints, self-loops, split by source-vid range;
  sort, write   per vid range: sort, duplicate policy, dense eids, Parquet, degree counts;
  stats         degree histograms and power-law fit from the per-range degree counts;
  manifest      counts, schema and timings.

No per-row Python loop, no collect of rows: only counts and per-vertex key sets reach the driver.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from glisp_core.config import Config, IngestConfig, to_dict
from glisp_core.dataset.layout import DatasetVersion, check_name, list_versions
from glisp_core.dataset.manifest import Manifest, StageRecord, now_iso, read_manifest
from glisp_core.dataset.paths import confine, confine_all
from glisp_core.dataset.publish import (
    RUNNING,
    VersionPublisher,
    claim_run,
    file_fingerprints,
    fingerprint,
    release_claim,
    up_to_date,
)
from glisp_core.storage.lease import LeaseKeeper
from glisp_core.storage.store import store_for
from glisp_core.storage.uri import StoreURI, parse_uri
from glisp_spark.background import Background
from glisp_spark.phases import Phases
from glisp_spark.session import size_shuffles
from spark_jobs.ingest.edgefiles import DegreeFreq
from spark_jobs.ingest.phases.context import IngestContext
from spark_jobs.ingest.phases.decide import decide_types
from spark_jobs.ingest.phases.idmap import assign_vids
from spark_jobs.ingest.phases.map_edges import edge_plan, map_edges
from spark_jobs.ingest.phases.read_check import read_check
from spark_jobs.ingest.phases.vertex_checks import vertex_checks
from spark_jobs.ingest.phases.write_edges import write_edges
from spark_jobs.ingest.plan import IngestPlan, ids_native_long
from spark_jobs.ingest.stats import degree_metrics, label_counts, merge_frequencies

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

FORMAT_TAG = "glisp-ingest-2"  # bump when the output of the same input and params changes


@dataclass(frozen=True)
class Built:
    """What the build phases found, for the manifest."""

    n_vertices: int
    n_edges: int
    edge_rows_in: int
    id_type: str
    id_map: str  # "rank" (broadcast rank map) or "join" (sorted dictionary + joins)
    vertex_types: list[str]
    edge_types: list[str]
    per_vtype: dict[str, int]
    per_etype: dict[str, int]
    feature_dim: int
    label_names: list[str] | None
    maxlab: int | None
    nfeat: int
    has_w: bool
    has_ts: bool
    rejects: dict[str, int]
    loops: int
    loops_dropped: int
    dups_removed: int
    doubled: int
    freq: list[DegreeFreq]


def _find_existing(root: StoreURI, graph: str, fp: str, version: str) -> DatasetVersion | None:
    """The published version of ``graph`` whose ingest has fingerprint ``fp`` (only ``version`` if given)."""
    candidates = [version] if version else list(reversed(list_versions(root, graph)))
    for v in candidates:
        dv = DatasetVersion(root, graph, v)
        try:
            rec = read_manifest(dv).stages.get("ingest")
        except Exception:  # noqa: BLE001 - an unreadable manifest is simply not a match
            continue
        if rec is not None and rec.fingerprint == fp and dv.store.exists(dv.ingest):
            return dv
    return None


def ingest_fingerprint(ing: IngestConfig, inputs: list[dict[str, Any]]) -> str:
    """The inputs and the parameters that change the output (not the version name or a size limit)."""
    params = {k: v for k, v in to_dict(ing).items() if k not in ("version", "max_rank_map_vertices")}
    return fingerprint(FORMAT_TAG, params, inputs)


def run_ingest(
    spark: SparkSession,
    cfg: Config,
    ingest: IngestConfig | None = None,
    force: bool = False,
    log: Callable[[str], None] = print,
) -> DatasetVersion:
    """Ingest ``ingest`` (default ``cfg.ingest``) into a new version under ``cfg.dataset.root``."""
    ing = ingest or cfg.ingest
    t0 = time.perf_counter()
    ph = Phases(spark, "ingest")
    with ph("fingerprint"):
        plan = IngestPlan(ing)
        root = parse_uri(cfg.dataset.root)
        confine(str(root), cfg.dataset.confine_to, "dataset.root")
        store_for(root).check()  # no credentials, no bucket, no endpoint: said now, before any Spark job
        confine_all([str(u) for u in plan.all_input_paths()], cfg.dataset.confine_to, "ingest table or feature file")
        inputs = file_fingerprints(plan.all_input_paths(), cfg.dataset.checksum)
        fp = ingest_fingerprint(ing, inputs)
        existing = _find_existing(root, ing.graph, fp, ing.version)
    if existing is not None and not force:
        log(up_to_date("ingest", existing.path))
        return existing
    found, claim = _claim(root, ing, fp, force, log)
    if found is not None:
        return found
    try:
        return _publish(spark, cfg, ing, _Run(plan, ph, root, fp, inputs, existing, t0), log)
    finally:
        if claim is not None:
            release_claim(claim)


@dataclass(frozen=True)
class _Run:
    """What run_ingest found before building: the plan, the timer, where, the fingerprints, a version to rebuild."""

    plan: IngestPlan
    ph: Phases
    root: StoreURI
    fp: str
    inputs: list[dict[str, Any]]
    existing: DatasetVersion | None  # the version that holds these inputs (rebuilt in place with --force)
    t0: float


def _claim(
    root: StoreURI, ing: IngestConfig, fp: str, force: bool, log: Callable[[str], None]
) -> tuple[DatasetVersion | None, LeaseKeeper | None]:
    """(the version an identical ingest published while this one waited, else None; the claim held).
    Why: two identical ingests at once would both do all the work and publish two versions of one input."""
    uri = root / ing.graph / RUNNING / f"ingest-{fp[:24]}.json"

    def published() -> bool:
        return not force and _find_existing(root, ing.graph, fp, ing.version) is not None

    run, claim = claim_run(store_for(root), uri, f"glisp ingest of {ing.graph}", fp, published)
    if run:
        return None, claim
    found = _find_existing(root, ing.graph, fp, ing.version)
    assert found is not None
    log(up_to_date("ingest", found.path))
    return found, None


def _publish(
    spark: SparkSession, cfg: Config, ing: IngestConfig, r: _Run, log: Callable[[str], None]
) -> DatasetVersion:
    """Build the tables of a new version (or of ``r.existing``, rebuilt in place) and publish it."""
    plan, ph, root, fp, inputs, existing, t0 = r.plan, r.ph, r.root, r.fp, r.inputs, r.existing, r.t0
    # --force rebuilds the version that holds these inputs in place instead of adding a duplicate
    version = ing.version or (
        existing.version if existing else f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{fp[:8]}"
    )
    check_name("version", version)
    spark.sparkContext  # noqa: B018 - start a lazy session here: the phases' background threads inherit its context
    with VersionPublisher(root, ing.graph, version) as pub:
        ctx = IngestContext(
            spark,
            plan,
            pub.tmp_dv,
            pub.tmp_dv.ingest / "_staging",
            ph,
            log,
            ids_native_long(plan),
            cfg.spark,
        )
        try:
            built = _build_tables(ctx)
        finally:
            ctx.cleanup()
        with ph("stats"):
            metrics = degree_metrics(merge_frequencies(built.freq), built.n_vertices, built.n_edges)
            labels = label_counts(spark, pub.tmp_dv.vertices)
        with ph("manifest"):
            manifest = _manifest(ing, pub.tmp_dv, built, metrics)
            manifest.stages["ingest"].counts.update(labels)
            manifest.inputs = inputs
            manifest.stages["ingest"].fingerprint = fp
        manifest.stages["ingest"].timings.update(_totals(ph, built, t0))
        t = manifest.stages["ingest"].timings
        log(
            f"ingest: |V|={built.n_vertices:,} |E|={built.n_edges:,} from {built.edge_rows_in:,} edge rows in "
            f"{t['total_s']:.1f}s ({t['edges_per_s']:,.0f} edges/s)"
        )
        if labels["labelled_vertices"]:
            log(
                f"ingest: {labels['labelled_vertices']:,} labelled vertices (split train "
                f"{labels['labelled_train']:,}, val {labels['labelled_val']:,}, test {labels['labelled_test']:,})"
            )
        return pub.commit(manifest)


def _build_tables(ctx: IngestContext) -> Built:
    """The phases from read_check to sort/write, in order, each under its own job group."""
    ph = ctx.ph
    with ph("read_check"):  # the vertex tables are read while the edge job runs
        edges, vertices = read_check(ctx)
    size_shuffles(ctx.spark, ctx.spark_conf, edges.rows_in)  # the id dictionary and the edge map shuffle every row
    types = decide_types(ctx, edges, vertices)
    checked = None
    if vertices is not None:
        with ph("vertex_checks"):
            checked = vertex_checks(ctx, vertices, types)
    with ph("idmap"):
        ids = assign_vids(ctx, edges, checked, types)
    eplan = edge_plan(ctx, types, ids, edges.rows_in)
    with ph("map"):  # with the rank map, the vertex-side tables are written meanwhile
        try:
            mapped = map_edges(ctx, edges, ids, eplan, types)
        finally:
            if isinstance(ids.tables, Background):
                ids.tables.wait()
        vcounts = ids.tables.result() if isinstance(ids.tables, Background) else ids.tables
    written = write_edges(ctx, eplan, mapped, types.edge_types)
    return Built(
        n_vertices=ids.n_vertices,
        n_edges=written.n_edges,
        edge_rows_in=edges.rows_in,
        id_type=types.id_type,
        id_map=ids.id_map,
        vertex_types=ids.vertex_types,
        edge_types=types.edge_types,
        per_vtype=vcounts.per_vtype,
        per_etype=written.per_etype,
        feature_dim=types.feature_dim,
        label_names=types.label_names,
        maxlab=vcounts.maxlab,
        nfeat=vcounts.nfeat,
        has_w=ctx.plan.weighted,
        has_ts=ctx.plan.timestamped,
        rejects={**edges.rejects, **(checked.rejects if checked else {}), **mapped.rejects},
        loops=mapped.loops,
        loops_dropped=written.loops_dropped,
        dups_removed=written.dups_removed,
        doubled=written.doubled,
        freq=written.freq,
    )


def _totals(ph: Phases, built: Built, t0: float) -> dict[str, float]:
    """The phases' timings plus the run's total seconds, total Spark jobs and input edge rows per second."""
    out = ph.timings()
    total = time.perf_counter() - t0
    out["total_s"] = round(total, 3)
    out["total_jobs"] = sum(v for k, v in out.items() if k.endswith("_jobs"))
    out["edges_per_s"] = round(built.edge_rows_in / max(total, 1e-9), 1)
    return out


def _manifest(ing: IngestConfig, out: DatasetVersion, b: Built, metrics: dict[str, Any]) -> Manifest:
    """The version's manifest: counts, schema and metrics; the caller adds inputs, fingerprint and timings."""
    counts = {
        "vertices": b.n_vertices,
        "edges": b.n_edges,
        "input_edge_rows": b.edge_rows_in,
        "vertices_per_type": b.per_vtype,
        "edges_per_type": b.per_etype,
        "rejects": b.rejects,
        "rejected_rows": sum(b.rejects.values()),
        "self_loops": b.loops,
        "self_loops_dropped": b.loops_dropped,
        "duplicates_removed": b.dups_removed,
        "reverse_edges_added": b.doubled,
        "vertices_with_features": b.nfeat,
        "id_map": b.id_map,
    }
    schema: dict[str, Any] = {
        "directed": ing.directed,
        "num_vertices": b.n_vertices,
        "num_edges": b.n_edges,
        "vertex_types": b.vertex_types,
        "edge_types": b.edge_types,
        "weighted": b.has_w,
        "timestamped": b.has_ts,
        "feature_dim": b.feature_dim,
        "num_classes": int(b.maxlab) + 1 if b.maxlab is not None else 0,
        "id_type": b.id_type,
    }
    if b.label_names is not None:
        schema["label_names"] = b.label_names
    rec = StageRecord(
        name="ingest",
        path="ingest",
        fingerprint="",
        params=to_dict(ing),
        counts=counts,
        metrics=metrics,
        timings={},
        completed_at=now_iso(),
    )
    return Manifest(graph=ing.graph, version=out.version, created_at=now_iso(), schema=schema, stages={"ingest": rec})
