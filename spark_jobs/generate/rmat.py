"""R-MAT / Kronecker power-law graphs (Graph500 defaults) generated entirely in Spark column expressions.

Why this shape:
- Every random draw is ``xxhash64(edge index, seed, stream)``, not ``rand()``: output depends only on the
  seed and the parameters, never on the number of partitions or files, and nothing is collected.
- One 64-bit hash gives two 32-bit uniforms, compared with integer thresholds, so a scale-S graph
  costs ceil(S/2) hashes per edge for the quadrant choices.
- Noise is the NSKG scheme (Seshadhri, Pinar, Kolda 2013): per level l a constant mu_l ~ U[-noise, noise]
  shifts b and c by +mu_l and a, d by -2 mu_l a/(a+d), -2 mu_l d/(a+d). It keeps the sum at 1 and
  smooths the "staircase" degree distribution of plain R-MAT.
- Vertex ids are scrambled with a keyed (unbalanced) Feistel network over exactly ``scale`` bits, a
  bijection on [0, 2^scale) computed per row, so high degree says nothing about the id.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from glisp_core.config import RmatConfig, to_dict
from glisp_core.errors import ConfigError
from glisp_core.storage.store import store_for
from glisp_core.storage.uri import StoreURI, parse_uri, qualify
from glisp_spark.session import default_parallelism
from glisp_spark.tables import write_files

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

U32 = 1 << 32
MASK32 = U32 - 1
FEISTEL_ROUNDS = 4
TS_BASE = 1_577_836_800  # 2020-01-01T00:00:00Z; synthetic timestamps span one year from here
TS_SPAN = 365 * 86_400
SPLIT_NAMES = ("train", "val", "test")

# hash stream ids, so that different uses of the same row never share random bits
_S_LEVEL = 1_000
_S_PERM = 2_000
_S_ETYPE = 3_000
_S_WEIGHT = 3_001
_S_TS = 3_002
_S_LABEL = 4_000
_S_SPLIT = 4_001
_S_FEAT = 5_000


def check_config(cfg: RmatConfig) -> None:
    """Reject parameters that would not give a valid R-MAT graph, naming the key."""
    src = "config section [rmat]"
    if not 1 <= cfg.scale <= 40:
        raise ConfigError(src, "rmat.scale", f"expected an int in 1..40 (got {cfg.scale})")
    if cfg.edge_factor < 1:
        raise ConfigError(src, "rmat.edge_factor", f"expected an int >= 1 (got {cfg.edge_factor})")
    d = 1.0 - cfg.a - cfg.b - cfg.c
    if min(cfg.a, cfg.b, cfg.c) <= 0 or d < -1e-12:
        raise ConfigError(
            src, "rmat.a/b/c", f"expected a, b, c > 0 with a + b + c <= 1 (got {cfg.a}, {cfg.b}, {cfg.c})"
        )
    limit = min(cfg.b, cfg.c, (cfg.a + max(d, 0.0)) / 2)
    if not 0 <= cfg.noise <= limit:
        raise ConfigError(
            src, "rmat.noise", f"expected 0 <= noise <= min(b, c, (a+d)/2) = {limit:.4g} (got {cfg.noise})"
        )
    for key in ("features", "classes", "files", "seed"):
        if getattr(cfg, key) < 0:
            raise ConfigError(src, f"rmat.{key}", f"expected an int >= 0 (got {getattr(cfg, key)})")
    if cfg.edge_types < 1:
        raise ConfigError(src, "rmat.edge_types", f"expected an int >= 1 (got {cfg.edge_types})")
    if cfg.splits:
        if len(cfg.splits) != 3 or min(cfg.splits) < 0 or sum(cfg.splits) > 1 + 1e-9:
            raise ConfigError(
                src,
                "rmat.splits",
                f"expected 3 fractions train, val, test, each >= 0, summing to <= 1 (got {cfg.splits})",
            )


def level_probabilities(cfg: RmatConfig) -> np.ndarray:
    """(scale, 4) quadrant probabilities a, b, c, d per level after NSKG noise (deterministic in the seed)."""
    a, b, c = cfg.a, cfg.b, cfg.c
    d = max(1.0 - a - b - c, 0.0)
    mu = np.random.default_rng([cfg.seed, 0x524D4154]).uniform(-cfg.noise, cfg.noise, cfg.scale)
    ad = a + d
    p = np.stack([a - 2 * mu * a / ad, b + mu, c + mu, d - 2 * mu * d / ad], axis=1)
    p = np.clip(p, 0.0, None)
    return p / p.sum(axis=1, keepdims=True)


def _h(col: Column, seed: int, stream: int) -> Column:
    """A 64-bit hash of (col, seed, stream): the one source of randomness."""
    from pyspark.sql import functions as F

    return F.xxhash64(col, F.lit(int(seed)).cast("long"), F.lit(int(stream)).cast("long"))


def _u32(h: Column, half: int) -> Column:
    """Uniform integer in [0, 2^32) from the high (half=0) or low (half=1) 32 bits of a hash."""
    from pyspark.sql import functions as F

    return F.shiftrightunsigned(h, 32) if half == 0 else h.bitwiseAND(F.lit(MASK32).cast("long"))


def _unit(h: Column, half: int) -> Column:
    """Uniform double in (0, 1]."""
    return (_u32(h, half).cast("double") + 1.0) / float(U32)


def _permute(df: DataFrame, name: str, bits: int, seed: int) -> DataFrame:
    """Replace column ``name`` (values in [0, 2^bits)) by a keyed Feistel permutation of it.

    Each round maps (L | R) with |R| = nr bits to (R | L xor F(R)), a bijection on ``bits`` bits even
    when the halves differ in size, so the composition is a bijection on [0, 2^bits).
    """
    from pyspark.sql import functions as F

    nr = bits // 2
    for r in range(FEISTEL_ROUNDS):
        nl = bits - nr
        x = F.col(name)
        left = F.shiftright(x, nr)
        right = x.bitwiseAND(F.lit((1 << nr) - 1).cast("long"))
        df = df.withColumn(f"_{name}_r", right).withColumn(f"_{name}_l", left)
        rr, ll = F.col(f"_{name}_r"), F.col(f"_{name}_l")
        f = _h(rr, seed, _S_PERM + r).bitwiseAND(F.lit((1 << nl) - 1).cast("long"))
        df = df.withColumn(name, F.shiftleft(rr, nl).bitwiseOR(ll.bitwiseXOR(f))).drop(f"_{name}_r", f"_{name}_l")
        nr = nl
    return df


def edges_frame(spark: SparkSession, cfg: RmatConfig, num_partitions: int) -> DataFrame:
    """The edge table as a lazy DataFrame: src, dst (long) [, etype string, weight float, ts long]."""
    from pyspark.sql import functions as F

    s, m = cfg.scale, cfg.edge_factor << cfg.scale
    p = level_probabilities(cfg)
    cum = np.cumsum(p, axis=1)
    df = spark.range(0, m, 1, num_partitions)
    hcols = [_h(F.col("id"), cfg.seed, _S_LEVEL + k).alias(f"_h{k}") for k in range((s + 1) // 2)]
    df = df.select("id", *hcols)
    src_bits, dst_bits = [], []
    for level in range(s):
        u = _u32(F.col(f"_h{level // 2}"), level % 2)
        t_a, t_ab, t_abc = (int(round(float(cum[level, q]) * U32)) for q in range(3))
        down = u >= F.lit(t_ab)
        right = ((u >= F.lit(t_a)) & (u < F.lit(t_ab))) | (u >= F.lit(t_abc))
        src_bits.append(F.shiftleft(down.cast("long"), level))
        dst_bits.append(F.shiftleft(right.cast("long"), level))
    src, dst = src_bits[0], dst_bits[0]
    for sb, db in zip(src_bits[1:], dst_bits[1:], strict=True):
        src, dst = src.bitwiseOR(sb), dst.bitwiseOR(db)
    df = df.select("id", src.alias("src"), dst.alias("dst"))
    if cfg.permute:
        df = _permute(df, "src", s, cfg.seed)
        df = _permute(df, "dst", s, cfg.seed)
    cols = [F.col("src"), F.col("dst")]
    if cfg.edge_types > 1:
        t = F.pmod(_h(F.col("id"), cfg.seed, _S_ETYPE), F.lit(cfg.edge_types).cast("long"))
        cols.append(F.concat(F.lit("t"), t.cast("string")).alias("etype"))
    if cfg.weights:
        cols.append(_unit(_h(F.col("id"), cfg.seed, _S_WEIGHT), 0).cast("float").alias("weight"))
    if cfg.timestamps:
        ts = F.lit(TS_BASE).cast("long") + F.pmod(_h(F.col("id"), cfg.seed, _S_TS), F.lit(TS_SPAN).cast("long"))
        cols.append(ts.alias("ts"))
    return df.select(*cols)


def has_vertex_table(cfg: RmatConfig) -> bool:
    return cfg.features > 0 or cfg.classes > 0 or bool(cfg.splits)


def vertices_frame(spark: SparkSession, cfg: RmatConfig, num_partitions: int, fmt: str) -> DataFrame:
    """id [, label, split, features]. Features are label-dependent so that a GNN has something to learn:
    f_j = u_j - 0.5 (+1 when j mod classes == label). CSV gets columns f0..f{d-1}, Parquet one array<float>."""
    from pyspark.sql import functions as F

    n = 1 << cfg.scale
    df = spark.range(0, n, 1, num_partitions)
    cols = [F.col("id")]
    label = None
    if cfg.classes > 0:
        label = F.pmod(_h(F.col("id"), cfg.seed, _S_LABEL), F.lit(cfg.classes).cast("long"))
        df = df.withColumn("label", label)
        cols.append(F.col("label"))
        label = F.col("label")
    if cfg.splits:
        u = _u32(_h(F.col("id"), cfg.seed, _S_SPLIT), 0)
        c1 = int(round(cfg.splits[0] * U32))
        c2 = int(round((cfg.splits[0] + cfg.splits[1]) * U32))
        c3 = int(round(min(sum(cfg.splits), 1.0) * U32))
        split = (
            F.when(u < F.lit(c1), F.lit("train"))
            .when(u < F.lit(c2), F.lit("val"))
            .when(u < F.lit(c3), F.lit("test"))
            .otherwise(F.lit(None).cast("string"))
        )
        cols.append(split.alias("split"))
    if cfg.features > 0:
        hs = [_h(F.col("id"), cfg.seed, _S_FEAT + k) for k in range((cfg.features + 1) // 2)]
        df = df.select("*", *[h.alias(f"_fh{k}") for k, h in enumerate(hs)])
        feats = []
        for j in range(cfg.features):
            f = _unit(F.col(f"_fh{j // 2}"), j % 2) - 0.5
            if label is not None:
                f = f + F.when(label == F.lit(j % cfg.classes), F.lit(1.0)).otherwise(F.lit(0.0))
            feats.append(f.cast("float"))
        if fmt == "csv":
            cols += [f.alias(f"f{j}") for j, f in enumerate(feats)]
        else:
            cols.append(F.array(*feats).alias("feat"))
    return df.select(*cols)


def ingest_toml(cfg: RmatConfig, out: Path | StoreURI, fmt: str, graph: str) -> str:
    """A GLISP config that ingests exactly what was written (absolute paths, so it works from any cwd)."""

    def q(v: Any) -> str:
        return json.dumps(v)  # TOML basic strings and arrays of them are valid JSON

    lines = [
        "# Written by 'glisp generate rmat'; ingest with: glisp ingest --config " + str(out / "ingest.toml"),
        "# rmat parameters: " + json.dumps(to_dict(cfg), sort_keys=True),
        "[ingest]",
        f"graph = {q(graph)}",
        "directed = true",
        'id_type = "int"',
        "",
        "[[ingest.edges]]",
        f"path = {q(str(out / 'edges'))}",
        f"format = {q(fmt)}",
        'src = "src"',
        'dst = "dst"',
    ]
    if fmt == "csv":
        lines.append("header = true")
    lines.append('etype = "etype"' if cfg.edge_types > 1 else 'edge_type = "edge"')
    if cfg.weights:
        lines.append('weight = "weight"')
    if cfg.timestamps:
        lines.append('timestamp = "ts"')
    if has_vertex_table(cfg):
        lines += ["", "[[ingest.vertices]]", f"path = {q(str(out / 'vertices'))}", f"format = {q(fmt)}", 'id = "id"']
        if fmt == "csv":
            lines.append("header = true")
        if cfg.classes > 0:
            lines.append('label = "label"')
        if cfg.splits:
            lines.append('split = "split"')
        if cfg.features > 0:
            if fmt == "csv":
                lines.append(f"feature_columns = {q([f'f{j}' for j in range(cfg.features)])}")
            else:
                lines.append('features = "feat"')
    return "\n".join(lines) + "\n"


def default_graph_name(cfg: RmatConfig) -> str:
    return f"rmat-s{cfg.scale}-ef{cfg.edge_factor}-seed{cfg.seed}"


def _write(df: DataFrame, path: Path, fmt: str) -> None:
    w = df.write.mode("error")
    if fmt == "csv":
        w.option("header", "true").csv(qualify(path))
    else:
        w.parquet(qualify(path))


def _summary(
    cfg: RmatConfig,
    graph: str,
    out: Path | StoreURI,
    fmt: str,
    parts: int,
    vertices: bool,
    seconds: float,
    t_edges: float,
) -> dict[str, Any]:
    m = cfg.edge_factor << cfg.scale
    return {
        "graph": graph,
        "out": str(out),
        "format": fmt,
        "edges": m,
        "vertices": 1 << cfg.scale,
        "vertex_table": vertices,
        "files": parts,
        "seconds": round(seconds, 3),
        "edges_seconds": round(t_edges, 3),
        "edges_per_s": m / t_edges if t_edges > 0 else float("inf"),
        "config": str(out / "ingest.toml"),
        "params": dataclasses.asdict(cfg),
    }


def generate_rmat(
    spark: SparkSession, cfg: RmatConfig, out_dir: str | Path, fmt: str = "csv", graph: str = ""
) -> dict[str, Any]:
    """Write an R-MAT graph under ``out_dir`` (edges/, vertices/ when requested, ingest.toml).

    Output appears atomically per directory: everything is written under a hidden temp directory, moved
    into place, and ingest.toml is written last, so its presence means the files are complete.
    Returns counts and timing.
    """
    if fmt not in ("csv", "parquet"):
        raise ConfigError("command line", "--format", f"expected 'csv' or 'parquet' (got {fmt!r})")
    check_config(cfg)
    uri = parse_uri(out_dir, "--out")
    if not uri.is_local:  # no directory rename in a store: the files are written by the tasks, ingest.toml last
        return _generate_to_store(spark, cfg, uri, fmt, graph)
    out = Path(uri.path).resolve()
    out.mkdir(parents=True, exist_ok=True)
    graph = graph or default_graph_name(cfg)
    parts = cfg.files or default_parallelism(spark)
    for stale in out.glob(".tmp-rmat-*"):
        shutil.rmtree(stale, ignore_errors=True)
    tmp = out / f".tmp-rmat-{uuid.uuid4().hex[:12]}"
    t0 = time.perf_counter()
    try:
        _write(edges_frame(spark, cfg, parts), tmp / "edges", fmt)
        t_edges = time.perf_counter() - t0
        wrote_vertices = has_vertex_table(cfg)
        if wrote_vertices:
            _write(vertices_frame(spark, cfg, parts, fmt), tmp / "vertices", fmt)
        (out / "ingest.toml").unlink(missing_ok=True)
        for name in ("edges", "vertices"):
            if (out / name).exists():
                shutil.rmtree(out / name)
            if (tmp / name).exists():
                (tmp / name).rename(out / name)
        (out / "ingest.toml").write_text(ingest_toml(cfg, out, fmt, graph))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return _summary(cfg, graph, out, fmt, parts, wrote_vertices, time.perf_counter() - t0, t_edges)


def _generate_to_store(spark: SparkSession, cfg: RmatConfig, out: StoreURI, fmt: str, graph: str) -> dict[str, Any]:
    """``generate_rmat`` into a store the JVM cannot open (``s3://``): pyarrow writes the files in the tasks.

    There is no directory rename in an object store: the old ``ingest.toml`` goes first, the tables are
    replaced, and the new ``ingest.toml`` is written last, so its presence still means the files are complete.
    """
    store = store_for(out)
    graph = graph or default_graph_name(cfg)
    parts = cfg.files or default_parallelism(spark)
    t0 = time.perf_counter()
    store.delete(out / "ingest.toml")
    for name in ("edges", "vertices"):
        store.delete(out / name)
    write_files(edges_frame(spark, cfg, parts), out / "edges", "csv" if fmt == "csv" else "parquet")
    t_edges = time.perf_counter() - t0
    wrote_vertices = has_vertex_table(cfg)
    if wrote_vertices:
        write_files(vertices_frame(spark, cfg, parts, fmt), out / "vertices", "csv" if fmt == "csv" else "parquet")
    store.write_bytes(out / "ingest.toml", ingest_toml(cfg, out, fmt, graph).encode())
    return _summary(cfg, graph, out, fmt, parts, wrote_vertices, time.perf_counter() - t0, t_edges)
