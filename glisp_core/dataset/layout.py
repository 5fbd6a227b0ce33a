"""Where a dataset version's stages live: ``<root>/<graph>/<version>/`` in a store (docs/storage.md).

Each stage's output is one attempt prefix that its current record names (``glisp_core.dataset.records``);
the accessors below resolve a stage's published output through that record::

    _version.json                 the version exists (created once, by ingest)
    _records/<stage>/<seq>.json   the manifest: one record per commit of each stage
    ingest/@A/vertices/           vid, vtype, label, split              (Parquet)
    ingest/@A/edges/              eid, src, dst, etype[, weight][, ts]  (Parquet)
    ingest/@A/idmap/              vid, orig_id, vtype                   (Parquet)
    ingest/@A/features/           vid, feat (array<float>)              (Parquet, only when the graph has them)
    ingest/@A/rejects/<kind>/                                           (Parquet, quarantine mode only)
    partition/<run>/@A/assignment/   eid, part                          (Parquet)
    partition/<run>/@A/replicas/     vid, parts (array<int>)
    serialize/<run>/@A/part-NNNNN/   raw arrays + meta.json             (glisp_core.partition_format)
    serialize/<run>/@A/parquet/      edges/ and vertices/ per partition
    serialize/<run>/@A/masters/      vid, master[, degree]              (Parquet)
    reorder/<run>/<order>/@A/        vid, part, pos, part_pos, degree   (Parquet)
    reorder/<run>/<order>/@A/_index/ by vertex id and by partition      (Zarr, glisp_core.dataset.order_index)
    train/<run>/@A/                  model.json + weights.pt            (glisp_core.models checkpoint)
    infer/<run>/@A/                  per-layer Zarr arrays, id map and outputs (glisp_infer)

``<run>`` is a partition run name such as ``adadne-p8``; ``@A`` an attempt (a UTC time and random hex).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from glisp_core.dataset.records import VERSION_FILE, current_record
from glisp_core.errors import StageError
from glisp_core.storage.store import Store, store_for
from glisp_core.storage.uri import StoreURI, parse_uri

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

# Node predictions, as glisp train (its test vertices) and glisp infer (every vertex) write them: the original id
# in the user's own type, the vertex type's name, the dense id, the dataset's label (null: none), the arg-max class
# and its softmax probability.
PREDICTION_COLUMNS = (ORIG_ID, VTYPE, VID, LABEL, "prediction", "score")
# Link scores: the endpoints' original ids, the dot-product score, the endpoints' dense ids.
LINK_SCORE_COLUMNS = (SRC, DST, "score", "src_vid", "dst_vid")

SPLIT_CODES = {"train": 0, "val": 1, "test": 2}  # split column: int8, -1 = none

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")


def check_name(kind: str, name: str) -> str:
    if not _NAME.match(name):
        raise StageError(f"{kind} name {name!r} must be letters, digits, '_', '.', '-' (got {name!r})")
    return name


@dataclass(frozen=True, init=False)
class DatasetVersion:
    """One version of one graph; every stage reads and writes under ``path``.

    ``pinned`` maps stage names to output paths (relative to the version) that a writer uses before its
    record exists: ingest reads back its own attempt's tables through it.
    """

    root: StoreURI
    graph: str
    version: str
    pinned: tuple[tuple[str, str], ...] = field(default=(), compare=False)

    def __init__(
        self,
        root: StoreURI | str | os.PathLike[str],
        graph: str,
        version: str,
        pinned: tuple[tuple[str, str], ...] = (),
    ) -> None:
        object.__setattr__(self, "root", parse_uri(root))
        object.__setattr__(self, "graph", graph)
        object.__setattr__(self, "version", version)
        object.__setattr__(self, "pinned", pinned)

    @property
    def path(self) -> StoreURI:
        return self.root / self.graph / self.version

    @property
    def store(self) -> Store:
        return store_for(self.root)

    @property
    def manifest_path(self) -> StoreURI:
        return self.path / VERSION_FILE

    def stage_dir(self, stage: str) -> StoreURI:
        """Where the attempts of ``stage`` are written (``partition/adadne-p8`` -> ``<version>/partition/adadne-p8``)."""
        return self.path / stage

    def output(self, stage: str) -> StoreURI:
        """The published output of ``stage`` (the attempt its current record names)."""
        for name, rel in self.pinned:
            if name == stage:
                return self.path / rel
        cur = current_record(self.store, self.path, stage)
        if cur is None:
            raise StageError(f"{self.graph}/{self.version}: stage {stage!r} has not run")
        return self.path / str(cur[1]["path"])

    def pin(self, stage: str, rel: str) -> DatasetVersion:
        return DatasetVersion(self.root, self.graph, self.version, (*self.pinned, (stage, rel)))

    # ingest
    @property
    def ingest(self) -> StoreURI:
        return self.output("ingest")

    @property
    def vertices(self) -> StoreURI:
        return self.ingest / "vertices"

    @property
    def edges(self) -> StoreURI:
        return self.ingest / "edges"

    @property
    def idmap(self) -> StoreURI:
        return self.ingest / "idmap"

    @property
    def features(self) -> StoreURI:
        return self.ingest / "features"

    def rejects(self, kind: str = "") -> StoreURI:
        return self.ingest / "rejects" / kind if kind else self.ingest / "rejects"

    # later stages
    def partition(self, run: str) -> StoreURI:
        return self.output(f"partition/{check_name('partition run', run)}")

    def assignment(self, run: str) -> StoreURI:
        return self.partition(run) / "assignment"

    def replicas(self, run: str) -> StoreURI:
        return self.partition(run) / "replicas"

    def serialized(self, run: str) -> StoreURI:
        return self.output(f"serialize/{check_name('partition run', run)}")

    def serialized_edges(self, run: str) -> StoreURI:
        """Serialize's Parquet copy of the edges (eid, src, dst, etype, ..., part, leid), one file per partition."""
        return self.serialized(run) / "parquet" / "edges"

    def partition_dir(self, run: str, part: int) -> StoreURI:
        return self.serialized(run) / f"part-{part:05d}"

    def reorder(self, run: str, order: str) -> StoreURI:
        return self.output(f"reorder/{check_name('partition run', run)}/{order}")

    def train(self, run: str) -> StoreURI:
        return self.output(f"train/{check_name('training run', run)}")

    def infer(self, run: str) -> StoreURI:
        return self.output(f"infer/{check_name('inference run', run)}")

    def __str__(self) -> str:
        return str(self.path)


def _version_doc(store: Store, vdir: StoreURI) -> dict[str, object] | None:
    text = store.read_text(vdir / VERSION_FILE)
    if text is None:
        return None
    try:
        doc: dict[str, object] = json.loads(text)
        return doc
    except ValueError:
        return None


def candidate_versions(store: Store, gdir: StoreURI) -> list[str]:
    """The names under a graph directory that can be versions: not hidden (``.``, ``_``), not ``LATEST``."""
    return [n for n in store.names(gdir) if not n.startswith((".", "_")) and n != LATEST]


def list_versions(root: StoreURI | str | os.PathLike[str], graph: str) -> list[str]:
    """Published versions of a graph, oldest first (only prefixes holding ``_version.json`` count)."""
    gdir = parse_uri(root) / graph
    store = store_for(gdir)
    found = []
    for name in candidate_versions(store, gdir):
        doc = _version_doc(store, gdir / name)
        if doc is not None:
            found.append((int(str(doc.get("created_ns", 0))), name))
    return [v for _, v in sorted(found)]


def _latest_named(graph_dir: StoreURI) -> str | None:
    """The version ``<graph>/LATEST`` names, when it names a published one."""
    store = store_for(graph_dir)
    text = store.read_text(graph_dir / LATEST)
    v = text.strip() if text else ""
    return v if v and store.exists(graph_dir / v / VERSION_FILE) else None


def readable_here(dataset: str | os.PathLike[str]) -> bool:
    """A dataset version on this machine's disk (a trainer or client reads its files directly, not over RPC)."""
    u = parse_uri(dataset, "dataset")
    return u.is_local and os.path.isfile(os.path.join(u.path, VERSION_FILE))


def resolve_dataset(spec: str | os.PathLike[str], root: str | os.PathLike[str] = "data") -> DatasetVersion:
    """Turn a CLI DATASET argument into a version.

    Accepts a version's URI or directory, a graph's (its ``latest``), or ``graph``, ``graph/latest`` or
    ``graph/version`` relative to ``root``. ``latest`` is the version the graph's ``LATEST`` object names (moved
    by ``glisp pipeline`` once every configured stage succeeded); a graph without one resolves to its newest
    version.
    """
    text = str(spec) if isinstance(spec, StoreURI) else os.fspath(spec)  # an s3:// StoreURI is no local path
    here = "://" in text or os.path.isabs(text) or Path(text).exists()
    c = parse_uri(text, "DATASET") if here else parse_uri(root) / text
    store = store_for(c)
    if c.name == "latest" and not store.exists(c):
        c = c.parent
    if store.exists(c / VERSION_FILE):
        return DatasetVersion(c.parent.parent, c.parent.name, c.name)
    if store.is_dir(c):
        versions = list_versions(c.parent, c.name)
        v = _latest_named(c) or (versions[-1] if versions else None)
        if v:
            return DatasetVersion(c.parent, c.name, v)
    raise StageError(
        f"dataset {text!r}: no published version found under {c} "
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
