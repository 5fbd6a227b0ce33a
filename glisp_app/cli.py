"""``glisp <stage>``: one subcommand per stage, each implemented in its component and imported lazily.

A command module provides ``add_arguments(parser)`` and ``main(args, cfg) -> int``. Only the chosen
command's module is imported, so ``glisp serve`` never loads Spark and ``glisp ingest`` never loads
gRPC.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from glisp_core.config import Config, load_config, with_values
from glisp_core.dataset.paths import confine
from glisp_core.errors import GlispError, failure_reason
from glisp_core.storage.backend import set_unsafe_publish
from glisp_core.storage.limits import set_limits

# name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "generate": ("spark_jobs.generate.cli", "write a built-in or synthetic (R-MAT) graph as raw input files"),
    "ingest": ("spark_jobs.ingest.cli", "raw edge/vertex tables -> a new canonical dataset version"),
    "report": ("glisp_app.report", "print a dataset version's manifest (counts, params, metrics, timings)"),
    "config": ("glisp_app.config_cmd", "the effective configuration and where each value came from; one key explained"),
    "partition": ("spark_jobs.partition.cli", "vertex-cut partitioning (AdaDNE, DistributedNE, baselines)"),
    "serialize": ("spark_jobs.serialize.cli", "write one binary GLISP partition per server, plus Parquet"),
    "reorder": ("spark_jobs.serialize.reorder_cli", "inference order: PDS, NS, DS or PS"),
    "serve": ("glisp_serving.server.cli", "run one sampling server for one partition"),
    "serve-cluster": ("glisp_serving.cluster.supervisor", "run one sampling server per partition on this machine"),
    "serve-reload": ("glisp_serving.cluster.reload", "move a running sampling cluster to another version (hot)"),
    "link-split": ("glisp_train.link_split", "hold out edges for link prediction: a training-only partition run"),
    "train": ("glisp_train.cli", "train a GNN through the sampling service (node classification, link prediction)"),
    "infer": ("glisp_app.infer_cmd", "layerwise inference to Zarr: embeddings, predictions and link scores"),
    "pipeline": ("glisp_app.pipeline", "run every batch stage end to end on one dataset"),
    "promote": ("glisp_app.promote", "point a graph's latest at a version whose stages are all published"),
    "pack-env": ("glisp_app.pack_env", "the code zip and a lean package archive for a cluster's executors"),
}


def add_common(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("common")
    g.add_argument("--config", "-c", help="a TOML config file layered over conf/default.toml")
    g.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE", help="override one config key")
    g.add_argument("--root", help="dataset root directory (dataset.root)")
    g.add_argument("--master", help="Spark master (spark.master); ignored under spark-submit")


def _top_help() -> str:
    width = max(len(n) for n in COMMANDS)
    lines = ["usage: glisp <command> [options]", "", "commands:"]
    lines += [f"  {n.ljust(width)}  {h}" for n, (_, h) in COMMANDS.items()]
    lines += ["", "'glisp <command> --help' shows a command's options."]
    return "\n".join(lines)


def _confine_arguments(args: argparse.Namespace, cfg: Config) -> None:
    """The dataset root and a DATASET argument must stay inside ``dataset.confine_to`` when it is set."""
    jail = cfg.dataset.confine_to
    if not jail:
        return
    confine(cfg.dataset.root, jail, "dataset.root (--root)")
    ds = getattr(args, "dataset", None)
    if isinstance(ds, str) and ds:
        p = Path(ds)
        confine(p if p.is_absolute() or p.exists() else Path(cfg.dataset.root) / p, jail, "DATASET argument")


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_top_help())
        return 0 if argv else 2
    if argv[0] in ("-V", "--version"):
        from glisp_core import __version__

        print(__version__)
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"glisp: unknown command {name!r}\n\n{_top_help()}", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[name][0])
    parser = argparse.ArgumentParser(prog=f"glisp {name}", description=COMMANDS[name][1])
    module.add_arguments(parser)
    add_common(parser)
    args = parser.parse_args(rest)
    try:
        cfg = load_config(args.config, overrides=args.set)
        cfg = with_values(cfg, "dataset", root=args.root)
        cfg = with_values(cfg, "spark", master=args.master)
        set_unsafe_publish(cfg.dataset.unsafe_publish)
        d = cfg.dataset
        set_limits(d.store_connect_timeout_s, d.store_timeout_s, d.store_retries)
        _confine_arguments(args, cfg)
        return int(module.main(args, cfg) or 0)
    except GlispError as e:
        print(f"glisp {name}: error: {e}", file=sys.stderr)
        return 1
    except Exception as e:  # a Spark/Py4J/OS failure: one line; the trace only on request
        if os.environ.get("GLISP_TRACEBACK"):
            raise
        print(f"glisp {name}: error: {failure_reason(e)} (set GLISP_TRACEBACK=1 for the full trace)", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
