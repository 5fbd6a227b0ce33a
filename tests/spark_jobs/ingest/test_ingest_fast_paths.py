"""The fast paths of ingest give what the row rules give: canonical number parsing, chunked CSV
reading, clean rows that skip Spark, the rank map instead of the join; and the phase breakdown."""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
import pytest
from ingest_util import edges_back, manifest, read_table, write

from glisp_core.config import EdgeSource, IngestConfig, VertexSource

INTS = [
    "0",
    "7",
    "-12",
    "123456789012345678",
    "007",
    "+5",
    " 5",
    "5 ",
    "-0",
    "5.0",
    "1e3",
    "",
    "x",
    "1234567890123456789",
]
DECIMALS = ["0", "1", "1.5", "0.1", ".5", "5.", "1e3", "1E-5", "00.50", "-1", "+1", "inf", "NaN", "1e400", "1.5d", " 1"]
DECIMALS += ["12345678901234.5", "123456789012345.6", "0.000000000000000000000001", "1e", "e5", "."]


def test_canonical_numbers_are_exactly_what_spark_reads(spark):
    """A value parsed by textparse is Spark's try_cast of the same text; everything else stays text."""
    from pyspark.sql import functions as F

    from spark_jobs.ingest.textparse import parse_canonical

    for kind, vals, spark_type in (("long", INTS, "long"), ("double", DECIMALS, "double")):
        got, ok = parse_canonical(pa.array(vals), kind)
        rows = spark.createDataFrame([(v,) for v in vals], "s string").select(
            F.trim("s").try_cast(spark_type).alias("v")
        )
        want = [r["v"] for r in rows.collect()]
        for v, g, k, w in zip(vals, got, ok, want, strict=True):
            if k:
                assert w is not None and g == w, (kind, v, g, w)
                if kind == "long":
                    assert str(int(g)) == v  # canonical: the text is the integer's own form
    assert list(parse_canonical(pa.array(INTS), "long")[1]) == [True] * 4 + [False] * 10
    assert list(parse_canonical(pa.array(DECIMALS), "double")[1]) == [True] * 9 + [False] * 7 + [True] + [False] * 5


TEXT = (
    "# made by hand\r\n"
    "src,dst,w\r\n"
    '1,2,0.5\r\n3,"4",1\r\n\r\n5,6\r\n7,8,2.5\r\n# middle comment\r\n'
    '9,10,"1,5"\r\n11,12,3\r\n1,2,0.25\r\n'
)


def test_many_small_chunks_read_like_one(ingest, tmp_path, monkeypatch):
    """Byte-range chunks split lines, comments, quotes and CRLF exactly as a single read does."""
    from spark_jobs.ingest import arrowread

    f = write(tmp_path / "in" / "e.csv", TEXT)
    ing = IngestConfig(graph="ch", on_bad_input="quarantine", edges=[EdgeSource(path=str(f), weight="w", comment="#")])
    whole = ingest(ing, version="whole")
    monkeypatch.setattr(arrowread, "_MIN_CHUNK", 7)
    monkeypatch.setattr(arrowread, "_MAX_CHUNK", 7)
    assert len(arrowread.plan_chunks([f], 0, True, 2)) > 10
    chunked = ingest(ing, version="chunked", force=True)
    assert Counter(edges_back(chunked)) == Counter(edges_back(whole))
    assert Counter((int(a), int(b), w) for a, b, _, w, _ in edges_back(whole)) == Counter(
        [(1, 2, 0.5), (3, 4, 1.0), (7, 8, 2.5), (11, 12, 3.0), (1, 2, 0.25)]
    )
    for dv in (whole, chunked):
        assert manifest(dv).stages["ingest"].counts["rejects"] == {"edge_malformed": 1, "edge_bad_weight": 1}
        assert read_table(dv.rejects("edge_malformed"))["record"].tolist() == ["5,6"]
        assert read_table(dv.rejects("edge_bad_weight"))["weight"].tolist() == ["1,5"]


def test_rows_off_the_fast_path_keep_their_meaning(ingest, tmp_path):
    """Non-canonical ids and numbers go through Spark's rules: "007" and "+7" are the integer 7 when every
    id is an integer, but stay three different strings once one id is not an integer."""
    rows = "src,dst,w,t\n7,8,1,10\n007,+8, 2.50,20\n 7 ,9,.5,30\n9,7,1e0,+40\n007,9,3,60\n"
    f = write(tmp_path / "in" / "e.csv", rows)
    ing = IngestConfig(graph="nc", edges=[EdgeSource(path=str(f), weight="w", timestamp="t")])
    dv = ingest(ing)
    m = manifest(dv)
    assert m.schema["id_type"] == "int" and m.schema["num_vertices"] == 3
    assert Counter(edges_back(dv)) == Counter(
        [(7, 8, "edge", 1.0, 10), (7, 8, "edge", 2.5, 20), (7, 9, "edge", 0.5, 30), (9, 7, "edge", 1.0, 40)]
        + [(7, 9, "edge", 3.0, 60)]
    )
    g = write(tmp_path / "in" / "s.csv", rows + "alice,7,1,50\n")
    dv = ingest(IngestConfig(graph="ns", edges=[EdgeSource(path=str(g), weight="w", timestamp="t")]))
    m = manifest(dv)
    assert m.schema["id_type"] == "string"
    assert set(read_table(dv.idmap)["orig_id"]) == {"7", "007", "8", "+8", "9", "alice"}
    pairs = [("7", "8"), ("007", "+8"), ("7", "9"), ("9", "7"), ("007", "9"), ("alice", "7")]
    assert Counter((a, b) for a, b, *_ in edges_back(dv)) == Counter(pairs)


def _typed(tmp_path, **kw) -> IngestConfig:
    d = tmp_path / "in"
    write(d / "follows.csv", "a,b\n1,2\n2,3\n3,1\n3,3\n")
    write(d / "likes.tsv", "u\ti\tw\n1\t100\t0.5\n2\t100\t1.5\n2\t101\t2\n")
    return IngestConfig(
        graph="typed",
        edges=[
            EdgeSource(path=str(d / "follows.csv"), src="a", dst="b", src_type="user", dst_type="user", edge_type="f"),
            EdgeSource(
                path=str(d / "likes.tsv"), src="u", dst="i", src_type="user", dst_type="item", edge_type="l", weight="w"
            ),
        ],
        **kw,
    )


@pytest.mark.parametrize("with_vertices", [False, True])
def test_rank_map_and_join_give_the_same_tables(ingest, tmp_path, with_vertices):
    """max_rank_map_vertices = 0 forces the dictionary join; both paths publish identical tables."""
    ing = _typed(tmp_path, on_bad_input="quarantine", duplicates="merge")
    if with_vertices:  # item 101 is missing: one edge quarantined by both paths
        write(tmp_path / "in" / "v.csv", "id,t,l\n1,user,0\n2,user,1\n3,user,0\n100,item,2\n")
        ing = _typed(
            tmp_path,
            on_bad_input="quarantine",
            duplicates="merge",
            vertices=[VertexSource(path=str(tmp_path / "in" / "v.csv"), vtype="t", label="l")],
        )
    rank = ingest(ing, version="rank")
    join = ingest(ing, version="join", force=True, max_rank_map_vertices=0)
    assert manifest(rank).stages["ingest"].counts["id_map"] == "rank"
    assert manifest(join).stages["ingest"].counts["id_map"] == "join"
    for t in ("edges", "idmap", "vertices"):
        assert read_table(getattr(rank, t)).equals(read_table(getattr(join, t))), t
    for dv in (rank, join):
        c = manifest(dv).stages["ingest"].counts
        assert c["vertices_per_type"] == {"user": 3, "item": 1 if with_vertices else 2}
        assert c["rejects"] == ({"edge_missing_endpoint": 1} if with_vertices else {})
    if with_vertices:
        assert read_table(join.rejects("edge_missing_endpoint"))["dst"].tolist() == ["101"]
        assert read_table(rank.rejects("edge_missing_endpoint"))["dst"].tolist() == ["101"]


def test_manifest_records_each_phase_with_its_jobs(ingest, tmp_path):
    dv = ingest(_typed(tmp_path))
    t = manifest(dv).stages["ingest"].timings
    phases = ["fingerprint", "read_check", "idmap", "map", "sort", "stats", "manifest"]
    assert [k[:-5] for k in t if k.endswith("_jobs") and k != "total_jobs"] == phases
    assert all(t[f"{p}_jobs"] >= 1 for p in ("read_check", "idmap", "map", "sort"))
    # six, and one aggregation over the written vertex table for the labelled-vertex counts (stats)
    assert t["total_jobs"] == sum(t[f"{p}_jobs"] for p in phases) <= 7
    assert t["task_parse_cpu_s"] >= 0 and t["task_sort_cpu_s"] >= 0
    assert sorted(p.name for p in dv.path.local.iterdir()) == ["_records", "_version.json", "ingest"]  # no staging left
