"""``glisp train``: placeholder until distributed training is built; it says so instead of pretending."""

from __future__ import annotations

import argparse

from glisp_core.config import Config
from glisp_core.errors import StageError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dataset", nargs="?")


def main(args: argparse.Namespace, cfg: Config) -> int:
    raise StageError("'glisp train' is not built yet (training from the sampling service is a later issue)")
