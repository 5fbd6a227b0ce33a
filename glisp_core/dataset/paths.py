"""The confinement rule: with ``dataset.confine_to`` set, GLISP touches no path outside that directory.

A shared platform lets many teams submit configs; one of them must not make a stage read
``/etc/shadow`` as an edge table, or write a dataset over another team's tree. When
``dataset.confine_to`` names a directory, every path GLISP is given — the dataset root, a DATASET
argument, each ingest table file (globs and directories expanded), each feature .npy — must resolve,
with symlinks followed and ``..`` collapsed, to that directory or below it. Otherwise the command stops
with a ConfigError naming the key, the path and where it resolves. Graph, version and run names can
never escape: they are single path components (``layout.check_name``). Empty (the default) means no
confinement.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from glisp_core.errors import ConfigError


def _real(path: str | os.PathLike[str]) -> Path:
    return Path(os.path.realpath(os.path.expanduser(os.fspath(path))))


def confine(path: str | os.PathLike[str], confine_to: str, key: str) -> Path:
    """``path`` resolved; ConfigError naming ``key`` when it lies outside ``confine_to`` (if set)."""
    text = os.fspath(path) if not isinstance(path, str) else path
    if "://" in text and not text.startswith("file://"):
        if confine_to:
            raise ConfigError(
                "dataset.confine_to",
                key,
                f"{text!r} is not on this machine's disk, so it cannot lie inside {confine_to!r}",
            )
        return Path(text)
    real = _real(text.removeprefix("file://"))
    if confine_to:
        jail = _real(confine_to)
        if real != jail and jail not in real.parents:
            raise ConfigError(
                "dataset.confine_to",
                key,
                f"{os.fspath(path)!r} resolves to {str(real)!r}, outside {str(jail)!r} (symlinks followed); "
                "move it inside or change dataset.confine_to",
            )
    return real


def confine_all(paths: Iterable[str | os.PathLike[str]], confine_to: str, key: str) -> None:
    for p in paths:
        confine(p, confine_to, key)
