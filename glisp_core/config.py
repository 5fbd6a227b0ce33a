"""Typed configuration: defaults <- conf/default.toml <- user file <- env GLISP_SECTION__KEY <- CLI.

Every section is a frozen dataclass; its field defaults are the single source of defaults, and
``conf/default.toml`` documents them key by key (a test keeps the two in step). Loading checks every
key and type and names the file, the key and the expected type on error. Jobs receive a ``Config``
explicitly; nothing reads configuration globally.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tomllib
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

from glisp_core.errors import ConfigError

T = TypeVar("T")

# ----------------------------------------------------------------------------------------------
# Sections
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class SparkConfig:
    """How the one SparkSession factory (glisp_spark.session) builds its session."""

    master: str = "local[*]"  # ignored when spark-submit already set spark.master
    app_name: str = "glisp"
    driver_memory: str = "4g"  # only effective when Python starts the JVM (not under spark-submit)
    shuffle_partitions: int = 0  # 0: 2 x default parallelism
    adaptive: bool = True
    checkpoint_dir: str = ""  # "": <dataset root>/_checkpoints
    ui: bool = False
    log_level: str = "WARN"
    conf: dict[str, str] = field(default_factory=dict)  # extra spark.* settings passed through
    max_executor_losses: int = (
        0  # lost executors before the jobs fail (0: max(3, 2 x peak); glisp_spark.executor_watch)
    )
    no_executor_timeout_s: float = 0.0  # a job waiting this long with no executor alive fails (0: waits)


@dataclass(frozen=True, kw_only=True)
class DatasetConfig:
    """Where datasets live and how the store is reached: the root, input fingerprints, retention, the store's timeouts."""

    root: str = "data"  # <root>/<graph>/<version>/
    checksum: Literal["content", "stat"] = "content"  # how input files are fingerprinted
    confine_to: str = ""  # when set, every path read or written must resolve inside it (glisp_core.dataset.paths)
    keep_versions: int = 0  # glisp pipeline keeps this many newest versions per graph; 0 = keep all
    # "check-then-write": publish on a store without a conditional create (docs/storage.md); "" = refuse there
    unsafe_publish: Literal["", "check-then-write"] = ""
    store_connect_timeout_s: float = 5.0  # per attempt, to open a connection to an object store
    store_timeout_s: float = 30.0  # per attempt, for the store to answer (between bytes)
    store_retries: int = 3  # attempts of one store call in all (glisp_core.storage.limits)


@dataclass(frozen=True, kw_only=True)
class EdgeSource:
    """One edge table: a file, a directory or a glob, CSV/TSV or Parquet."""

    path: str
    format: Literal["auto", "csv", "tsv", "parquet"] = "auto"
    header: bool = True
    delimiter: str = ""  # "": ',' for csv, '\t' for tsv
    comment: str = ""  # lines starting with this are skipped (e.g. "#")
    columns: list[str] = field(default_factory=list)  # names for a headerless CSV
    src: str = "src"
    dst: str = "dst"
    etype: str = ""  # column holding the edge type name
    edge_type: str = ""  # constant edge type for every row of this table
    src_type: str = ""  # vertex type of the source column, for heterogeneous graphs
    dst_type: str = ""
    weight: str = ""
    timestamp: str = ""


@dataclass(frozen=True, kw_only=True)
class VertexSource:
    """One vertex table; features come from an array column, fixed-width columns or a .npy file."""

    path: str
    format: Literal["auto", "csv", "tsv", "parquet"] = "auto"
    header: bool = True
    delimiter: str = ""
    comment: str = ""
    columns: list[str] = field(default_factory=list)
    id: str = "id"
    vtype: str = ""  # column holding the vertex type name
    vertex_type: str = ""  # constant vertex type for every row of this table
    label: str = ""
    split: str = ""  # values train/val/test (or 0/1/2)
    features: str = ""  # an array<number> column
    feature_columns: list[str] = field(default_factory=list)
    features_npy: str = ""  # a (n, d) .npy aligned row by row with features_npy_ids
    features_npy_ids: str = ""  # a .npy of ids, or "" for the table's own row order


@dataclass(frozen=True, kw_only=True)
class IngestConfig:
    """How ``glisp ingest`` turns the user's edge and vertex tables into a canonical dataset version."""

    graph: str = ""
    version: str = ""  # "": <UTC time>-<input fingerprint>
    directed: bool = True  # false: each edge is stored in both directions
    duplicates: Literal["keep", "merge", "drop"] = "keep"  # merge sums weights
    self_loops: Literal["keep", "drop"] = "keep"
    on_bad_input: Literal["fail", "quarantine"] = "fail"
    id_type: Literal["auto", "int", "string"] = "auto"
    label_missing: str = ""  # a label value that means "no label" (e.g. "0", "-1", "unknown"); nulls always do
    edge_types: list[str] = field(default_factory=list)  # allowed edge types; [] = any
    vertex_types: list[str] = field(default_factory=list)
    output_files: int = 0  # Parquet files per table; 0 = let Spark decide
    max_rank_map_vertices: int = 1 << 26  # integer ids: up to this many vertices map to vids without a join
    edges: list[EdgeSource] = field(default_factory=list)
    vertices: list[VertexSource] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class RmatConfig:
    """Graph500 R-MAT defaults."""

    scale: int = 16
    edge_factor: int = 16
    a: float = 0.57
    b: float = 0.19
    c: float = 0.19
    seed: int = 1
    noise: float = 0.1  # per-level jitter of a,b,c,d, as Graph500 does, to smooth the degree staircase
    permute: bool = True  # scramble vertex ids so that id says nothing about degree
    features: int = 0  # synthetic feature width, 0 = none
    classes: int = 0  # synthetic label classes, 0 = none
    splits: list[float] = field(default_factory=list)  # e.g. [0.6, 0.2, 0.2] train/val/test
    edge_types: int = 1
    weights: bool = False
    timestamps: bool = False
    files: int = 0  # output files; 0 = Spark's default parallelism


@dataclass(frozen=True, kw_only=True)
class AdaDNEConfig:
    """AdaDNE's adaptive expansion factor (reconstructed equations 5-7; see docs/partitioning.md)."""

    lambda_: float = 0.1  # base expansion factor (TOML key "lambda")
    form: Literal["linear", "exp"] = "linear"
    w_v: float = 0.5
    w_e: float = 0.5
    lambda_min: float = 0.01
    lambda_max: float = 0.2
    accel: float = 0.0  # lam_i *= (remaining/|E|)^-accel: fewer rounds as the remainder shrinks
    step: float = 0.3  # per round, growth may fill this fraction of the deficit to the fair share
    alt_step: float = 0.15  # the step of every second restart (0 = all use step): restarts try both speeds
    floor: float = 1.0  # two-hop intake probability at/above the fair share (1: no brake); speed-limit/seed floor
    capacity: float = 1.04  # hard bound: no partition holds more than capacity * |E|/p rows (EB <= capacity)
    finish: float = 0.05  # the last finish * |E| rows are placed by the finishing pass
    refine_rounds: int = 24  # relocation rounds after the expansion, at most (0 = none)
    refine_vb: float = 1.08  # relocation sheds replicas of partitions with |V_i| > refine_vb * mean
    refine_vb_max: float = 1.10  # no replica removal takes VB above max(refine_vb_max, VB before)
    refine_capacity: float = 1.05  # hard bound of relocation moves: refine_capacity * |E|/p rows (>= capacity)
    refine_edge_slack: float = 0.05  # balance moves may fill partitions to refine_capacity + this; a shedding
    # phase then brings every partition back under refine_capacity (the hard bound of the result)
    round_budget: int = 64  # rounds to finish in: behind this pace, a partition whose whole boundary fits its
    # speed limit expands all of it; at twice this many rounds the finishing pass places the rest (0 = off)
    starts: int = 4  # a graph of at most starts_max_edges rows is expanded and relocated from this many
    # first-seed sets, in the driver or as Spark jobs; the best is kept (AdaDNE.start_score)
    starts_max_edges: int = 8_000_000  # above this many rows: one start (each start costs a whole run)
    cluster_start: bool = True  # one more start (graphs the driver holds): dense clusters packed whole first
    cluster_fill: float = 0.9  # clustered start: whole clusters fill partitions to this share of rows and vertices


@dataclass(frozen=True, kw_only=True)
class DNEConfig:
    """DistributedNE's fixed expansion factor and edge threshold (the baseline AdaDNE adapts)."""

    lambda_: float = 0.1
    alpha: float = 1.01


@dataclass(frozen=True, kw_only=True)
class HDRFConfig:
    """HDRF's balance weight and streaming chunk (the streaming baseline; also the incremental refresh's score)."""

    lam: float = 1.0  # balance weight of HDRF's score
    epsilon: float = 1.0
    chunk_edges: int = 1_000_000


@dataclass(frozen=True, kw_only=True)
class PartitionConfig:
    """``glisp partition``: the algorithm, p, the run's name, and how the expansion runs (driver or sharded state, bounds)."""

    algorithm: str = "adadne"
    parts: int = 4
    seed: int = 1
    name: str = ""  # run name; "": <algorithm>-p<parts>
    max_rounds: int = 10_000
    local_finish_edges: int = 2_000_000  # finish a remainder this small in one process
    driver_finish_edges: int = 16_000_000  # the finishing pass runs in the driver on a remainder this small
    count_sample_max: int = 1_000_000  # most sample rows held by the driver (the stride grows past it)
    groups: int = 0  # expansion: row groups (Spark tasks per round); 0 = max(8, ceil(rows / 4M))
    state: Literal["driver", "sharded", "auto"] = "auto"  # expansion state: driver arrays or vertex-id-range shards
    state_auto_vertices: int = 50_000_000  # "auto": sharded from this many vertex ids
    state_auto_mb: int = 1600  # "auto": sharded once the driver mode's state would add this much driver memory
    shard_vertices: int = 4_000_000  # sharded: vertex ids per shard (S = ceil(|V| / this); rows in S(S+1)/2 cells)
    progress: bool = True
    metis_max_edges: int = 200_000_000  # metis: most undirected pairs one process partitions
    incremental: bool = False  # apply the edge changes since the base version to its partitioning
    incremental_base: str = ""  # base version; "": the graph's LATEST (or newest) with this run
    incremental_epsilon: float = 0.05  # hard edge capacity of a partition: (1 + eps) * |E| / p
    incremental_lam: float = 1.0  # balance weight of the placement score
    incremental_max_vb: float = 1.3  # above this VB the refresh re-partitions from scratch
    incremental_max_eb: float = 1.1  # above this EB the refresh re-partitions from scratch
    incremental_max_rf_growth: float = 1.1  # RF above this x RF of the last full run: re-partition; 0 = off
    incremental_batch_edges: int = 1_000_000  # Spark mode: added rows placed per streamed chunk, rows per match task
    incremental_local_edges: int = 8_000_000  # refresh in one process when edge sets and id maps are within this
    adadne: AdaDNEConfig = field(default_factory=AdaDNEConfig)
    dne: DNEConfig = field(default_factory=DNEConfig)
    hdrf: HDRFConfig = field(default_factory=HDRFConfig)


@dataclass(frozen=True, kw_only=True)
class SerializeConfig:
    """``glisp serialize``: which partition run, the Parquet copy, and which replica masters a vertex."""

    partition: str = ""  # partition run name; "": the latest partition run
    parquet_copy: bool = True
    master_rule: Literal["least_loaded", "hash"] = "least_loaded"


@dataclass(frozen=True, kw_only=True)
class ReorderConfig:
    """``glisp reorder``: the inference order (PDS, NS, DS, PS) and where its lookup arrays are built."""

    order: Literal["pds", "ns", "ds", "ps"] = "pds"
    # the lookup arrays of a graph this small are filled in the driver (32 B per vertex) instead of by two
    # shuffles, whose fixed costs dominate there
    index_in_driver_vertices: int = 65_536


@dataclass(frozen=True, kw_only=True)
class ServeConfig:
    """One sampling server: address, threads, request bounds, memory, replicas, reload, security, metrics."""

    host: str = "127.0.0.1"
    port: int = 0
    threads: int = 4
    max_batch: int = 1_000_000  # vertices per request
    max_message_mb: int = 256
    grace_s: float = 5.0  # SIGTERM drain time
    chunk: int = 4096  # tasks per kernel chunk; a larger batch is split across the threads
    # partition hashes "background" (after SERVING), "start" or "off"; sizes, version, CSR structure always
    verify: Literal["background", "start", "off"] = "background"
    cache_dir: str = "~/.cache/glisp/partitions"  # local copies of partitions served from an object store
    warmup: bool = True  # run each kernel once before reporting SERVING
    release_compiler_pages: bool = True  # after warm-up, unmap libLLVM's clean pages (~100 MiB of RSS)
    start_timeout_s: float = 120.0  # serve-cluster: how long to wait for every server to be healthy
    dense_id_map_mb: float = 256.0  # global->local ids by a dense int32 map when it fits; else a sorted lookup
    max_streams: int = 64  # open GatherStream calls (each holds a thread); beyond, clients use unary Gather
    metrics_port: int = -1  # Prometheus /metrics: -1 off, 0 a free port (reported by Stats), N that port
    follow_latest_s: float = 0.0  # > 0: poll the graph's latest and hot-reload when it moves
    replicas: int = 1  # serve-cluster: servers per partition
    max_fanout: int = 100_000  # one hop's / edge type's fanout; more is INVALID_ARGUMENT
    max_request_edges: int = 16_000_000  # seeds x sum of fanouts per Gather; more is RESOURCE_EXHAUSTED
    max_concurrent_rpcs: int = 256  # RPCs in progress (an open stream counts); more is RESOURCE_EXHAUSTED
    max_inflight_mb: int = 1024  # memory all requests in progress may hold together; beyond, they wait or are refused
    embedding_mb: int = 1024  # learnable node embedding tables held together (rows, Adagrad state, snapshot)
    drain_s: float = 1.0  # SIGTERM: NOT_SERVING but still answering this long, then drain for grace_s
    # security (glisp_serving.security): files, never secrets on the command line; "" = off
    tls_cert: str = ""  # PEM certificate chain: the server speaks TLS
    tls_key: str = ""  # PEM private key of tls_cert
    tls_client_ca: str = ""  # PEM CA: mutual TLS, clients must present a certificate it signed
    token_file: str = ""  # file holding the bearer token every Sampling RPC must carry ("": $GLISP_TOKEN, if set)
    health_port: int = -1  # plaintext port serving only grpc.health.v1 (probes that cannot speak TLS); -1 = none


@dataclass(frozen=True, kw_only=True)
class ClientConfig:
    """A sampling client (trainers, PyG scripts): deadlines, retries, prefetch, routing, security."""

    deadline_s: float = 30.0
    retries: int = 3
    prefetch: int = 2
    routing: Literal["replicas", "owner"] = "replicas"  # owner: each vertex only to its edge-cut owner
    backoff_s: float = 0.2  # first retry delay on UNAVAILABLE, doubled per retry
    routing_source: Literal["auto", "files", "servers"] = "auto"  # where the routing table comes from
    # "auto": features/labels of partitions served on this host are read from their files, not by RPC
    local_reads: Literal["auto", "never"] = "auto"
    gather_streams: bool = True  # Gather over one long-lived stream per server (half the CPU per request)
    # security (glisp_serving.security): files, never secrets on the command line; "" = off
    tls: bool = False  # TLS to the servers, trusting the system's CAs (implied by tls_ca or tls_cert)
    tls_ca: str = ""  # PEM CA that signed the servers' certificates
    tls_cert: str = ""  # PEM client certificate for mutual TLS
    tls_key: str = ""  # PEM private key of tls_cert
    tls_server_name: str = ""  # name the servers' certificates are checked against ("": the address's host)
    token_file: str = ""  # file holding the bearer token ("": $GLISP_TOKEN, if set)


@dataclass(frozen=True, kw_only=True)
class PipelineConfig:
    """``glisp pipeline``: the optional stages a refresh runs after reorder."""

    train: bool = False  # train train/<train.name> on every new version, through a local serve-cluster


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """``glisp train`` (glisp_train): the model, the optimisation, the loader and the feature cache."""

    task: Literal["node", "link"] = "node"
    model: str = "sage"  # "sage", "gcn", "gat", "rgcn" or a user's "package.module:factory" (glisp_core.models)
    name: str = ""  # training run name (stage train/<name>); "": <task>-<model>-<partition run>
    hidden: int = 256
    layers: int = 2
    fanouts: list[int] = field(default_factory=lambda: [10, 10])  # per hop, the seeds' hop first; one per layer
    type_fanouts: list[dict[str, int]] = field(default_factory=list)  # per hop per edge type; []: fanouts
    evaluation: Literal["full", "sampled"] = "full"  # validation/test: every neighbour, layerwise; or sampled trees
    eval_fanouts: list[int] = field(default_factory=list)  # sampled validation/test; []: fanouts
    eval_memory_mb: int = 4096  # a full evaluation estimated above this runs on sampled trees, saying why; 0 = no bound
    direction: Literal["in", "out"] = "in"  # "in": a vertex aggregates its in-neighbours (messages follow edges)
    batch_size: int = 1024
    epochs: int = 10
    lr: float = 0.003
    weight_decay: float = 0.0
    dropout: float = 0.5
    heads: int = 4  # gat attention heads
    patience: int = 0  # early stopping: epochs without a better validation score; 0 = off
    seed: int = 0
    split: list[float] = field(default_factory=lambda: [0.6, 0.2, 0.2])  # random split when the dataset has none
    link_val: float = 0.05  # link-split: held-out validation share of edges
    link_test: float = 0.1  # link-split: held-out test share of edges
    link_heldout: str = ""  # link-split: the user's held-out edges (src, dst, split val/test) instead of the shares
    negatives: int = 1  # link: uniform negative destinations per positive edge in training
    eval_negatives: int = 100  # link: uniform negatives each held-out edge is ranked against (MRR)
    rank_from: str = ""  # link test ranking: vertex type of the queries (e.g. "user"); "": see glisp_train.rank_test
    link_loss: Literal["bce", "bpr"] = "bce"  # link: binary cross-entropy, or BPR (each positive above its negatives)
    node_embeddings: int = 0  # learnable per-vertex rows of this width beside the features, held by the servers
    embedding_lr: float = 0.01  # their sparse Adagrad learning rate
    prefetch: int = 2  # batches sampled and fetched ahead while the current one computes; 0 = none
    feature_cache_mb: int = 256  # static cache of the hottest vertices' features; 0 = off
    cache_device: Literal["auto", "host"] = "auto"  # auto: on the GPU when training on one, else host memory
    max_batches: int = 0  # per epoch and rank; 0 = all (benchmarks and smoke runs cap it)
    threads: int = 0  # torch intra-op threads; 0 = torch's default
    eval_batch_size: int = 0  # 0 = batch_size


@dataclass(frozen=True, kw_only=True)
class InferConfig:
    """Layerwise inference (glisp_infer): what to infer with, the Zarr layout and the two-level cache."""

    model: str = ""  # training run (train/<run>); "": the latest published
    partition: str = ""  # partition run to infer over; "": the one the model was trained on (link-split: its full run)
    run: str = ""  # inference run name; "": <model>-<order>
    order: Literal["pds", "ns", "ds", "ps"] = "pds"  # local ids, streaming order and rows within a partition
    fanouts: list[int] = field(default_factory=list)  # per hop, first hop first (as training); [] or -1 = full
    seed: int = 0  # neighbour samples are a function of (seed, layer, vertex)
    direction: Literal["", "out", "in"] = ""  # "": the checkpoint's sampling direction, else "in"
    store: str = ""  # Zarr store: "" = inside the stage; else a local directory or an fsspec URL
    chunk_rows: int = 32768  # rows per Zarr chunk, each partition padded to whole ones (fewer rows when all are small)
    compressor: Literal["blosclz", "lz4", "lz4hc", "zstd", "zlib"] = "blosclz"  # Blosc codec of the arrays
    clevel: int = 9
    shuffle: Literal["noshuffle", "shuffle", "bitshuffle"] = "bitshuffle"
    intermediate_compressor: Literal["none", "same"] = "none"  # layers 0..K-1: raw ("none") or as the final layer
    batch_size: int = 256  # mastered vertices per slice call: the unit of chunk reads (see docs/inference.md)
    cache_chunk_rows: int = 64  # rows per chunk of the static cache (the dynamic cache's unit); 0 = chunk_rows
    cache_policy: Literal["fifo", "lru"] = "fifo"  # dynamic (memory) cache of static-cache chunks
    cache_admit_window: int = 1  # admit a miss only if one of the next N batches reads it; 0 = always, -1 = never
    cache_fraction: float = 0.05  # dynamic cache size as a fraction of the task's static-cache chunks
    cache_replays: bool = False  # replay each layer's chunk reads under FIFO/LRU at 1-20% of the chunks (metrics only)
    cache_chunks: int = 0  # dynamic cache size in chunks; 0 = cache_fraction
    scratch_dir: str = ""  # tasks' local files; "": memory when it has room, else the temp dir (glisp_infer.scratch)
    local_own_rows: bool = True  # keep a task's output rows on local disk as its next layer's own static rows
    project_first: bool = True  # narrowing mean SAGE layers: project every static row once (docs/inference.md)
    halo: bool = True  # push each layer's rows other partitions' next layer samples into per-pair files (else: decode Zarr chunks)
    device: Literal["auto", "cpu", "cuda"] = "auto"  # auto: CUDA when present
    threads: int = 0  # torch threads per task; 0 = cores / concurrent tasks
    edges: str = ""  # link task: edge list to score (Parquet or CSV of original ids); "": every edge
    edges_src: str = "src"  # its source id column
    edges_dst: str = "dst"  # its destination id column
    incremental: bool = (
        False  # stable samples; recompute only rows whose input changed since the previous version's run
    )
    incremental_max_share: float = 0.5  # compute a layer in full once more than this share of its work is affected


@dataclass(frozen=True, kw_only=True)
class Config:
    """The whole configuration: one section per stage or component, as ``conf/default.toml`` lays it out."""

    spark: SparkConfig = field(default_factory=SparkConfig)
    dataset: DatasetConfig = field(default_factory=DatasetConfig)
    ingest: IngestConfig = field(default_factory=IngestConfig)
    rmat: RmatConfig = field(default_factory=RmatConfig)
    partition: PartitionConfig = field(default_factory=PartitionConfig)
    serialize: SerializeConfig = field(default_factory=SerializeConfig)
    reorder: ReorderConfig = field(default_factory=ReorderConfig)
    serve: ServeConfig = field(default_factory=ServeConfig)
    client: ClientConfig = field(default_factory=ClientConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    infer: InferConfig = field(default_factory=InferConfig)
    pipeline: PipelineConfig = field(default_factory=PipelineConfig)


# ----------------------------------------------------------------------------------------------
# Loading
# ----------------------------------------------------------------------------------------------

DEFAULT_CONFIG_PATH = Path(__file__).resolve().parent.parent / "conf" / "default.toml"
ENV_PREFIX = "GLISP_"

# Expert tuning: keys a user running their graph does not need to set (the algorithms' internal constants, the
# memory and batching thresholds that choose a code path, retry and cache internals). One list, so the reference
# page, ``glisp config show`` (which hides them without ``--expert``) and ``explain`` agree.
EXPERT_SECTIONS = ("partition.adadne", "partition.dne", "partition.hdrf")
EXPERT_KEYS = frozenset(
    {
        *(f"partition.{k}" for k in ("max_rounds", "local_finish_edges", "driver_finish_edges")),
        *(f"partition.{k}" for k in ("count_sample_max", "groups", "state_auto_vertices", "state_auto_mb")),
        *(f"partition.{k}" for k in ("shard_vertices", "metis_max_edges", "incremental_epsilon", "incremental_lam")),
        *(f"partition.incremental_{k}" for k in ("max_vb", "max_eb", "max_rf_growth", "batch_edges", "local_edges")),
        "ingest.max_rank_map_vertices",
        "ingest.output_files",
        "reorder.index_in_driver_vertices",
        *(f"serve.{k}" for k in ("chunk", "dense_id_map_mb", "max_batch", "max_streams", "release_compiler_pages")),
        *(f"client.{k}" for k in ("backoff_s", "gather_streams", "local_reads", "routing_source")),
        *(f"infer.cache_{k}" for k in ("admit_window", "chunk_rows", "chunks", "fraction", "policy", "replays")),
        *(f"infer.{k}" for k in ("chunk_rows", "intermediate_compressor", "local_own_rows", "incremental_max_share")),
        "infer.project_first",
        "spark.adaptive",
        "dataset.unsafe_publish",
    }
)


def is_expert(key: str) -> bool:
    """Whether ``section.key`` is expert tuning (:data:`EXPERT_KEYS`, or a key of an :data:`EXPERT_SECTIONS`)."""
    return key in EXPERT_KEYS or key.rpartition(".")[0] in EXPERT_SECTIONS


def _toml_key(name: str) -> str:
    """Python field ``lambda_`` is TOML key ``lambda``."""
    return name[:-1] if name.endswith("_") else name


def _type_name(tp: Any) -> str:
    if isinstance(tp, type):
        return tp.__name__
    return str(tp).replace("typing.", "")


def _coerce(value: Any, tp: Any, source: str, key: str) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (types.UnionType, typing.Union):
        errors = []
        for arg in args:
            if arg is type(None) and value is None:
                return None
            try:
                return _coerce(value, arg, source, key)
            except ConfigError as e:
                errors.append(str(e))
        raise ConfigError(source, key, f"expected {_type_name(tp)} (got {value!r})")
    if origin is Literal:
        if value not in args:
            allowed = ", ".join(repr(a) for a in args)
            raise ConfigError(source, key, f"expected one of {allowed} (got {value!r})")
        return value
    if origin in (list, Sequence):
        if not isinstance(value, list):
            raise ConfigError(source, key, f"expected a list of {_type_name(args[0])} (got {value!r})")
        return [_coerce(v, args[0], source, f"{key}[{i}]") for i, v in enumerate(value)]
    if origin in (dict, Mapping):
        if not isinstance(value, dict):
            raise ConfigError(source, key, f"expected a table (got {value!r})")
        return {str(k): _coerce(v, args[1], source, f"{key}.{k}") for k, v in value.items()}
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):  # a type hint: the class, never an instance
        if isinstance(value, tp):
            return value
        if not isinstance(value, dict):
            raise ConfigError(source, key, f"expected a table (got {value!r})")
        return _build(tp, value, source, key)
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(source, key, f"expected a bool (got {value!r})")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(source, key, f"expected an int (got {value!r})")
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise ConfigError(source, key, f"expected a float (got {value!r})")
    if tp is str:
        if isinstance(value, str):
            return value
        raise ConfigError(source, key, f"expected a string (got {value!r})")
    return value


def _build(cls: type[T], data: Mapping[str, Any], source: str, prefix: str, base: T | None = None) -> T:
    """Build dataclass ``cls`` from ``data``, starting from ``base`` (or the defaults)."""
    hints = typing.get_type_hints(cls)
    by_key = {_toml_key(f.name): f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    updates: dict[str, Any] = {}
    for k, v in data.items():
        full = f"{prefix}.{k}" if prefix else k
        f = by_key.get(k)
        if f is None:
            known = ", ".join(sorted(by_key))
            raise ConfigError(source, full, f"unknown key (known keys here: {known})")
        tp = hints[f.name]
        current = getattr(base, f.name) if base is not None else None
        if isinstance(tp, type) and dataclasses.is_dataclass(tp) and isinstance(v, dict):
            updates[f.name] = _build(tp, v, source, full, current)
        else:
            updates[f.name] = _coerce(v, tp, source, full)
    if base is not None:
        return dataclasses.replace(base, **updates)  # type: ignore[type-var]
    missing = [
        _toml_key(f.name)
        for f in dataclasses.fields(cls)  # type: ignore[arg-type]
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING and f.name not in updates
    ]
    if missing:
        raise ConfigError(source, f"{prefix}.{missing[0]}" if prefix else missing[0], "required key is missing")
    return cls(**updates)


def _parse_scalar(text: str) -> Any:
    """Parse an env/CLI value as a TOML value; fall back to a bare string."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def _nest(dotted: str, value: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    node = out
    parts = dotted.split(".")
    for p in parts[:-1]:
        node = node.setdefault(p, {})
    node[parts[-1]] = value
    return out


def load_config(
    path: str | Path | None = None,
    overrides: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    base: Config | None = None,
) -> Config:
    """Load defaults, then ``path``, then ``GLISP_SECTION__KEY`` env vars, then ``section.key=value`` overrides."""
    cfg = base or Config()
    if DEFAULT_CONFIG_PATH.exists() and base is None:
        cfg = apply_file(cfg, DEFAULT_CONFIG_PATH)
    if path:
        cfg = apply_file(cfg, Path(path))
    env = os.environ if env is None else env
    for name, raw in sorted(env.items()):
        if not name.startswith(ENV_PREFIX) or "__" not in name:
            continue
        dotted = name[len(ENV_PREFIX) :].lower().replace("__", ".")
        cfg = _build(Config, _nest(dotted, _parse_scalar(raw)), f"environment {name}", "", cfg)
    for item in overrides:
        if "=" not in item:
            raise ConfigError("command line", item, "expected section.key=value")
        k, v = item.split("=", 1)
        cfg = _build(Config, _nest(k.strip(), _parse_scalar(v.strip())), "command line --set", "", cfg)
    return cfg


def apply_file(cfg: Config, path: Path) -> Config:
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(str(path), "-", "config file not found") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(str(path), "-", f"not valid TOML: {e}") from None
    return _build(Config, data, str(path), "", cfg)


def with_values(cfg: Config, section: str, **values: Any) -> Config:
    """Override fields of one section (CLI flags use this); ``None`` values are ignored."""
    values = {k: v for k, v in values.items() if v is not None}
    if not values:
        return cfg
    data = _nest(section, {_toml_key(k): v for k, v in values.items()}) if section else values
    return _build(Config, data, "command line", "", cfg)


def as_overrides(cfg: Config, *sections: str) -> list[str]:
    """``section.key=value`` items (``--set``) that give a child process these sections of ``cfg``.

    For sections of scalars and lists of scalars (serve, client, dataset); values are TOML literals.
    """
    out = []
    for name in sections:
        for key, value in to_dict(getattr(cfg, name)).items():
            if isinstance(value, dict) or (isinstance(value, list) and any(isinstance(v, dict) for v in value)):
                raise TypeError(f"as_overrides: {name}.{key} is a table; only scalars and lists of scalars")
            out.append(f"{name}.{key}={json.dumps(value)}")
    return out


def to_dict(obj: Any) -> Any:
    """Plain JSON-able dict of a section, with TOML key names; stages record this in the manifest."""
    if dataclasses.is_dataclass(obj):
        return {_toml_key(f.name): to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, list):
        return [to_dict(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_dict(v) for k, v in obj.items()}
    return obj
