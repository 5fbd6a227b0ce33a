"""The lean environment executors import GLISP's dependencies from: the distributions a profile's stages need,
taken from this environment (the versions the driver runs), without an interpreter and without pyspark.

Why not a packed virtualenv: it carries everything the driver has (pyspark, torch, the PyG stack, the docs
tools: about 1 GB packed, 2 GB unpacked per executor per application) and a link to the interpreter it was
made from, so it works only where that interpreter sits at the same path. This archive is the packages alone:
the executors run the cluster's own ``python3.11`` (the driver's minor version; PySpark refuses another), the
cluster's Spark puts pyspark on their path, and the archive is added by
``--archives glisp-env-<profile>.tar.gz#glisp-env --conf spark.executorEnv.PYTHONPATH=glisp-env``.

Profiles (each a set of root distributions and everything they require, by their own metadata):

- ``stages``: ingest, partition, serialize, reorder (numpy, numba, pyarrow, pandas, zarr, psutil, the stores'
  clients); no torch;
- ``infer``: ``stages`` and torch (``glisp infer`` runs the model in its tasks);
- ``train``: ``infer`` and the gRPC client (``glisp train --spark-processes``: trainers as Spark tasks).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tarfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement

STAGES = (
    "numpy",
    "numba",
    "pyarrow",
    "pandas",
    "zarr",
    "psutil",
    "boto3",
    "google-cloud-storage",
    "azure-storage-blob",
)
PROFILES = {
    "stages": STAGES,
    "infer": (*STAGES, "torch"),
    "train": (*STAGES, "torch", "grpcio", "grpcio-health-checking", "protobuf"),
}
NEVER = frozenset({"pyspark", "py4j"})  # the cluster's Spark provides them, in the version it runs


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def closure(roots: tuple[str, ...]) -> list[metadata.Distribution]:
    """The installed distributions ``roots`` need, by their requirements' markers for this interpreter (no
    extras); an installed root or requirement that is missing fails naming it and who needs it."""
    env: dict[str, str] = {**default_environment(), "extra": ""}  # type: ignore[dict-item]
    seen: dict[str, metadata.Distribution] = {}
    todo = [(r, "the profile") for r in roots]
    while todo:
        name, why = todo.pop()
        key = _norm(name)
        if key in seen or key in NEVER:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            raise FileNotFoundError(f"executor env: {name} (needed by {why}) is not installed here") from None
        seen[key] = dist
        for spec in dist.requires or []:
            req = Requirement(spec)
            if req.marker is None or req.marker.evaluate(env):
                todo.append((req.name, dist.metadata["Name"]))
    return sorted(seen.values(), key=lambda d: _norm(d.metadata["Name"]))


@dataclass(frozen=True)
class Packed:
    """What :func:`pack` wrote (or kept): the package directory, the archive (when asked) and their sizes."""

    directory: Path
    archive: Path | None
    distributions: tuple[str, ...]
    unpacked_bytes: int
    archive_bytes: int
    kept: bool = False  # the directory and archive of an earlier call with the same inputs, left as they were


def _files(dist: metadata.Distribution) -> list[tuple[Path, Path]]:
    """(source, path relative to site-packages) of a distribution's files that live in site-packages (not its
    console scripts, which sit beside the interpreter) and are not bytecode caches."""
    base = Path(str(dist.locate_file(""))).resolve()
    out = []
    for f in dist.files or []:
        src = Path(str(dist.locate_file(f))).resolve()
        if "__pycache__" in f.parts or not src.is_relative_to(base) or not src.is_file():
            continue
        if _build_only(f.parts, src.suffix):
            continue
        out.append((src, src.relative_to(base)))
    return out


def _build_only(parts: tuple[str, ...], suffix: str) -> bool:
    """A package's own test suite, C headers and Cython sources: nothing an import needs (about 45 MiB)."""
    in_package = len(parts) > 1 and not parts[0].endswith((".dist-info", ".data"))
    return in_package and ("tests" in parts[1:-1] or suffix in (".h", ".hpp", ".pxd", ".pyx", ".cpp"))


def _inputs(files: list[tuple[Path, Path]], archive: bool, compresslevel: int) -> tuple[str, int]:
    """What the directory and the archive are made of, as a digest of every file's place, size and modification
    time and of the archive's settings (as ``make`` judges a target: a reinstalled or upgraded package changes
    it), and the files' bytes in all."""
    h = hashlib.sha256(f"archive={archive} level={compresslevel}\n".encode())
    size = 0
    for src, rel in sorted(files, key=lambda f: f[1]):
        st = src.stat()
        h.update(f"{rel}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
        size += st.st_size
    return h.hexdigest(), size


def pack(profile: str, out_dir: Path, archive: bool = True, compresslevel: int = 6) -> Packed:
    """Write ``out_dir/glisp-env-<profile>/`` (the packages, hard-linked from this environment where the file
    system allows) and, with ``archive``, ``out_dir/glisp-env-<profile>.tar.gz`` of its contents.

    Both are kept as they are when an earlier call wrote them from the same files with the same settings (its
    digest of them in ``glisp-env-<profile>.inputs``, written last): a deployment that runs ``glisp pack-env``
    before every submit compresses the packages (about 25 CPU-s for ``stages``) once, not every time."""
    if profile not in PROFILES:
        raise ValueError(f"executor env: unknown profile {profile!r} (expected one of {sorted(PROFILES)})")
    dists = closure(PROFILES[profile])
    files = [f for dist in dists for f in _files(dist)]
    names = tuple(f"{d.metadata['Name']}=={d.version}" for d in dists)
    target = out_dir / f"glisp-env-{profile}"
    tar = out_dir / f"glisp-env-{profile}.tar.gz" if archive else None
    stamp = out_dir / f"glisp-env-{profile}.inputs"
    digest, size = _inputs(files, archive, compresslevel)
    if stamp.is_file() and stamp.read_text().strip() == digest and target.is_dir() and (tar is None or tar.is_file()):
        return Packed(target, tar, names, size, tar.stat().st_size if tar else 0, kept=True)
    stamp.unlink(missing_ok=True)  # a rebuild cut short is never taken for a current one
    _link_tree(files, out_dir / f".glisp-env-{profile}.partial", target)
    if tar is not None:
        part = tar.with_name(tar.name + ".partial")
        with tarfile.open(part, "w:gz", compresslevel=compresslevel) as t:
            for p in sorted(target.iterdir()):
                t.add(p, arcname=p.name)
        part.replace(tar)
    stamp.write_text(digest + "\n")
    return Packed(target, tar, names, size, tar.stat().st_size if tar else 0)


def _link_tree(files: list[tuple[Path, Path]], staging: Path, target: Path) -> None:
    """``files`` at their relative paths under ``target``, built in ``staging`` and renamed into place."""
    shutil.rmtree(staging, ignore_errors=True)
    for src, rel in files:
        dst = staging / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
