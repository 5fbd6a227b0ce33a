"""``IngestPlan``: what the driver knows about a run before reading a row: sources, files, id handling.

Why apart from the phases: the fingerprint phase needs the files before anything is read, and every later
phase asks the same few questions of the config (typed endpoints? weights? integer id columns?).
"""

from __future__ import annotations

from pathlib import Path

from glisp_core.config import IngestConfig
from glisp_core.dataset.layout import check_name
from glisp_core.errors import ConfigError
from glisp_core.storage.store import store_for
from glisp_core.storage.uri import StoreURI, parse_uri
from spark_jobs.ingest.arrowread import open_parquet
from spark_jobs.ingest.readers import detect_format, expand_paths


class IngestPlan:
    """The config checked, every source's files expanded, and what follows from them."""

    def __init__(self, ing: IngestConfig) -> None:
        self.ing = ing
        if not ing.graph:
            raise ConfigError("ingest", "graph", "a graph name is required (got '')")
        check_name("graph", ing.graph)
        if not ing.edges:
            raise ConfigError("ingest", "edges", "at least one [[ingest.edges]] source is required (got [])")
        self.typed = _typed_endpoints(ing)
        self.edge_files = [expand_paths(e.path, f"ingest.edges[{i}]") for i, e in enumerate(ing.edges)]
        self.vertex_files = [expand_paths(v.path, f"ingest.vertices[{i}]") for i, v in enumerate(ing.vertices)]
        self.npy_files = _npy_files(ing, self.vertex_files)
        self.files: list[str] = [str(f) for fs in self.edge_files + self.vertex_files for f in fs]

    @property
    def weighted(self) -> bool:
        return any(e.weight for e in self.ing.edges)

    @property
    def timestamped(self) -> bool:
        return any(e.timestamp for e in self.ing.edges)

    def all_input_paths(self) -> list[StoreURI]:
        seen = dict.fromkeys([f for fs in self.edge_files + self.vertex_files for f in fs] + self.npy_files)
        return list(seen)


def _typed_endpoints(ing: IngestConfig) -> bool:
    """Whether the edge tables name their endpoints' vertex types; then every table and vertex table must."""
    typed = any(bool(e.src_type or e.dst_type) for e in ing.edges)
    if typed and not all(bool(e.src_type and e.dst_type) for e in ing.edges):
        i = next(i for i, e in enumerate(ing.edges) if not (e.src_type and e.dst_type))
        raise ConfigError(
            "ingest",
            f"edges[{i}].src_type/dst_type",
            "when any edge table names endpoint vertex types, every one must name both "
            f"(got src_type={ing.edges[i].src_type!r}, dst_type={ing.edges[i].dst_type!r})",
        )
    if typed:
        for i, v in enumerate(ing.vertices):
            if not (v.vtype or v.vertex_type):
                raise ConfigError(
                    "ingest",
                    f"vertices[{i}].vtype",
                    "edge tables are typed, so vertex tables must give a vtype column or a vertex_type (got neither)",
                )
    return typed


def npy_uri(path: str) -> StoreURI:
    """A .npy feature file as a URI: a local path resolved (symlinks followed), or the URI as given."""
    if "://" in path and not path.startswith("file://"):
        return parse_uri(path, "ingest.vertices.features_npy")
    return parse_uri(str(Path(path.removeprefix("file://")).resolve()))


def _is_file(u: StoreURI) -> bool:
    store = store_for(u)
    return store.exists(u) and not store.is_dir(u)


def _npy_files(ing: IngestConfig, vertex_files: list[list[StoreURI]]) -> list[StoreURI]:
    """The .npy feature files (inputs too: they are fingerprinted), checked to exist and to align."""
    out: list[StoreURI] = []
    for i, v in enumerate(ing.vertices):
        for key in ("features_npy", "features_npy_ids"):
            p = getattr(v, key)
            if p:
                u = npy_uri(p)
                if not _is_file(u):
                    raise ConfigError("ingest", f"vertices[{i}].{key}", f"file not found (got {p!r})")
                out.append(u)
        if v.features_npy and not v.features_npy_ids and len(vertex_files[i]) != 1:
            raise ConfigError(
                "ingest",
                f"vertices[{i}].features_npy_ids",
                "features_npy aligned by row order needs a single-file vertex table; give "
                f"features_npy_ids (got {len(vertex_files[i])} files)",
            )
    return out


def ids_native_long(plan: IngestPlan) -> bool:
    """True when every id column is an integer column (Parquet), so ids never go through strings."""
    if plan.ing.id_type == "string":
        return False
    import pyarrow as pa
    import pyarrow.parquet as pq

    for i, e in enumerate(plan.ing.edges):
        if detect_format(e, plan.edge_files[i], f"ingest.edges[{i}]") != "parquet":
            return False
        with open_parquet(plan.edge_files[i][0]) as f:
            sch = pq.read_schema(f)
        for c in (e.src, e.dst):
            if c not in sch.names or not pa.types.is_integer(sch.field(c).type):
                return False
    for i, v in enumerate(plan.ing.vertices):
        if detect_format(v, plan.vertex_files[i], f"ingest.vertices[{i}]") != "parquet":
            return False
        with open_parquet(plan.vertex_files[i][0]) as f:
            sch = pq.read_schema(f)
        if v.id not in sch.names or not pa.types.is_integer(sch.field(v.id).type):
            return False
    return True
