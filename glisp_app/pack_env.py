"""``glisp pack-env``: what a cluster's executors need from this machine, built in one command: GLISP's code zip
and the lean package archive of a profile (:mod:`glisp_spark.executor_env`), with the spark-submit options
that ship them."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from glisp_core.config import Config
from glisp_spark.codezip import build_zip
from glisp_spark.executor_env import PROFILES, pack


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", default="build", help="directory for the zip and the archive (default: build)")
    p.add_argument(
        "--profile",
        choices=sorted(PROFILES),
        default="infer",
        help="stages: ingest to reorder; infer: and glisp infer (torch); train: and trainers as Spark tasks",
    )
    p.add_argument("--no-archive", action="store_true", help="write the package directory only, no tar.gz")


def submit_options(code: Path, archive: Path | None, directory: Path) -> list[str]:
    """The spark-submit options that ship the code and the packages and make the executors import them."""
    env = (
        f"--archives {archive}#glisp-env" if archive else f"(copy {directory} to each node's working dir as glisp-env)"
    )
    return [
        f"--py-files {code}",
        env,
        "--conf spark.executorEnv.PYTHONPATH=glisp-env",
        f"--conf spark.pyspark.python=python{sys.version_info.major}.{sys.version_info.minor}  # the nodes' own",
    ]


def main(args: argparse.Namespace, cfg: Config) -> int:
    out = Path(args.out).resolve()
    code = build_zip(out)
    got = pack(args.profile, out, archive=not args.no_archive)
    mib = 1 << 20
    print(f"code:     {code} ({code.stat().st_size / mib:.1f} MiB)")
    print(f"packages: {got.directory} ({len(got.distributions)} distributions, {got.unpacked_bytes / mib:.0f} MiB)")
    if got.archive:
        kept = ", unchanged since it was built: kept" if got.kept else ""
        print(f"archive:  {got.archive} ({got.archive_bytes / mib:.0f} MiB{kept})")
        print(f"use it:   submit/glisp-submit --master URL --lean-env {got.archive} -- <stage> ...")
    print("or these spark-submit options:")
    for line in submit_options(code, got.archive, got.directory):
        print(f"  {line}")
    return 0
