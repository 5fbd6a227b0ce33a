"""Small graphs for tests, written straight into the ingest contract (no Spark needed).

Ingest has its own tests; later stages' tests use these builders so that each stage is tested on
exactly the graph shape it needs (a hub, several components, typed and weighted edges).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pyarrow as pa

from glisp_core.dataset.layout import DatasetVersion
from glisp_core.dataset.manifest import Manifest, StageRecord, now_iso
from glisp_core.dataset.publish import VersionPublisher, fingerprint
from glisp_core.dataset.records import create_record, current_record
from glisp_core.storage.store import Store


def rmat_edges(
    scale: int, edge_factor: int = 16, seed: int = 0, a=0.57, b=0.19, c=0.19
) -> tuple[np.ndarray, np.ndarray]:
    """Directed R-MAT edge list in numpy (test-sized; the Spark generator is spark_jobs.generate.rmat)."""
    rng = np.random.default_rng(seed)
    m = edge_factor << scale
    src = np.zeros(m, np.int64)
    dst = np.zeros(m, np.int64)
    for level in range(scale):
        r = rng.random(m)
        right = ((r >= a) & (r < a + b)) | (r >= a + b + c)
        down = r >= a + b
        src |= down.astype(np.int64) << level
        dst |= right.astype(np.int64) << level
    perm = rng.permutation(1 << scale)
    return perm[src], perm[dst]


def _write_vertices(
    store: Store,
    tmp: DatasetVersion,
    n: int,
    vtype: np.ndarray,
    labels: np.ndarray | None,
    split: np.ndarray | None,
    orig_ids: list[str] | None,
) -> None:
    """The ingest contract's vertex table and id map, one row per vid in [0, n)."""
    vcols = {
        "vid": np.arange(n, dtype=np.int64),
        "vtype": vtype,
        "label": pa.array(labels, pa.int64()) if labels is not None else pa.nulls(n, pa.int64()),
        "split": np.asarray(split, np.int8) if split is not None else np.full(n, -1, np.int8),
    }
    store.write_table(pa.table(vcols), tmp.vertices / "part-00000.parquet")
    ids = orig_ids or pa.array(np.arange(n)).cast(pa.string())
    store.write_table(
        pa.table({"vid": np.arange(n, dtype=np.int64), "orig_id": ids, "vtype": vtype}),
        tmp.idmap / "part-00000.parquet",
    )


def _write_features(store: Store, tmp: DatasetVersion, n: int, features: np.ndarray) -> int:
    """The feature table (one list<float> row per vid); returns the feature dimension."""
    fdim = int(features.shape[1])
    arr = pa.FixedSizeListArray.from_arrays(pa.array(features.ravel()), fdim)
    store.write_table(
        pa.table({"vid": np.arange(n, dtype=np.int64), "feat": arr.cast(pa.list_(pa.float32()))}),
        tmp.features / "part-00000.parquet",
    )
    return fdim


def write_dataset(
    root: Path,
    graph: str,
    src: np.ndarray,
    dst: np.ndarray,
    *,
    num_vertices: int | None = None,
    etype: np.ndarray | None = None,
    edge_types: list[str] | None = None,
    weight: np.ndarray | None = None,
    ts: np.ndarray | None = None,
    vtype: np.ndarray | None = None,
    vertex_types: list[str] | None = None,
    labels: np.ndarray | None = None,
    split: np.ndarray | None = None,
    features: np.ndarray | None = None,
    directed: bool = True,
    version: str = "v1",
    orig_ids: list[str] | None = None,
) -> DatasetVersion:
    """Publish a dataset version whose ingest stage holds exactly these arrays."""
    src = np.asarray(src, np.int64)
    dst = np.asarray(dst, np.int64)
    n = int(num_vertices if num_vertices is not None else (max(src.max(initial=-1), dst.max(initial=-1)) + 1))
    m = len(src)
    etype = np.zeros(m, np.int32) if etype is None else np.asarray(etype, np.int32)
    edge_types = edge_types or [f"e{i}" for i in range(int(etype.max(initial=0)) + 1)]
    vtype = np.zeros(n, np.int32) if vtype is None else np.asarray(vtype, np.int32)
    vertex_types = vertex_types or [f"v{i}" for i in range(int(vtype.max(initial=0)) + 1)]
    with VersionPublisher(root, graph, version) as pub:
        store = pub.dv.store
        tmp = pub.tmp_dv
        cols = {"eid": np.arange(m, dtype=np.int64), "src": src, "dst": dst, "etype": etype}
        if weight is not None:
            cols["weight"] = np.asarray(weight, np.float32)
        if ts is not None:
            cols["ts"] = np.asarray(ts, np.int64)
        store.write_table(pa.table(cols), tmp.edges / "part-00000.parquet")
        _write_vertices(store, tmp, n, vtype, labels, split, orig_ids)
        fdim = 0 if features is None else _write_features(store, tmp, n, np.asarray(features, np.float32))
        schema = {
            "directed": directed,
            "num_vertices": n,
            "num_edges": m,
            "vertex_types": vertex_types,
            "edge_types": edge_types,
            "weighted": weight is not None,
            "timestamped": ts is not None,
            "feature_dim": fdim,
            "num_classes": int(labels.max() + 1) if labels is not None else 0,
            "id_type": "string" if orig_ids else "int",
        }
        rec = StageRecord(
            name="ingest",
            path="ingest",
            fingerprint=fingerprint("test", graph, m, n, int(src.sum()), int(dst.sum())),
            counts={"vertices": n, "edges": m},
            completed_at=now_iso(),
        )
        man = Manifest(graph=graph, version=version, created_at=now_iso(), schema=schema, stages={"ingest": rec})
        return pub.commit(man)


def ego_network_edges(n: int = 3000, hubs: int = 6, core: int = 60, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A dense ego-network-like graph (the shape that broke edge balance): a few hubs linked to most
    vertices, a dense core (a near-clique), and sparse power-law links around them. Undirected: both
    directions of every pair, as ``glisp ingest --undirected`` stores them."""
    rng = np.random.default_rng(seed)
    pairs = []
    for h in range(hubs):  # each hub reaches 40-90% of the vertices
        nb = rng.choice(np.arange(hubs, n), int(rng.uniform(0.4, 0.9) * (n - hubs)), replace=False)
        pairs.append(np.stack([np.full(len(nb), h), nb], 1))
    c = np.arange(hubs, hubs + core)
    a, b = np.triu_indices(core, 1)
    keep = rng.random(len(a)) < 0.8
    pairs.append(np.stack([c[a[keep]], c[b[keep]]], 1))
    w = 1.0 / np.arange(1, n + 1) ** 0.8  # sparse preferential links
    s = rng.choice(n, 4 * n, p=w / w.sum())
    t = rng.integers(0, n, 4 * n)
    pairs.append(np.stack([s, t], 1))
    return _simple_undirected(np.concatenate(pairs))


def ego_circles_edges(seed: int = 0) -> tuple[tuple[np.ndarray, np.ndarray], int]:
    """A facebook-like social ego-network stand-in: 10 egos with 59-1,045 friends (the sizes of SNAP's
    ego-Facebook), each friend in about three overlapping dense circles of lognormal size (pairs inside
    with probability 0.45), sparse links inside each ego net, 3 % of friends shared with earlier nets and
    300 links between nets: 4,177 vertices, 83,125 pairs at seed 0. Returns ((src, dst), num_vertices),
    undirected with both directions."""
    rng = np.random.default_rng(seed)

    def inner(own: np.ndarray, _: int) -> list[np.ndarray]:
        out = []
        circles = max(2, len(own) // 18)
        sizes = np.clip(rng.lognormal(3.3, 0.6, circles).astype(int), 5, len(own))
        for c in range(circles):
            mem = rng.choice(own, min(sizes[c], len(own)), replace=False)
            a, b = np.triu_indices(len(mem), 1)
            keep = rng.random(len(a)) < 0.45
            out.append(np.stack([mem[a[keep]], mem[b[keep]]], 1))
        return [*out, np.stack([rng.choice(own, 2 * len(own)), rng.choice(own, 2 * len(own))], 1)]

    return _ego_nets(rng, [size for size, _ in FACEBOOK_EGOS], inner)


def _ego_nets(
    rng: np.random.Generator, sizes: list[int], inner: Callable[[np.ndarray, int], list[np.ndarray]]
) -> tuple[tuple[np.ndarray, np.ndarray], int]:
    """Ego nets of the given friend counts (each ego linked to its friends, 3 % of a net's friends taken from
    earlier nets), ``inner(friends, net)``'s pairs inside each, 300 random links between nets."""
    pairs: list[np.ndarray] = []
    members: list[np.ndarray] = []
    nxt = 0
    for i, size in enumerate(sizes):
        ego, own = nxt, np.arange(nxt + 1, nxt + 1 + size)
        nxt += 1 + size
        if members:
            k = int(0.03 * size)
            own = np.concatenate([own[k:], rng.choice(np.concatenate(members), k, replace=False)])
        members.append(own)
        pairs.append(np.stack([np.full(len(own), ego), own], 1))
        pairs += inner(own, i)
    pairs.append(np.stack([rng.choice(nxt, 300), rng.choice(nxt, 300)], 1))
    return _simple_undirected(np.concatenate(pairs)), nxt


# SNAP ego-Facebook's ten ego nets as published on its page: (friends, pairs among the friends). Their density
# differs 12-fold (ego 1912: 755 friends, 30,025 pairs; ego 3437: 547 friends, 4,813 pairs).
FACEBOOK_EGOS = (
    (1045, 26749),
    (792, 14024),
    (755, 30025),
    (547, 4813),
    (347, 2519),
    (227, 3192),
    (159, 1693),
    (170, 1656),
    (66, 270),
    (59, 146),
)


def ego_dense_edges(seed: int = 0, q: float = 0.85) -> tuple[tuple[np.ndarray, np.ndarray], int]:
    """A second ego-network stand-in, closer to ego-Facebook than :func:`ego_circles_edges`: each ego net
    reaches its own published pair count with near-cliques (circles of lognormal size, pairs inside with
    probability ``q``; friends join circles with a skewed affinity, so a few are in many), so the nets' densities
    differ as the real ones do (the vertex and edge balance then pull against each other), and clustering is
    high. 3 % of friends are shared with earlier nets, 300 links join nets. Returns ((src, dst), n)."""
    rng = np.random.default_rng(seed)
    return _ego_nets(
        rng, [size for size, _ in FACEBOOK_EGOS], lambda own, i: [_circles(rng, own, FACEBOOK_EGOS[i][1], q)]
    )


def ego_separable_edges(
    seed: int = 0, q: float = 0.85, second: float = 0.1, egos: tuple[tuple[int, int], ...] = FACEBOOK_EGOS
) -> tuple[tuple[np.ndarray, np.ndarray], int]:
    """A third ego-network stand-in: each net's friends split into disjoint circles (a tenth of a circle's size
    joins it from elsewhere in the net), near-cliques sized so the net reaches its published pair count: nets
    whose circles can be cut apart cheaply, as a partitioner that ignores vertex balance would; ``egos`` (friends,
    pairs) per net, ego-Facebook's by default. Returns ((src, dst), n)."""
    rng = np.random.default_rng(seed)

    def inner(own: np.ndarray, i: int) -> list[np.ndarray]:
        size = max(4, round(2 * egos[i][1] / (len(own) * q)))
        perm, out = rng.permutation(own), []
        for a in range(0, len(own), size):
            extra = rng.choice(own, int(second * len(perm[a : a + size])), replace=False)
            mem = np.unique(np.concatenate([perm[a : a + size], extra]))
            x, y = np.triu_indices(len(mem), 1)
            keep = rng.random(len(x)) < q
            out.append(np.stack([mem[x[keep]], mem[y[keep]]], 1))
        return out

    return _ego_nets(rng, [size for size, _ in egos], inner)


def _circles(rng: np.random.Generator, own: np.ndarray, target: int, q: float) -> np.ndarray:
    """Near-cliques over ``own`` until they hold ``target`` distinct pairs (then trimmed to it)."""
    w = rng.pareto(1.5, len(own)) + 1.0
    w /= w.sum()
    got = np.zeros(0, np.int64)
    n = int(own.max()) + 1
    while len(got) < target:
        size = int(np.clip(rng.lognormal(3.0, 0.7), 4, len(own)))
        mem = rng.choice(own, size, replace=False, p=w)
        a, b = np.triu_indices(size, 1)
        keep = rng.random(len(a)) < q
        lo, hi = np.minimum(mem[a[keep]], mem[b[keep]]), np.maximum(mem[a[keep]], mem[b[keep]])
        got = np.union1d(got, lo * n + hi)
    got = rng.permutation(got)[:target]  # the last circle overshoots: a random subset of the pairs
    return np.stack([got // n, got % n], 1)


def chains_edges(chains: int = 1500, long_chains: int = 4, long_len: int = 3000, seed: int = 0):
    """Many small components (paths of 1-12 edges, triangles) plus a few very long chains: the web-crawl
    shape reached only by single-seed expansion. Undirected, both directions of every pair."""
    rng = np.random.default_rng(seed)
    pairs, base = [], 0
    for _ in range(chains):
        k = int(rng.integers(1, 13))
        v = np.arange(base, base + k + 1)
        pairs.append(np.stack([v[:-1], v[1:]], 1))
        if k == 2:
            pairs.append(np.array([[v[0], v[2]]]))  # a triangle
        base += k + 1
    for _ in range(long_chains):
        v = np.arange(base, base + long_len + 1)
        pairs.append(np.stack([v[:-1], v[1:]], 1))
        base += long_len + 1
    return _simple_undirected(np.concatenate(pairs))


def grid_edges(side: int, shortcuts: float = 0.001, seed: int = 0) -> tuple[tuple[np.ndarray, np.ndarray], int]:
    """A side x side grid with ``shortcuts`` * its edges added between random vertices: a high-diameter
    graph (a road network's shape; diameter about 2 * side with few shortcuts), every degree about 4, ids
    in random order (not the grid's). Returns ((src, dst), num_vertices), undirected with both directions."""
    rng = np.random.default_rng(seed)
    v = np.arange(side * side).reshape(side, side)
    a = np.concatenate([v[:, :-1].ravel(), v[:-1, :].ravel()])
    b = np.concatenate([v[:, 1:].ravel(), v[1:, :].ravel()])
    k = int(len(a) * shortcuts)
    a = np.concatenate([a, rng.integers(0, side * side, k)])
    b = np.concatenate([b, rng.integers(0, side * side, k)])
    perm = rng.permutation(side * side)
    return _simple_undirected(np.stack([perm[a], perm[b]], 1)), side * side


def giant_and_small_components_edges(
    seed: int = 2, scale: int = 10, pairs: int = 400, triangles: int = 40
) -> tuple[tuple[np.ndarray, np.ndarray], int]:
    """An R-MAT giant component (edge factor 4) beside many two-vertex components and triangles: citeseer's
    shape (438 components), on which replica moves leave the vertex balance high at large p. Returns
    ((src, dst), num_vertices), undirected with both directions."""
    s, d = rmat_edges(scale, 4, seed=seed)
    n0 = 1 << scale
    a = n0 + 2 * np.arange(pairs)
    t = n0 + 2 * pairs + 3 * np.arange(triangles)
    src = np.concatenate([s, a, t, t + 1, t])
    dst = np.concatenate([d, a + 1, t + 1, t + 2, t + 2])
    return _simple_undirected(np.stack([src, dst], 1)), n0 + 2 * pairs + 3 * triangles


def _simple_undirected(pairs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    pairs = pairs[pairs[:, 0] != pairs[:, 1]]
    lo, hi = pairs.min(1), pairs.max(1)
    u = np.unique(np.stack([lo, hi], 1), axis=0)
    return np.concatenate([u[:, 0], u[:, 1]]).astype(np.int64), np.concatenate([u[:, 1], u[:, 0]]).astype(np.int64)


def write_records(dv: DatasetVersion, records: Iterable[StageRecord]) -> None:
    """Publish hand-made stage records into ``dv`` (tests of readers of the manifest), each as its stage's next,
    with the output it names (an empty marker where there is none: a record never names nothing)."""
    for rec in records:
        if not dv.store.exists(dv.path / rec.path):
            dv.store.write_bytes(dv.path / rec.path / "_SUCCESS", b"")
        cur = current_record(dv.store, dv.path, rec.name)
        assert create_record(dv.store, dv.path, rec.name, (cur[0] if cur else 0) + 1, asdict(rec))
