"""Incremental refresh (``partition.incremental``) on real Spark and real files: a base version with a
published run, a new snapshot whose vids are shuffled, some rows removed, rows added (inside the base's
partition 0, with new vertices, duplicates of kept rows), checked against a pandas match by original ids."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from glisp_core.config import with_values
from glisp_core.dataset.manifest import read_manifest
from glisp_testing.graphs import rmat_edges, write_dataset
from glisp_testing.partitions import publish_partition
from spark_jobs.partition.job import run_partition

P = 4


def _orig(dv) -> np.ndarray:
    return pd.read_parquet(dv.idmap).sort_values("vid")["orig_id"].to_numpy()


def _rows(dv, run=None) -> pd.DataFrame:
    """Edge rows with original endpoint ids and the occurrence rank of their (src, dst) key."""
    e = pd.read_parquet(dv.edges).sort_values("eid")
    ids = _orig(dv)
    e["os"], e["od"] = ids[e.src.to_numpy()], ids[e.dst.to_numpy()]
    e["occ"] = e.groupby(["os", "od"]).cumcount()
    if run is not None:
        e = e.merge(pd.read_parquet(dv.assignment(run)), on="eid", how="left")
    return e


@pytest.fixture(scope="module")
def snapshots(tmp_path_factory):
    """v1 (base, partitioned by min(src, dst) % 4) and v2 (vids permuted, 5% removed, rows added)."""
    rng = np.random.default_rng(7)
    root = tmp_path_factory.mktemp("incremental")
    src, dst = rmat_edges(8, 8, seed=3)
    n = 256
    names = [f"n{i}" for i in range(n)]
    v1 = write_dataset(root, "g", src, dst, num_vertices=n, orig_ids=names, version="v1")
    run = publish_partition(v1, np.minimum(src, dst) % P, P, algorithm="hdrf")
    # v2 in original ids: drop 5%, duplicate 3 kept rows, 300 rows among ids = 0 mod 4 (all held by
    # partition 0 in v1), 20 rows to 10 new vertices
    keep = rng.random(len(src)) >= 0.05
    s2, d2 = [list(np.asarray(names, object)[x[keep]]) for x in (src, dst)]
    dup = np.flatnonzero(keep)[:3]
    s2 += [names[i] for i in src[dup]]
    d2 += [names[i] for i in dst[dup]]
    zero = np.arange(0, n, 4)
    a, b = rng.choice(zero, 300), rng.choice(zero, 300)
    s2 += [names[i] for i in a]
    d2 += [names[i] for i in b]
    s2 += [f"x{j % 10}" for j in range(20)]
    d2 += [names[i] for i in rng.integers(0, n, 20)]
    ids2 = sorted(set(s2) | set(d2) | set(names))
    rng.shuffle(ids2)  # vids of v2 differ from v1's
    vid = {o: i for i, o in enumerate(ids2)}
    v2 = write_dataset(
        root,
        "g",
        np.array([vid[o] for o in s2]),
        np.array([vid[o] for o in d2]),
        num_vertices=len(ids2),
        orig_ids=ids2,
        version="v2",
    )
    return v1, v2, run


def _cfg(cfg, v1, **kw):
    cfg = with_values(cfg, "dataset", root=str(v1.root))
    return with_values(cfg, "partition", algorithm="hdrf", parts=P, incremental=True, incremental_base="v1", **kw)


@pytest.fixture(scope="module")
def refreshed(spark, snapshots):
    from glisp_core.config import load_config

    v1, v2, run = snapshots
    # lam 0: no balance term, the replication term alone pulls the rows among partition-0 vertices there
    cfg = _cfg(
        load_config(env={}),
        v1,
        incremental_epsilon=0.02,
        incremental_lam=0.0,
        incremental_max_vb=9.0,
        incremental_max_eb=9.0,
        incremental_max_rf_growth=0.0,
    )
    rec = run_partition(spark, cfg, v2)
    return cfg, rec


def test_record_names_base_and_path(refreshed, snapshots):
    v1, v2, run = snapshots
    _, rec = refreshed
    base_fp = read_manifest(v1).stage(f"partition/{run}").fingerprint
    assert rec.params["incremental"]["base_version"] == "v1"
    assert rec.params["incremental"]["base_fingerprint"] == base_fp
    inc = rec.counts["incremental"]
    assert inc["path"] == "incremental" and inc["base"] == "g/v1"
    m1 = read_manifest(v1).schema["num_edges"]
    m2 = read_manifest(v2).schema["num_edges"]
    assert inc["kept"] + inc["removed"] == m1 and inc["kept"] + inc["added"] == m2
    assert inc["added"] == inc["attached"] + inc["placed"] and inc["attached"] >= 3


def test_every_edge_once_and_removed_gone(refreshed, snapshots):
    _, v2, run = snapshots
    a = pd.read_parquet(v2.assignment(run))
    m2 = read_manifest(v2).schema["num_edges"]
    assert len(a) == m2 and np.array_equal(np.sort(a.eid.to_numpy()), np.arange(m2))
    assert a.part.between(0, P - 1).all()


def test_kept_edges_keep_their_partition(refreshed, snapshots):
    v1, v2, run = snapshots
    old, new = _rows(v1, run), _rows(v2, run)
    both = new.merge(old, on=["os", "od", "occ"], suffixes=("", "_old"))
    assert len(both) > 0.9 * len(old)
    assert (both.part == both.part_old).all()
    # and the replicas/ written match the rows (the partition contract)
    reps = pd.read_parquet(v2.replicas(run))
    ends = pd.concat(
        [new[["src", "part"]].set_axis(["vid", "part"], axis=1), new[["dst", "part"]].set_axis(["vid", "part"], axis=1)]
    ).drop_duplicates()
    want = ends.groupby("vid")["part"].apply(lambda s: sorted(s.astype(int))).to_dict()
    assert {int(v): list(p) for v, p in zip(reps.vid, reps.parts, strict=True)} == want


def test_added_edges_respect_the_hard_capacity(refreshed, snapshots):
    v1, v2, run = snapshots
    _, rec = refreshed
    old, new = _rows(v1, run), _rows(v2, run)
    m2 = len(new)
    cap = math.ceil(1.02 * m2 / P)
    assert rec.counts["incremental"]["capacity"] == cap
    kept = new.merge(old[["os", "od", "occ"]], on=["os", "od", "occ"], how="left", indicator=True)
    before = np.bincount(kept.part[kept._merge == "both"], minlength=P)
    after = np.bincount(new.part, minlength=P)
    # the rows among partition-0 vertices pull toward it; the capacity stops it exactly at cap
    assert before[0] < cap and after[0] == cap
    assert (after <= np.maximum(cap, before + 3)).all()  # + the 3 duplicates that join their kept pair


def test_drift_bound_runs_a_full_repartition(spark, cfg, snapshots):
    v1, v2, _ = snapshots
    e1 = pd.read_parquet(v1.edges).sort_values("eid")
    run = publish_partition(v1, np.minimum(e1.src, e1.dst).to_numpy() % P, P, run="drift", algorithm="hdrf")
    cfg = _cfg(
        cfg,
        v1,
        name=run,
        incremental_epsilon=0.02,
        incremental_max_eb=1.0001,
        incremental_max_vb=9.0,
        incremental_max_rf_growth=0.0,
    )
    rec = run_partition(spark, cfg, v2)
    inc = rec.counts["incremental"]
    assert inc["path"] == "full" and "EB" in inc["reason"]
    assert inc["incremental_metrics"]["eb"] > 1.0001
    # what was published is the configured algorithm's own result (HDRF keeps EB at 1 here)
    assert rec.metrics["eb"] < inc["incremental_metrics"]["eb"]
    a = pd.read_parquet(v2.assignment(run))
    assert len(a) == read_manifest(v2).schema["num_edges"]


def _csv(path, src, dst):
    path.write_text("src,dst\n" + "\n".join(f"{s},{d}" for s, d in zip(src.tolist(), dst.tolist(), strict=True)))
    return path


def test_two_snapshot_refresh_through_the_pipeline(spark, cfg, tmp_path):
    import dataclasses

    from glisp_app.pipeline import run_pipeline
    from glisp_core.config import EdgeSource
    from glisp_core.dataset.versions import read_latest
    from glisp_core.partition_format import open_partition

    src, dst = rmat_edges(9, 6, seed=5)
    rng = np.random.default_rng(1)
    keep = rng.random(len(src)) >= 0.02
    s_new, d_new = rmat_edges(9, 1, seed=6)
    s2, d2 = np.concatenate([src[keep], s_new[:60]]), np.concatenate([dst[keep], d_new[:60]])
    cfg = with_values(cfg, "dataset", root=str(tmp_path / "root"))
    cfg = with_values(cfg, "partition", algorithm="hdrf", parts=2, incremental=True, progress=False)

    def snapshot(i, s, d):
        ing = dataclasses.replace(
            cfg.ingest, graph="g", edges=[EdgeSource(path=str(_csv(tmp_path / f"{i}.csv", s, d)))]
        )
        return run_pipeline(spark, dataclasses.replace(cfg, ingest=ing)), dataclasses.replace(cfg, ingest=ing)

    dv1, _ = snapshot(1, src, dst)
    r1 = read_manifest(dv1).stage("partition/hdrf-p2")
    assert r1.counts["incremental"]["path"] == "full" and "incremental" not in r1.params  # nothing to refresh from
    dv2, cfg2 = snapshot(2, s2, d2)
    assert dv2.version != dv1.version and read_latest(dv2.path.parent) == dv2.version
    m2 = read_manifest(dv2)
    rec = m2.stage("partition/hdrf-p2")
    inc = rec.counts["incremental"]
    assert inc["path"] == "incremental" and inc["base"] == f"g/{dv1.version}", inc
    assert inc["added"] > 0 and inc["removed"] > 0
    m2.stage("serialize/hdrf-p2")
    m2.stage("reorder/hdrf-p2/pds")
    parts = [open_partition(dv2.partition_dir("hdrf-p2", k)) for k in range(2)]
    assert sum(r.num_edges for r in parts) == m2.schema["num_edges"]
    old, new = _rows(dv1, "hdrf-p2"), _rows(dv2, "hdrf-p2")
    both = new.merge(old, on=["os", "od", "occ"], suffixes=("", "_old"))
    assert len(both) == inc["kept"] and (both.part == both.part_old).all()
    # a re-run with latest now at v2 finds the same base and publishes nothing new
    run_pipeline(spark, cfg2)
    assert read_manifest(dv2).stages["partition/hdrf-p2"].completed_at == rec.completed_at


def test_match_kernel_keeps_attaches_and_leaves_fresh():
    """Duplicates match one to one in eid order, per direction and edge type; a leftover row of a pair
    with a kept row joins its partition; a pair without one is fresh, counted whole."""
    from spark_jobs.partition import incremental_match as im

    # base rows (side 0): (1,2,e0) x2 in partitions 3 and 3, (2,1,e0) in 3, (7,8,e0) in 1
    # new rows (side 1): (1,2,e0) x3, (2,1,e0), (1,2,e1), (5,6,e0), (6,5,e0), (8,7,e0)
    src = np.array([1, 1, 2, 7, 1, 1, 1, 2, 1, 5, 6, 8])
    dst = np.array([2, 2, 1, 8, 2, 2, 2, 1, 2, 6, 5, 7])
    et = np.array([0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0])
    side = np.array([0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1], np.int8)
    eid = np.array([0, 1, 2, 3, 10, 12, 11, 13, 14, 15, 16, 17])
    part = np.array([3, 3, 3, 1, -1, -1, -1, -1, -1, -1, -1, -1], np.int32)
    r = im.match(src, dst, et, side, eid, part, seed=1)
    assert r["pos"].tolist() == list(range(4, 12))
    K, A, F = im.KEPT, im.ATTACHED, im.FRESH
    # eids 10, 11 are the first two (1,2,e0) rows: kept; 12 is the third: attached to the pair's partition
    assert r["how"].tolist() == [K, A, K, K, A, F, F, F]
    assert r["part"].tolist() == [3, 3, 3, 3, 3, -1, -1, -1]
    assert r["rows"].tolist()[5:] == [2, 2, 1]  # the fresh pair {5, 6} needs room for both its rows
    assert r["k"][5] == r["k"][6] and r["k"][5] != r["k"][7]  # a pair hashes alike in both directions
    # only the placement reads rows and k: rows that are not fresh carry 0 (cheap to write for every new row)
    assert r["rows"].tolist()[:5] == [0] * 5 and r["k"].tolist()[:5] == [0] * 5 and (r["k"][5:] != 0).all()


@pytest.mark.parametrize("ids", [60, 1 << 32, 1 << 40], ids=["packed-key", "two-keys", "four-keys"])
def test_the_match_order_is_pair_side_and_eid_whatever_the_ids(ids):
    """The rows' order (lo, hi, sub, eid) from one packed argsort with ties put in eid order, or from the
    lexsorts where the ids do not pack, is the four-key lexsort's: many repeated keys (multi-edges)."""
    from spark_jobs.partition import incremental_match as im

    rng = np.random.default_rng(3)
    n = 5000
    a, b = rng.integers(0, 60, n) * (ids // 60), rng.integers(0, 60, n) * (ids // 60)
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    sub, eid = rng.integers(0, 4, n), rng.permutation(n) * 7
    order = im._sort_order(lo, hi, sub, eid)
    assert (order == np.lexsort((eid, sub, hi, lo))).all()


def test_spark_path_places_exactly_as_the_local_path(spark, snapshots, refreshed):
    """Above ``incremental_local_edges`` the match runs in Spark tasks and the fresh rows stream through the
    driver; the placement must be the one the in-process path gives (same kernel, same order)."""
    v1, v2, run = snapshots
    cfg, rec = refreshed
    e1 = pd.read_parquet(v1.edges).sort_values("eid")
    local = pd.read_parquet(v1.assignment(run)).sort_values("eid")
    other = publish_partition(v1, local.part.to_numpy(), P, run="spark-path", algorithm="hdrf")
    assert np.array_equal(local.eid.to_numpy(), e1.eid.to_numpy())
    rec_s = run_partition(spark, with_values(cfg, "partition", name=other, incremental_local_edges=0), v2)
    inc_l, inc_s = rec.counts["incremental"], rec_s.counts["incremental"]
    assert (inc_l["mode"], inc_s["mode"]) == ("local", "spark")
    assert not inc_s["same_ids"]  # v2 renumbers the vertices: the base rows were remapped in the tasks
    assert inc_l["same_vids"] is inc_s["same_vids"] is False, (inc_l, inc_s)
    assert inc_s["vid_map"] == "written", inc_s
    assert inc_s["base_rows"] == "assignment"  # the base run is not serialized: its edges joined with it
    assert inc_s["touched_state"] == "tasks", inc_s  # few touched vertices: tasks read the match's files
    for key in ("kept", "added", "attached", "placed", "capacity"):
        assert inc_l[key] == inc_s[key], key
    a_l = pd.read_parquet(v2.assignment(run)).sort_values("eid").reset_index(drop=True)
    a_s = pd.read_parquet(v2.assignment(other)).sort_values("eid").reset_index(drop=True)
    assert a_l.equals(a_s)
    assert rec.metrics == rec_s.metrics


def test_a_row_the_match_leaves_undecided_fails_the_refresh_naming_both_counts(spark, snapshots, refreshed):
    """The match's tasks write their rows themselves and send back their counts, which must add up to the
    version's edges: a row lost between them (here the version's edge table lost its last row after it was
    published, the manifest still counting it) fails the Spark refresh naming both counts, and no run is
    published."""
    import pyarrow.parquet as pq

    from glisp_core.errors import StageError
    from glisp_core.storage.store import store_for

    v1, v2, run = snapshots
    cfg, _ = refreshed
    e = pd.read_parquet(v2.edges).sort_values("eid")
    m = len(e)
    v3 = write_dataset(
        v1.root,
        "g",
        e.src.to_numpy(),
        e.dst.to_numpy(),
        num_vertices=len(_orig(v2)),
        orig_ids=list(_orig(v2)),
        version="v3-lost-row",
    )
    files = sorted(rel for rel, _ in store_for(v3.edges).files(v3.edges) if rel.endswith(".parquet"))
    last = v3.edges / files[-1]
    t = pq.read_table(last.local)
    assert t.num_rows > 1
    pq.write_table(t.slice(0, t.num_rows - 1), last.local)
    with pytest.raises(StageError, match=rf"the match decided {m - 1:,} rows of the new version's {m:,}"):
        run_partition(spark, with_values(cfg, "partition", name=run, incremental_local_edges=0), v3)
    assert f"partition/{run}" not in read_manifest(v3).stages


def test_a_spark_refresh_reads_the_base_rows_from_a_current_serialize_copy(spark, snapshots, refreshed, monkeypatch):
    """Where the base run is serialized with its Parquet copies, the Spark refresh reads the base's rows from
    that copy instead of joining the base's edges with its assignment (one scan, no shuffle by eid), and
    places exactly as the in-process path. A copy built from an older partition run is not used. This run
    also takes the path of more touched vertices than tasks are sent (``BROADCAST_TOUCHED``, 2^21, set to 0
    here): their degrees and partition sets from a Spark aggregate, placing the same."""
    from spark_jobs.partition import incremental_spark as isp
    from spark_jobs.partition.incremental_spark import serialized_edges
    from spark_jobs.serialize.job import run_serialize

    v1, v2, run = snapshots
    cfg, _ = refreshed
    parts = pd.read_parquet(v1.assignment(run)).sort_values("eid").part.to_numpy()
    other = publish_partition(v1, parts, P, run="copy-path", algorithm="hdrf")
    assert serialized_edges(read_manifest(v1), other) is None
    run_serialize(spark, cfg, v1, run=other)
    assert serialized_edges(read_manifest(v1), other) is not None
    monkeypatch.setattr(isp, "BROADCAST_TOUCHED", 0)  # the driver reads it at the call (local mode: this process)
    rec_s = run_partition(spark, with_values(cfg, "partition", name=other, incremental_local_edges=0), v2)
    inc = rec_s.counts["incremental"]
    assert (inc["mode"], inc["base_rows"], inc["touched_state"]) == ("spark", f"serialize/{other}", "aggregate"), inc
    a_l = pd.read_parquet(v2.assignment(run)).sort_values("eid").reset_index(drop=True)
    a_s = pd.read_parquet(v2.assignment(other)).sort_values("eid").reset_index(drop=True)
    assert a_l.equals(a_s)
    publish_partition(v1, (parts + 1) % P, P, run=other, algorithm="hdrf")  # serialize/<run> is stale now
    assert serialized_edges(read_manifest(v1), other) is None


@pytest.mark.parametrize("new_type", [False, True], ids=["same-types", "a-type-added-first"])
def test_spark_path_of_a_snapshot_that_keeps_the_ids_places_as_the_local_path(spark, tmp_path, cfg, new_type):
    """A snapshot that only appends vertices keeps every base id: the Spark path then takes the base rows
    without remapping their vertices (and renumbers their edge types in the JVM where a new type's name sorts
    first); it must still place exactly as the in-process path and keep every kept row."""
    rng = np.random.default_rng(11)
    n = 256
    src, dst = rmat_edges(8, 8, seed=3)
    names = [f"n{i}" for i in range(n)]
    et1 = rng.integers(0, 2, len(src)) if new_type else None
    types1, types3 = (["b", "c"], ["a", "b", "c"]) if new_type else (None, None)
    v1 = write_dataset(
        tmp_path, "g", src, dst, num_vertices=n, orig_ids=names, etype=et1, edge_types=types1, version="v1"
    )
    run = publish_partition(v1, np.minimum(src, dst) % P, P, algorithm="hdrf")
    keep = rng.random(len(src)) >= 0.05
    s3 = np.concatenate([src[keep], rng.integers(0, n + 2, 60)])
    d3 = np.concatenate([dst[keep], rng.integers(0, n + 2, 60)])
    et3 = np.concatenate([et1[keep] + 1, rng.integers(0, 3, 60)]) if new_type else None  # b, c: codes 1, 2 now
    v3 = write_dataset(
        tmp_path, "g", s3, d3, num_vertices=n + 2, orig_ids=[*names, "y0", "y1"], etype=et3, edge_types=types3,
        version="v3",
    )  # fmt: skip
    loose = dict(incremental_max_vb=9.0, incremental_max_eb=9.0, incremental_max_rf_growth=0.0)
    base = _cfg(cfg, v1, **loose)
    other = publish_partition(
        v1, pd.read_parquet(v1.assignment(run)).sort_values("eid").part.to_numpy(), P, "s", "hdrf"
    )
    rec_l = run_partition(spark, base, v3)
    rec_s = run_partition(spark, with_values(base, "partition", name=other, incremental_local_edges=0), v3)
    inc_l, inc_s = rec_l.counts["incremental"], rec_s.counts["incremental"]
    modes = (inc_l.get("mode"), inc_s.get("mode"), inc_s.get("same_ids"))
    assert modes == ("local", "spark", not new_type), (inc_l, inc_s)  # a renumbered edge type: not the same ids
    assert inc_l["same_vids"] is inc_s["same_vids"] is True, (inc_l, inc_s)
    assert inc_s["vid_map"] == "identity", inc_s  # found by the anti-join: no vertex map written or read
    assert inc_s["kept"] >= int(keep.sum()) and inc_l["kept"] == inc_s["kept"]  # an added row may match a removed one
    a_l = pd.read_parquet(v3.assignment(run)).sort_values("eid").reset_index(drop=True)
    a_s = pd.read_parquet(v3.assignment(other)).sort_values("eid").reset_index(drop=True)
    assert a_l.equals(a_s)
    kept = a_s.part.to_numpy()[: int(keep.sum())]  # v3's first rows are v1's kept rows, in eid order
    assert np.array_equal(kept, (np.minimum(src, dst) % P)[keep])


def test_the_match_rows_tag_carries_edge_type_partition_and_side(spark):
    """The match's tasks get a row's edge type, base partition and side in one column: every value at the edge
    of its range comes back (the format's 2^23 - 1 partitions, a new row's -1, wide edge type codes)."""
    from pyspark.sql import functions as F

    from spark_jobs.partition.incremental_spark import row_tag, split_tag

    et = np.array([0, 1, 7, 2**20, 2**31 - 1, 3])
    part = np.array([-1, 0, 5, 2**23 - 1, 2**23 - 2, -1])
    df = spark.createDataFrame(pd.DataFrame({"etype": et, "part": part}))
    tags = [r["tag"] for r in df.select(row_tag(F.col("etype"), F.col("part"), 0).alias("tag")).collect()]
    got_e, got_p, got_s = split_tag(np.array(tags))
    assert got_e.tolist() == et.tolist() and got_p.tolist() == part.tolist() and got_s.tolist() == [0] * 6
    ones = [r["tag"] for r in df.select(row_tag(F.col("etype"), F.col("part"), 1).alias("tag")).collect()]
    assert split_tag(np.array(ones))[2].tolist() == [1] * 6


def test_the_touched_vertices_state_from_the_match_files_equals_the_spark_aggregate(spark, tmp_path):
    """Degrees (every row, a self-loop twice) and partition bits (decided rows only) of the touched vertices:
    the tasks reading the match's files give what the Spark aggregate of the rows' ends gives, over several
    files and past 64 partitions; a touched vertex no row names is an error."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from glisp_core.errors import StageError
    from glisp_core.storage.uri import parse_uri
    from spark_jobs.partition import incremental_spark as isp
    from spark_jobs.partition.incremental_touched import degrees_and_words

    rng = np.random.default_rng(5)
    d = tmp_path / "matched"
    d.mkdir()
    for f in range(3):
        n = 400
        src, dst = rng.integers(0, 50, n), rng.integers(0, 50, n)
        src[:3] = dst[:3]  # self-loops
        cols = {"eid": np.arange(n) + f * n, "src": src, "dst": dst, "part": rng.integers(0, 70, n).astype(np.int32)}
        cols["how"] = rng.integers(0, 3, n).astype(np.int32)
        cols |= {"rows": np.zeros(n, np.int64), "k": np.zeros(n, np.int64)}
        pq.write_table(pa.table(cols).cast(isp.MATCHED_PA), d / f"part-{f:05d}.parquet")
    matched = spark.read.parquet(str(d))
    vids = np.array([0, 3, 7, 21, 49])
    got_d, got_bits = degrees_and_words(spark, parse_uri(str(d)), vids, 2, parse_uri(str(tmp_path / "spill")))
    touched = spark.createDataFrame(pd.DataFrame({"vid": vids}))
    t = isp._degrees_and_words(matched, touched, 2).toPandas().sort_values("vid")
    assert t.vid.tolist() == vids.tolist()
    assert got_d.tolist() == t.d.tolist()
    assert got_bits.tolist() == np.stack([t.w0.to_numpy(), t.w1.to_numpy()], axis=1).view(np.uint64).tolist()
    assert (got_bits[:, 1] != 0).any()  # partitions 64..69 set bits in the second word
    with pytest.raises(StageError, match=r"touched vertices \[99\]"):
        degrees_and_words(spark, parse_uri(str(d)), np.array([3, 99]), 2, parse_uri(str(tmp_path / "spill")))


def test_the_touched_vertices_table_spreads_strided_ids():
    """The touched vertices' hash table finds every id and stays short-probed for ids with many low zero bits
    (all multiples of 1024): indexed by the product's low bits they would share one slot in 1,024."""
    from spark_jobs.partition import incremental_touched as it

    vids = np.arange(100_000, dtype=np.int64) * 1024
    keys, vals, shift = it._table(vids)
    assert [it._find(keys, vals, shift, v) for v in vids[::997]] == list(range(0, len(vids), 997))
    assert it._find(keys, vals, shift, 5) == -1
    occupied = np.flatnonzero(keys != -1)
    runs = np.diff(np.flatnonzero(np.diff(np.r_[-2, occupied, len(keys) + 2]) != 1))
    assert runs.max() <= 16, runs.max()


def test_a_touched_vertices_task_in_python_gives_what_its_kernels_give(spark, tmp_path):
    """One file's task run in this process, its kernels as plain Python (``py_func``) against the compiled
    ones: the same touched vertices, degrees and bits (the compiled kernels run only in Spark's workers)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from spark_jobs.partition import incremental_spark as isp
    from spark_jobs.partition import incremental_touched as it

    rng = np.random.default_rng(9)
    n = 300
    cols = {"eid": np.arange(n), "src": rng.integers(0, 40, n), "dst": rng.integers(0, 40, n)}
    cols |= {"part": rng.integers(0, 70, n).astype(np.int32), "how": rng.integers(0, 3, n).astype(np.int32)}
    cols |= {"rows": np.zeros(n, np.int64), "k": np.zeros(n, np.int64)}
    f = tmp_path / "part-00000.parquet"
    pq.write_table(pa.table(cols).cast(isp.MATCHED_PA), f)
    vids = np.array([1, 5, 8, 13, 39], np.int64)
    seen, d, bits = it._file_task([str(f)], spark.sparkContext.broadcast(vids), 2)(0)
    keys, vals, shift = it._table.py_func(vids)
    assert [it._find.py_func(keys, vals, shift, v) for v in vids] == [0, 1, 2, 3, 4]
    d2, bits2 = np.zeros(len(vids), np.int64), np.zeros((len(vids), 2), np.uint64)
    src, dst, part, how = (cols[c].astype(np.int64) for c in ("src", "dst", "part", "how"))
    it._scan.py_func(src, dst, part, how, keys, vals, shift, d2, bits2)
    assert seen.tolist() == np.flatnonzero(d2).tolist() and d.tolist() == d2[seen].tolist()
    assert bits.tolist() == bits2[seen].tolist()
    ends = np.r_[cols["src"], cols["dst"]]
    assert d.tolist() == [int((ends == vids[i]).sum()) for i in seen]  # every row's two ends, counted
