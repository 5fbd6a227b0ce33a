"""glisp serialize and glisp reorder on real Spark, checked against brute force on the ingested graph."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from glisp_core.config import with_values
from glisp_core.dataset.manifest import read_manifest
from glisp_core.errors import FormatError
from glisp_core.partition_format import open_partition
from glisp_testing.graphs import write_dataset
from glisp_testing.partitions import check_reader, open_all, publish_partition, read_ingest, replica_sets

pytestmark = pytest.mark.usefixtures("spark")

P = 4
N = 240  # vids 230..239 are isolated


def _typed_graph(root: Path):
    """3 edge types, weights, timestamps, two hubs, parallel edges of different types, isolated vertices."""
    rng = np.random.default_rng(7)
    src = np.concatenate([rng.integers(0, 230, 900), np.full(150, 3), rng.integers(0, 230, 120), [10, 10, 10, 11]])
    dst = np.concatenate([rng.integers(0, 230, 900), rng.integers(0, 230, 150), np.full(120, 17), [12, 12, 12, 11]])
    m = len(src)
    etype = rng.integers(0, 3, m)
    etype[-4:-1] = [0, 1, 2]  # 10->12 joined by edges of all three types
    vtype = (np.arange(N) % 5 == 0).astype(np.int32)
    dv = write_dataset(
        root,
        "typed",
        src,
        dst,
        num_vertices=N,
        etype=etype,
        edge_types=["cites", "likes", "knows"],
        weight=rng.random(m).astype(np.float32),
        ts=rng.integers(0, 2**40, m),
        vtype=vtype,
        vertex_types=["paper", "author"],
        labels=rng.integers(0, 4, N),
        split=rng.integers(-1, 3, N).astype(np.int8),
        features=rng.random((N, 5)).astype(np.float32),
    )
    # the partitioner contract: all edges of an unordered pair share a partition
    lo, hi = np.minimum(src, dst), np.maximum(src, dst)
    part = ((lo * 7919 + hi * 104729) % 1009) % P
    part[(src == 3) & (np.arange(m) % 3 == 0)] = 2  # a hub split across partitions unevenly
    return dv, part


@pytest.fixture(scope="module")
def typed(tmp_path_factory, spark):
    from glisp_core.config import load_config
    from spark_jobs.serialize.job import run_serialize

    root = tmp_path_factory.mktemp("ser")
    dv, part = _typed_graph(root)
    run = publish_partition(dv, part, P)
    cfg = load_config(env={})
    rec = run_serialize(spark, cfg, dv)  # default run: the latest partition stage
    return dv, part, run, rec, cfg


def test_partitions_match_brute_force(typed) -> None:
    dv, part, run, rec, _ = typed
    assert rec.name == f"serialize/{run}" and set(rec.depends) == {"ingest", f"partition/{run}"}
    g = read_ingest(dv)
    reps = replica_sets(g["src"], g["dst"], part, N, P)
    out_deg, in_deg = np.bincount(g["src"], minlength=N), np.bincount(g["dst"], minlength=N)
    readers = open_all(dv.serialized(run), P)
    for k, r in enumerate(readers):
        sel = part == k
        assert r.num_edge_types == 3 and r.edge_type_names == ["cites", "likes", "knows"]
        assert r.vertex_type_names == ["paper", "author"] and r.weighted and r.timestamped and r.feature_dim == 5
        check_reader(
            r,
            g["src"][sel],
            g["dst"][sel],
            g["etype"][sel],
            num_vertices_global=N,
            out_deg=out_deg,
            in_deg=in_deg,
            reps=reps,
            weight=g["weight"][sel],
            ts=g["ts"][sel],
        )
        lids = np.arange(r.num_vertices)
        assert np.array_equal(r.vertex_type(lids), (np.asarray(r.global_id) % 5 == 0).astype(np.int32))


def test_parquet_copy_rebuilds_ingest_exactly(typed) -> None:
    """(part, edge local id) -> ingest eid via the Parquet copy; the binary fields give back every ingest edge."""
    dv, part, run, _, _ = typed
    g = read_ingest(dv)
    pe = pq.read_table(dv.serialized_edges(run)).to_pandas()
    assert np.array_equal(np.sort(pe["eid"].to_numpy()), np.arange(len(g["eid"])))
    readers = open_all(dv.serialized(run), P)
    rebuilt = {c: np.zeros(len(g["eid"]), g[c].dtype) for c in ("src", "dst", "etype", "weight", "ts")}
    for k, r in enumerate(readers):
        rows = pe[pe["part"] == k].sort_values("leid")
        assert np.array_equal(rows["leid"].to_numpy(), np.arange(r.num_edges))
        eid = rows["eid"].to_numpy()
        gid = np.asarray(r.global_id)
        le = np.arange(r.num_edges)
        rebuilt["src"][eid] = gid[r.edge_src(le)]
        rebuilt["dst"][eid] = gid[np.asarray(r.out_nbr)]
        rebuilt["etype"][eid] = r.edge_type(le)
        rebuilt["weight"][eid] = r.weight
        rebuilt["ts"][eid] = r.timestamp
        assert (part[eid] == k).all()
    for c, v in rebuilt.items():
        assert np.array_equal(v, g[c]), c
    pv = pq.read_table(dv.serialized(run) / "parquet" / "vertices").to_pandas()
    for k, r in enumerate(readers):
        rows = pv[pv["part"] == k].sort_values("lid")
        assert np.array_equal(rows["vid"].to_numpy(), np.asarray(r.global_id))
        assert np.array_equal(rows["master"].to_numpy(), np.asarray(r.master))


def test_every_vertex_mastered_once_with_its_data(typed) -> None:
    dv, part, run, rec, _ = typed
    verts = pq.read_table(dv.vertices).sort_by("vid")
    feats = pq.read_table(dv.features).sort_by("vid")
    feat = np.stack(feats["feat"].to_numpy(zero_copy_only=False)).astype(np.float32)
    labels, split = verts["label"].to_numpy(), verts["split"].to_numpy()
    reps = replica_sets(read_ingest(dv)["src"], read_ingest(dv)["dst"], part, N, P)
    seen = np.zeros(N, int)
    for k, r in enumerate(open_all(dv.serialized(run), P)):
        mg = np.asarray(r.master_gids)
        seen[mg] += 1
        assert np.array_equal(np.asarray(r.features), feat[mg])
        assert np.array_equal(np.asarray(r.labels), labels[mg]) and np.array_equal(np.asarray(r.split), split[mg])
        gid = np.asarray(r.global_id)
        mas = np.asarray(r.master)
        assert np.array_equal(np.sort(gid[mas == k]), mg)
        bits = r.replicas(np.arange(r.num_vertices))
        assert bits[np.arange(r.num_vertices), mas].all()  # the master holds a replica
        interior = np.array([len(reps[v]) == 1 for v in gid])
        assert (mas[interior] == k).all()  # an interior vertex is mastered by its own partition
    assert (seen == 1).all()  # isolated vertices 230..239 included
    mp = rec.counts["master_per_part"]
    assert sum(mp) == N and rec.counts["isolated_vertices"] == 10
    assert max(mp) / (N / P) < 1.1, mp  # least_loaded balances mastered vertices


def test_manifest_footprint_and_idempotence(typed, spark) -> None:
    from spark_jobs.serialize.job import run_serialize

    dv, _, run, rec, cfg = typed
    on_disk = {}
    for k in range(P):
        meta = json.loads((dv.partition_dir(run, k).local / "meta.json").read_text())
        for name, f in meta["fields"].items():
            assert (dv.partition_dir(run, k).local / f["file"]).stat().st_size == f["nbytes"]
            on_disk[name] = on_disk.get(name, 0) + f["nbytes"]
    m = rec.metrics
    assert m["bytes_per_field"] == on_disk
    assert m["bytes_total"] == sum(on_disk.values()) == sum(m["bytes_per_part"])
    assert m["bytes_per_edge"] == pytest.approx(sum(on_disk.values()) / 1174, abs=1e-3)
    assert m["structure_bytes_per_edge"] < m["bytes_per_edge"]
    again = run_serialize(spark, cfg, dv, run=run)  # current: nothing rebuilt
    assert again.completed_at == rec.completed_at and again.fingerprint == rec.fingerprint
    man = read_manifest(dv)
    assert man.stage(f"serialize/{run}").metrics["bytes_total"] == m["bytes_total"]


def test_corrupt_spark_written_partition_is_refused(typed, tmp_path: Path) -> None:
    import shutil

    dv, _, run, _, _ = typed
    d = tmp_path / "p"
    shutil.copytree(dv.partition_dir(run, 1), d)
    f = d / "in_degree.bin"
    b = bytearray(f.read_bytes())
    b[3] ^= 1
    f.write_bytes(bytes(b))
    with pytest.raises(FormatError, match=r"in_degree\.bin"):
        open_partition(d)


ORDERS = ["pds", "ns", "ds", "ps"]


@pytest.fixture(scope="module")
def reorders(typed, spark):
    from spark_jobs.serialize.reorder import run_reorders

    dv, _, _, _, cfg = typed
    return dict(zip(ORDERS, run_reorders(spark, cfg, dv, ORDERS), strict=True))


@pytest.mark.parametrize("order", ORDERS)
def test_reorder_tables(typed, reorders, order: str) -> None:
    dv, _, run, _, _ = typed
    rec = reorders[order]
    assert rec.name == f"reorder/{run}/{order}" and rec.depends.keys() == {"ingest", f"partition/{run}"}
    assert rec.counts["masters_from"] == f"serialize/{run}"  # read, not computed again (the next test)
    t = pq.read_table(dv.reorder(run, order)).to_pandas().sort_values("pos")
    assert np.array_equal(np.sort(t["vid"].to_numpy()), np.arange(N))  # a permutation of all vertices
    assert np.array_equal(t["pos"].to_numpy(), np.arange(N))
    g = read_ingest(dv)
    deg = np.bincount(g["src"], minlength=N) + np.bincount(g["dst"], minlength=N)
    vid, part = t["vid"].to_numpy(), t["part"].to_numpy()
    assert np.array_equal(t["degree"].to_numpy(), deg[vid])
    keys = {"pds": (vid, -deg[vid], part), "ns": (vid,), "ds": (vid, -deg[vid]), "ps": (vid, part)}[order]
    assert (np.diff(np.lexsort(keys)) == 1).all()  # rows in pos order are sorted by the order's keys
    # inference partition == serialize's master (one shared rule)
    master = np.full(N, -1)
    for r in open_all(dv.serialized(run), P, verify=False):
        master[np.asarray(r.master_gids)] = r.part_id
    assert np.array_equal(part, master[vid])
    for k in range(P):
        pp = t[t["part"] == k]["part_pos"].to_numpy()
        assert np.array_equal(pp, np.arange(len(pp)))


def test_reorder_reads_the_masters_serialize_computed_only_where_they_are_the_same(typed, spark, tmp_path) -> None:
    """serialize's ``masters/`` table is what :func:`compute_masters` gives for the same inputs; reorder reads it
    only when serialize ran under the same rule and the same record kind, and computes them otherwise."""
    from dataclasses import replace

    from glisp_core.storage.uri import parse_uri
    from glisp_testing.stores import copy_version
    from spark_jobs.serialize.master import compute_masters, published_masters
    from spark_jobs.serialize.reorder import run_reorder

    src, _, run, rec, cfg = typed
    dv = copy_version(src, parse_uri(tmp_path), skip=("reorder",))  # this test publishes a reorder of its own
    man = read_manifest(dv)
    got = published_masters(spark, man, run, P, "least_loaded")
    assert got is not None and rec.counts["masters_rows"] == N
    mine = compute_masters(spark, dv, run, P, "least_loaded")
    try:
        a = got.df.toPandas().sort_values("vid")
        b = mine.df.select("vid", "master").toPandas().sort_values("vid")
        assert np.array_equal(a["vid"], np.arange(N)) and np.array_equal(a["master"], b["master"])
        g = read_ingest(dv)  # the build tasks wrote every vertex's degree over every edge: what reorder orders by
        assert np.array_equal(a["degree"], np.bincount(g["src"], minlength=N) + np.bincount(g["dst"], minlength=N))
        assert (got.per_part, got.isolated) == (mine.per_part, mine.isolated) and mine.isolated == 10
        assert got.per_part == rec.counts["master_per_part"] and sum(got.per_part) == N
    finally:
        got.unpersist()
        mine.unpersist()
    assert published_masters(spark, man, run, P, "hash") is None  # serialize ran under another rule
    older = replace(man.stages[f"serialize/{run}"], counts={**rec.counts})
    del older.counts["masters_rows"]  # a record of a build that did not write the table
    man.stages[f"serialize/{run}"] = older
    assert published_masters(spark, man, run, P, "least_loaded") is None
    hashed = run_reorder(spark, with_values(cfg, "serialize", master_rule="hash"), dv, order="ps")
    assert hashed.counts["masters_from"] == "computed"
    mh = compute_masters(spark, dv, run, P, "hash")
    try:
        want = mh.df.select("vid", "master").toPandas().set_index("vid")["master"]
        assert hashed.counts["vertices_per_part"] == mh.per_part
    finally:
        mh.unpersist()
    t = pq.read_table(dv.reorder(run, "ps")).to_pandas()
    assert np.array_equal(t["part"].to_numpy(), want.loc[t["vid"]].to_numpy())
    deg = np.bincount(g["src"], minlength=N) + np.bincount(g["dst"], minlength=N)
    assert np.array_equal(t["degree"].to_numpy(), deg[t["vid"].to_numpy()])  # counted by reorder itself here


@pytest.mark.parametrize(("order", "where"), [("pds", "driver"), ("ds", "driver"), ("pds", "executors")])
def test_reorder_lookup_arrays(typed, reorders, spark, tmp_path, order: str, where: str) -> None:
    """The stage's ``_index`` arrays (filled in the driver at this size) and the executors' (the path of large
    graphs, written here from the same table) answer what the table says."""
    from glisp_core.dataset.order_index import OrderIndex, index_url
    from glisp_spark.tables import read_parquet
    from spark_jobs.serialize.order_index import write_order_index

    dv, _, run, _, _ = typed
    rec = reorders[order]
    counts = tuple(int(c) for c in rec.counts["vertices_per_part"])
    url = index_url(dv.reorder(run, order))
    assert rec.counts["index_written_by"] == "driver"
    if where == "executors":
        url = str(tmp_path / "index")
        got = write_order_index(read_parquet(spark, dv.reorder(run, order)), url, list(counts), in_driver=0)
        assert got["written_by"] == "executors" and got["chunks_by_vid"] == got["chunks_by_part"] == 1
    oi = OrderIndex(url, counts)
    t = pq.read_table(dv.reorder(run, order)).to_pandas()
    probe = np.random.default_rng(0).permutation(t["vid"].to_numpy())
    at = t.set_index("vid").loc[probe]
    assert np.array_equal(oi.pos(probe), at["pos"].to_numpy())
    starts = np.arange(P) * 1000  # another layout's partition starts: row = start + part_pos
    assert np.array_equal(oi.rows(probe, starts), starts[at["part"].to_numpy()] + at["part_pos"].to_numpy())
    for k in range(P):
        mine = t[t["part"] == k].sort_values("part_pos")["vid"].to_numpy()
        assert np.array_equal(oi.vertices(k), mine)


def test_empty_partition_and_hash_rule(tmp_path: Path, spark, cfg) -> None:
    """A partition that receives no edge and no vertex is still written (empty), and 'hash' masters work."""
    from spark_jobs.serialize.job import run_serialize

    src = np.array([0, 1, 2, 3, 4, 0])
    dst = np.array([1, 2, 3, 4, 0, 2])
    dv = write_dataset(tmp_path, "ring", src, dst, num_vertices=5)
    run = publish_partition(dv, np.array([0, 0, 1, 1, 1, 0]), 3)
    rec = run_serialize(spark, with_values(cfg, "serialize", master_rule="hash", parquet_copy=False), dv, run=run)
    readers = open_all(dv.serialized(run), 3)
    assert readers[2].num_vertices == 0 and readers[2].num_edges == 0
    assert rec.counts["edges_per_part"] == [3, 3, 0]
    seen = np.concatenate([np.asarray(r.master_gids) for r in readers])
    assert np.array_equal(np.sort(seen), np.arange(5))
    assert not dv.store.exists(dv.serialized(run) / "parquet")


def test_bad_assignment_names_the_file(tmp_path: Path, spark, cfg) -> None:
    from glisp_core.errors import BadInputError
    from spark_jobs.serialize.job import run_serialize

    dv = write_dataset(tmp_path, "bad", np.array([0, 1, 2]), np.array([1, 2, 0]))
    run = publish_partition(dv, np.array([0, 1, 5]), 2)  # part 5 >= P
    with pytest.raises(BadInputError, match=r"assignment, column 'part': 1 of 3 rows are outside \[0, 2\)"):
        run_serialize(spark, cfg, dv, run=run)
    assert f"serialize/{run}" not in read_manifest(dv).stages


@pytest.mark.parametrize("how", ["repeated", "repeated_elsewhere", "dropped"])
def test_edges_without_an_assignment_row_fail_naming_them(tmp_path: Path, spark, cfg, how: str) -> None:
    """An edge no assignment row names fails the stage with its eid. ``repeated``: eid 1's row names eid 0 again
    (in eid 0's partition), so the row count is right and the build's own join reports the gap;
    ``repeated_elsewhere``: in another partition, whose build then fails, and the stage names the cause;
    ``dropped``: the check's row count finds it."""
    import pyarrow as pa

    from glisp_core.errors import BadInputError
    from spark_jobs.serialize.job import run_serialize

    dv = write_dataset(tmp_path, "gap", np.array([0, 1, 2, 3]), np.array([1, 2, 3, 0]))
    run = publish_partition(dv, np.array([0, 1, 1, 0]), 2)
    files = sorted(Path(dv.assignment(run).path).glob("*.parquet"))
    t = pa.concat_tables([pq.read_table(f) for f in files]).sort_by("eid")
    eid = t["eid"].to_numpy().copy()
    lost = int(eid[1])
    if how.startswith("repeated"):
        eid[1] = eid[0]
        t = t.set_column(0, "eid", pa.array(eid))
        if how == "repeated":
            part = t["part"].to_numpy().copy()
            part[1] = part[0]
            t = t.set_column(1, "part", pa.array(part))
    else:
        t = t.filter(pa.array(eid != lost))
    for f in files:
        f.unlink()
    pq.write_table(t, files[0])
    problem = rf"assignment, column 'eid': 1 of 4 rows of ingest/edges have no assignment row \(e\.g\. {lost}\)"
    with pytest.raises(BadInputError, match=problem):
        run_serialize(spark, cfg, dv, run=run)
    assert f"serialize/{run}" not in read_manifest(dv).stages


def test_cli_commands_reuse_current_stages(typed, reorders, capsys) -> None:
    from glisp_app.cli import main

    dv, _, run, rec, _ = typed
    assert main(["serialize", str(dv.path), "--partition", run]) == 0
    # current: the one up-to-date line, not the old summary as if it had run
    assert capsys.readouterr().out == f"serialize/{run}: up to date (use --force to run it again)\n"
    assert read_manifest(dv).stages[f"serialize/{run}"].completed_at == rec.completed_at
    assert main(["reorder", str(dv.path), "--order", "ps,ds"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [f"reorder/{run}/{o}: up to date (use --force to run it again)" for o in ("ps", "ds")]
    assert main(["reorder", str(dv.path), "--order", "xyz"]) == 1
    assert "expected one of pds, ns, ds, ps (got 'xyz')" in capsys.readouterr().err
