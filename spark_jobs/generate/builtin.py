"""Built-in real graphs: the Parquet files inside the ``graphdatascience`` wheel, read in place.

Each built-in is just an ``IngestConfig`` pointing at those files, so it goes through the same ingest
path, checks and statistics as any user's graph. Nothing contacts a service.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

from glisp_core.config import EdgeSource, IngestConfig, VertexSource
from glisp_core.errors import GlispError
from glisp_core.storage.store import store_for
from glisp_core.storage.uri import StoreURI, parse_uri

# name -> published counts (for tests and the README)
BUILTIN_COUNTS: dict[str, dict[str, int]] = {
    "cora": {"vertices": 2708, "edges": 5429},
    "lastfm": {"vertices": 1892 + 18022, "edges": 12717 + 92834 + 186479},
    "imdb": {"vertices": 12772, "edges": 13983 + 4661},
}


def resources_dir() -> Path:
    spec = importlib.util.find_spec("graphdatascience")
    if spec is None or spec.origin is None:
        raise GlispError(
            "built-in datasets need the 'graphdatascience' package (it ships them as Parquet); "
            "install it with: pip install 'glisp[datasets]'"
        )
    return Path(spec.origin).parent / "resources"


def builtin_names() -> list[str]:
    return sorted(BUILTIN_COUNTS)


def builtin_config(name: str, base: IngestConfig | None = None) -> IngestConfig:
    """The ingest config of a built-in graph; ``base`` supplies policies (bad input, duplicates, ...)."""
    r = resources_dir()
    base = base or IngestConfig()

    def pq(rel: str) -> str:
        return str(r / f"{rel}.parquet.gzip")

    def edge(rel: str, weight: str = "", timestamp: str = "") -> EdgeSource:
        return EdgeSource(
            path=pq(rel),
            format="parquet",
            src="sourceNodeId",
            dst="targetNodeId",
            etype="relationshipType",
            weight=weight,
            timestamp=timestamp,
        )

    def vertex(rel: str, label: str = "", features: str = "") -> VertexSource:
        return VertexSource(path=pq(rel), format="parquet", id="nodeId", vtype="labels", label=label, features=features)

    if name == "cora":
        edges = [edge("cora/cora_rels")]
        vertices = [vertex("cora/cora_nodes", label="subject", features="features")]
    elif name == "lastfm":
        edges = [
            edge("lastfm/user_friend_df_directed"),
            edge("lastfm/user_listen_artist_rels", weight="weight"),
            edge("lastfm/user_tag_artist_rels", timestamp="timestamp"),
        ]
        vertices = [vertex("lastfm/user_nodes"), vertex("lastfm/artist_nodes")]
    elif name == "imdb":
        edges = [edge("imdb/imdb_acted_in"), edge("imdb/imdb_directed_in")]
        vertices = [
            vertex("imdb/imdb_movies_with_genre", label="genre", features="plot_keywords"),
            vertex("imdb/imdb_movies_without_genre", features="plot_keywords"),
            vertex("imdb/imdb_actors", features="plot_keywords"),
            vertex("imdb/imdb_directors", features="plot_keywords"),
        ]
    else:
        raise GlispError(f"unknown built-in dataset {name!r} (available: {', '.join(builtin_names())})")
    return IngestConfig(**{**_policies(base), "graph": base.graph or name, "edges": edges, "vertices": vertices})


def _policies(base: IngestConfig) -> dict[str, Any]:
    import dataclasses

    return {f.name: getattr(base, f.name) for f in dataclasses.fields(base) if f.name not in ("edges", "vertices")}


def share_builtin(ing: IngestConfig, into: StoreURI | str | os.PathLike[str]) -> IngestConfig:
    """``ing`` reading copies of the built-in files under ``into`` instead of the driver's site-packages.

    Ingest's executors read the input files themselves; on a cluster they cannot see the driver's
    virtualenv, so the files (a few hundred KiB) are copied through the store to ``<root>/_builtin``, which
    every executor reads (a shared disk, or the bucket of an object-store root). An unchanged copy is kept,
    so a rerun fingerprints the same inputs.
    """
    import dataclasses

    res = resources_dir().resolve()
    into = parse_uri(into)
    if into.is_local:
        into = parse_uri(str(Path(into.path).resolve()))
    store = store_for(into)
    store.check()  # no credentials, no bucket, no endpoint: said before the first copy

    def moved(path: str) -> str:
        src = Path(path).resolve()
        if not src.is_relative_to(res):
            return path
        dst = into.join(*src.relative_to(res).parts)
        data = src.read_bytes()
        try:
            same = store.read_bytes(dst) == data
        except FileNotFoundError:
            same = False
        if not same:
            store.write_bytes(dst, data)  # whole or not at all
        return str(dst)

    edges = [dataclasses.replace(e, path=moved(e.path)) for e in ing.edges]
    vertices = [dataclasses.replace(v, path=moved(v.path)) for v in ing.vertices]
    return dataclasses.replace(ing, edges=edges, vertices=vertices)
