"""Paths and column names of a dataset version: ``<root>/<graph>/<version>/``.

Layout (each directory is published atomically by one stage)::

    manifest.json
    ingest/vertices/      vid, vtype, label, split              (Parquet)
    ingest/edges/         eid, src, dst, etype[, weight][, ts]  (Parquet)
    ingest/idmap/         vid, orig_id, vtype                   (Parquet)
    ingest/features/      vid, feat (array<float>)              (Parquet, only when the graph has them)
    ingest/rejects/<kind>/                                      (Parquet, quarantine mode only)
    partition/<run>/assignment/   eid, part                     (Parquet)
    partition/<run>/replicas/     vid, parts (array<int>), master
    serialize/<run>/part-NNNNN/   raw arrays + meta.json        (glisp_core.partition_format)
    serialize/<run>/parquet/      edges/ and vertices/ per partition
    reorder/<run>/<order>/        vid, part, pos                (Parquet)
    train/<run>/                  model.json + weights.pt       (glisp_core.models checkpoint)
    infer/<run>/                  per-layer Zarr arrays, id map and outputs (glisp_infer)

``<run>`` is a partition run name such as ``adadne-p8``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from glisp_core.errors import StageError

MANIFEST = "manifest.json"
LATEST = "LATEST"  # <root>/<graph>/LATEST: the version consumers follow (glisp_core.dataset.versions)

# Canonical column names, shared by every stage.
VID = "vid"
EID = "eid"
SRC = "src"
DST = "dst"
ETYPE = "etype"
VTYPE = "vtype"
WEIGHT = "weight"
TS = "ts"
LABEL = "label"
SPLIT = "split"
FEAT = "feat"
ORIG_ID = "orig_id"
PART = "part"
PARTS = "parts"
MASTER = "master"
POS = "pos"

SPLIT_CODES = {"train": 0, "val": 1, "test": 2}  # split column: int8, -1 = none

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")


def check_name(kind: str, name: str) -> str:
    if not _NAME.match(name):
        raise StageError(f"{kind} name {name!r} must be letters, digits, '_', '.', '-' (got {name!r})")
    return name


@dataclass(frozen=True)
class DatasetVersion:
    """One version of one graph; every stage reads and writes under ``path``."""

    root: Path
    graph: str
    version: str

    @property
    def path(self) -> Path:
        return self.root / self.graph / self.version

    @property
    def manifest_path(self) -> Path:
        return self.path / MANIFEST

    # ingest
    @property
    def ingest(self) -> Path:
        return self.path / "ingest"

    @property
    def vertices(self) -> Path:
        return self.ingest / "vertices"

    @property
    def edges(self) -> Path:
        return self.ingest / "edges"

    @property
    def idmap(self) -> Path:
        return self.ingest / "idmap"

    @property
    def features(self) -> Path:
        return self.ingest / "features"

    def rejects(self, kind: str = "") -> Path:
        return self.ingest / "rejects" / kind if kind else self.ingest / "rejects"

    # later stages
    def partition(self, run: str) -> Path:
        return self.path / "partition" / check_name("partition run", run)

    def assignment(self, run: str) -> Path:
        return self.partition(run) / "assignment"

    def replicas(self, run: str) -> Path:
        return self.partition(run) / "replicas"

    def serialized(self, run: str) -> Path:
        return self.path / "serialize" / check_name("partition run", run)

    def partition_dir(self, run: str, part: int) -> Path:
        return self.serialized(run) / f"part-{part:05d}"

    def reorder(self, run: str, order: str) -> Path:
        return self.path / "reorder" / check_name("partition run", run) / order

    def train(self, run: str) -> Path:
        return self.path / "train" / check_name("training run", run)

    def infer(self, run: str) -> Path:
        return self.path / "infer" / check_name("inference run", run)

    def __str__(self) -> str:
        return str(self.path)


def list_versions(root: Path, graph: str) -> list[str]:
    """Published versions of a graph, oldest first (only directories with a manifest count)."""
    gdir = root / graph
    if not gdir.is_dir():
        return []
    out = [d.name for d in gdir.iterdir() if d.is_dir() and not d.name.startswith(".") and (d / MANIFEST).exists()]
    return sorted(out, key=lambda v: ((gdir / v / MANIFEST).stat().st_mtime_ns, v))


def _latest_named(graph_dir: Path) -> str | None:
    """The version ``<graph>/LATEST`` names, when it names a published one."""
    try:
        v = (graph_dir / LATEST).read_text().strip()
    except (FileNotFoundError, NotADirectoryError):
        return None
    return v if v and (graph_dir / v / MANIFEST).exists() else None


def resolve_dataset(spec: str | os.PathLike[str], root: str | os.PathLike[str] = "data") -> DatasetVersion:
    """Turn a CLI DATASET argument into a version.

    Accepts a version directory (holding manifest.json), a graph directory or ``graph`` (its ``latest``),
    ``graph/latest``, or ``graph/version`` relative to ``root``. ``latest`` is the version the graph's
    ``LATEST`` file names (moved by ``glisp pipeline`` once every configured stage succeeded); a graph
    without one resolves to its newest version.
    """
    p = Path(spec)
    candidates = [p] if p.is_absolute() or p.exists() else [Path(root) / p]
    for c in candidates:
        if c.name == "latest" and not c.exists():
            c = c.parent
        if (c / MANIFEST).exists():
            return DatasetVersion(c.parent.parent, c.parent.name, c.name)
        if c.is_dir():
            versions = list_versions(c.parent, c.name)
            v = _latest_named(c) or (versions[-1] if versions else None)
            if v:
                return DatasetVersion(c.parent, c.name, v)
    raise StageError(
        f"dataset {str(spec)!r}: no published version found under {candidates[0]} "
        "(run 'glisp ingest' first, or pass <root>/<graph>/<version>)"
    )


# Keys of manifest["schema"], written by ingest and read by every later stage.
SCHEMA_KEYS = (
    "directed",  # bool: false means each undirected edge is stored as two directed rows
    "num_vertices",  # int: vids are dense 0..num_vertices-1
    "num_edges",  # int: eids are dense 0..num_edges-1 (directed rows)
    "vertex_types",  # list[str]: vtype code -> name
    "edge_types",  # list[str]: etype code -> name
    "weighted",  # bool: edges table has a float32 'weight' column
    "timestamped",  # bool: edges table has an int64 'ts' column
    "feature_dim",  # int: 0 = no features table
    "num_classes",  # int: 0 = no labels
    "id_type",  # "int" | "string": type of orig_id in the idmap
)
