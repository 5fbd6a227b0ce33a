"""``glisp infer``: placeholder until layerwise inference is built; it says so instead of pretending."""

from __future__ import annotations

import argparse

from glisp_core.config import Config
from glisp_core.errors import StageError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dataset", nargs="?")


def main(args: argparse.Namespace, cfg: Config) -> int:
    raise StageError("'glisp infer' is not built yet (layerwise inference is a later issue)")
