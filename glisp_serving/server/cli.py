"""``glisp serve DATASET --partition K``: one sampling server holding one serialized partition."""

from __future__ import annotations

import argparse

from glisp_core.config import Config, with_values
from glisp_core.dataset.layout import resolve_dataset


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dataset", help="dataset version: <root>/<graph>/<version>, <graph>[/<version>]")
    p.add_argument("--partition", "-k", type=int, required=True, help="partition id to serve")
    p.add_argument("--port", type=int, help="port (serve.port; 0 = a free port)")
    p.add_argument("--host", help="address to bind (serve.host)")
    p.add_argument("--run", help="serialized partition run (default: the latest published)")
    p.add_argument("--threads", type=int, help="kernel and RPC threads (serve.threads)")
    p.add_argument("--port-file", help="write the bound port here once serving (used by serve-cluster)")
    p.add_argument("--admin-socket", help="also listen on this Unix socket for admin calls (Reload)")
    p.add_argument("--restarts", type=int, default=0, help=argparse.SUPPRESS)  # serve-cluster's restart count


def main(args: argparse.Namespace, cfg: Config) -> int:
    from glisp_serving.cluster.cluster_file import num_parts_of, resolve_run
    from glisp_serving.server.servicer import serve

    cfg = with_values(cfg, "serve", port=args.port, host=args.host, threads=args.threads)
    dv = resolve_dataset(args.dataset, cfg.dataset.root)
    run = resolve_run(dv, args.run)
    parts = num_parts_of(dv, run)
    if not 0 <= args.partition < parts:
        from glisp_core.errors import StageError

        raise StageError(f"--partition: run {run} has partitions 0..{parts - 1} (got {args.partition})")
    return serve(
        dv,
        run,
        args.partition,
        cfg.serve,
        port_file=args.port_file,
        restarts=args.restarts,
        admin_socket=args.admin_socket,
    )
