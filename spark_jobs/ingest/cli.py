"""``glisp ingest``: a built-in graph, a quick edge list (--edges) or [[ingest.edges]] blocks of a config file."""

from __future__ import annotations

import argparse
import dataclasses
import time

from glisp_core.config import Config, EdgeSource, IngestConfig, VertexSource
from glisp_core.errors import ConfigError
from glisp_core.storage.uri import parse_uri


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--graph", help="graph name (ingest.graph)")
    p.add_argument("--builtin", metavar="NAME", help="a built-in graph: cora, lastfm or imdb")
    p.add_argument(
        "--edges",
        action="append",
        default=[],
        metavar="PATH",
        help="an edge list file, directory or glob (repeatable); replaces [[ingest.edges]]",
    )
    p.add_argument(
        "--vertices",
        action="append",
        default=[],
        metavar="PATH",
        help="a vertex table (column 'id'; repeatable); replaces [[ingest.vertices]]",
    )
    p.add_argument("--format", choices=["auto", "csv", "tsv", "parquet"], default="auto", help="format of --edges")
    p.add_argument("--delimiter", default="", help="field delimiter of --edges (default: ',' csv, tab tsv)")
    p.add_argument("--no-header", action="store_true", help="--edges files have no header: columns are src, dst, ...")
    p.add_argument("--comment", default="", help="skip --edges lines starting with this (e.g. '#')")
    p.add_argument("--src", default="src", help="source column of --edges")
    p.add_argument("--dst", default="dst", help="destination column of --edges")
    p.add_argument("--weight", default="", help="weight column of --edges")
    p.add_argument("--undirected", action="store_true", help="store every edge in both directions")
    p.add_argument("--duplicates", choices=["keep", "merge", "drop"], help="duplicate edge policy")
    p.add_argument("--self-loops", choices=["keep", "drop"], help="self-loop policy")
    p.add_argument("--on-bad-input", choices=["fail", "quarantine"], help="stop, or set bad rows aside")
    p.add_argument("--id-type", choices=["auto", "int", "string"], help="type of the input ids")
    p.add_argument("--version", dest="data_version", help="version name (default: <UTC time>-<fingerprint>)")
    p.add_argument("--force", action="store_true", help="rebuild even if an identical version exists")


def ingest_config(args: argparse.Namespace, cfg: Config) -> IngestConfig:
    """The IngestConfig of a command line, layered over the config file's [ingest] section."""
    ing = cfg.ingest
    updates: dict = {}
    if args.builtin:
        from spark_jobs.generate.builtin import builtin_config

        if args.edges or args.vertices:
            raise ConfigError(
                "command line",
                "--builtin",
                "cannot be combined with --edges/--vertices "
                f"(got --builtin {args.builtin} and {len(args.edges) + len(args.vertices)} paths)",
            )
        ing = builtin_config(args.builtin, dataclasses.replace(ing, graph=args.graph or ing.graph))
    if args.edges:
        updates["edges"] = [
            EdgeSource(
                path=p,
                format=args.format,
                header=not args.no_header,
                delimiter=args.delimiter,
                comment=args.comment,
                src=args.src,
                dst=args.dst,
                weight=args.weight,
            )
            for p in args.edges
        ]
    if args.vertices:
        updates["vertices"] = [VertexSource(path=p) for p in args.vertices]
    if args.graph:
        updates["graph"] = args.graph
    if args.undirected:
        updates["directed"] = False
    for flag, key in (
        ("duplicates", "duplicates"),
        ("self_loops", "self_loops"),
        ("on_bad_input", "on_bad_input"),
        ("id_type", "id_type"),
        ("data_version", "version"),
    ):
        v = getattr(args, flag)
        if v is not None:
            updates[key] = v
    ing = dataclasses.replace(ing, **updates)
    if not ing.graph and args.edges:
        raise ConfigError("command line", "--graph", "a graph name is required with --edges (got none)")
    return ing


def main(args: argparse.Namespace, cfg: Config) -> int:
    from glisp_spark.session import is_local_master, lazy_spark, planned_master, started
    from spark_jobs.generate.builtin import share_builtin
    from spark_jobs.ingest.job import run_ingest

    ing = ingest_config(args, cfg)
    t0 = time.perf_counter()
    spark = lazy_spark(cfg.spark)  # started only when there is something to ingest
    root = parse_uri(cfg.dataset.root)
    if args.builtin and (not root.is_local or not is_local_master(planned_master(cfg.spark))):
        ing = share_builtin(ing, root / "_builtin")  # executors elsewhere read the inputs from the root's store
    dv = run_ingest(spark, cfg, ing, force=args.force)
    if not started(spark):
        return 0  # up to date: run_ingest said so
    from glisp_core.dataset.manifest import read_manifest
    from glisp_core.dataset.versions import read_latest

    m = read_manifest(dv)
    rec = m.stages["ingest"]
    secs = time.perf_counter() - t0
    e = m.schema.get("num_edges", 0)
    rate = rec.counts.get("input_edge_rows", e) / max(rec.timings.get("total_s", secs), 1e-9)
    print(f"{dv.path}")
    print(
        f"  |V| = {m.schema.get('num_vertices', 0):,}   |E| = {e:,}   "
        f"ingest {rec.timings.get('total_s', 0):.1f} s ({rate:,.0f} edges/s), wall {secs:.1f} s"
    )
    rejects = rec.counts.get("rejects") or {}
    if rejects:
        print("  rejected rows: " + ", ".join(f"{k}={v:,}" for k, v in sorted(rejects.items())))
    latest = read_latest(dv.path.parent)
    if latest is not None and latest != dv.version:
        print(
            f"  '{dv.graph}' (latest) still names {latest}: 'glisp promote {dv.graph}/{dv.version}' moves it "
            "once its stages are published; 'glisp pipeline' does that by itself"
        )
    return 0
