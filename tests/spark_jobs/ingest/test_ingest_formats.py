"""Ingest round trips: CSV/TSV/Parquet in, canonical tables out, joined back to exactly the input."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd
import pytest
from ingest_util import edges_back, manifest, read_table, write

from glisp_core.config import EdgeSource, IngestConfig, VertexSource


def _dense(values) -> bool:
    v = sorted(int(x) for x in values)
    return v == list(range(len(v)))


def test_csv_header_delimiter_comments_string_ids(ingest, tmp_path):
    f = write(
        tmp_path / "in" / "e.csv",
        "# exported by hand\nfrom;to;w\nalice;bob;1.5\n# a comment in the middle\nbob;carol;2\n"
        "carol;alice;0\nalice;bob;1.5\n dave ;alice;3\n",
    )
    ing = IngestConfig(
        graph="people", edges=[EdgeSource(path=str(f), delimiter=";", comment="#", src="from", dst="to", weight="w")]
    )
    dv = ingest(ing)
    m = manifest(dv)
    assert m.schema["id_type"] == "string"
    assert (m.schema["num_vertices"], m.schema["num_edges"]) == (4, 5)
    assert m.schema["weighted"] and not m.schema["timestamped"]
    e, v, idm = read_table(dv.edges), read_table(dv.vertices), read_table(dv.idmap)
    assert _dense(e["eid"]) and _dense(v["vid"]) and _dense(idm["vid"])
    assert str(e["src"].dtype) == "int64" and str(e["etype"].dtype) == "int32" and str(e["weight"].dtype) == "float32"
    assert Counter(edges_back(dv)) == Counter(
        [
            ("alice", "bob", "edge", 1.5, None),
            ("bob", "carol", "edge", 2.0, None),
            ("carol", "alice", "edge", 0.0, None),
            ("alice", "bob", "edge", 1.5, None),
            ("dave", "alice", "edge", 3.0, None),
        ]
    )
    assert set(v["split"]) == {-1} and v["label"].isna().all()
    st = m.stages["ingest"]
    assert st.counts["edges"] == 5 and st.counts["rejects"] == {}
    assert st.metrics["max_degree"]["total"] == 4  # alice: 2 out (bob twice) + 2 in (carol, dave)
    assert sum(st.metrics["degree_histogram_log2"]["total"]["count"]) == 4


def test_glob_of_headerless_tsv_files_int_ids_deterministic(ingest, tmp_path):
    rng = np.random.default_rng(3)
    expected = []
    for k in range(3):
        src = rng.integers(0, 40, 30) * 7 + 1000
        dst = rng.integers(0, 40, 30) * 7 + 1000
        lines = ["# SNAP style edge list", "# FromNodeId\tToNodeId"] + [
            f"{a}\t{b}" for a, b in zip(src, dst, strict=True)
        ]
        write(tmp_path / "in" / f"part-{k}.tsv", "\n".join(lines) + "\n")
        expected += [(int(a), int(b), "edge", None, None) for a, b in zip(src, dst, strict=True)]
    write(tmp_path / "in" / "ignored.csv", "not,an,edge\n")
    ing = IngestConfig(
        graph="snap", edges=[EdgeSource(path=str(tmp_path / "in" / "part-*.tsv"), header=False, comment="#")]
    )
    dv = ingest(ing)
    m = manifest(dv)
    assert m.schema["id_type"] == "int"
    assert len(m.inputs) == 3
    back = edges_back(dv)
    assert Counter((int(a), int(b), t, w, ts) for a, b, t, w, ts in back) == Counter(expected)
    idm = read_table(dv.idmap)
    assert str(idm["orig_id"].dtype) == "int64"
    assert list(idm["orig_id"]) == sorted(idm["orig_id"])  # vids follow the id order: deterministic
    # same input under a new version name: identical tables
    dv2 = ingest(ing, version="again", force=True)
    pd.testing.assert_frame_equal(read_table(dv.edges), read_table(dv2.edges))
    pd.testing.assert_frame_equal(read_table(dv.idmap), read_table(dv2.idmap))


def test_parquet_typed_tables_with_vertices_features_labels(ingest, tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    pd.DataFrame(
        {
            "a": [10, 11, 12, 10],
            "b": [11, 12, 10, 12],
            "kind": ["cites", "cites", "likes", "likes"],
            "t": [5, 6, 7, 8],
            "x": [1.0, 2.0, 0.5, 4.0],
        }
    ).to_parquet(d / "e.parquet")
    pd.DataFrame(
        {
            "id": [10, 11, 12, 13],
            "lab": [0, 2, None, 1],
            "sp": ["train", "val", "test", None],
            "f": [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]],
        }
    ).to_parquet(d / "v.parquet")
    ing = IngestConfig(
        graph="typed",
        edges=[EdgeSource(path=str(d / "e.parquet"), src="a", dst="b", etype="kind", timestamp="t", weight="x")],
        vertices=[VertexSource(path=str(d / "v.parquet"), label="lab", split="sp", features="f", vertex_type="paper")],
    )
    dv = ingest(ing)
    m = manifest(dv)
    s = m.schema
    assert (s["num_vertices"], s["num_edges"], s["feature_dim"], s["num_classes"]) == (4, 4, 2, 3)
    assert s["edge_types"] == ["cites", "likes"] and s["vertex_types"] == ["paper"]
    assert s["weighted"] and s["timestamped"] and s["id_type"] == "int"
    assert Counter(edges_back(dv)) == Counter(
        [(10, 11, "cites", 1.0, 5), (11, 12, "cites", 2.0, 6), (12, 10, "likes", 0.5, 7), (10, 12, "likes", 4.0, 8)]
    )
    v = read_table(dv.vertices).merge(read_table(dv.idmap), on="vid")
    by_id = v.set_index("orig_id")
    assert by_id.loc[13, "split"] == -1 and by_id.loc[10, "split"] == 0 and by_id.loc[12, "split"] == 2
    assert pd.isna(by_id.loc[12, "label"]) and by_id.loc[11, "label"] == 2
    f = read_table(dv.features).merge(read_table(dv.idmap), on="vid").set_index("orig_id")
    assert list(f.loc[13, "feat"]) == [7.0, 8.0] and f["feat"].map(len).eq(2).all()
    st = m.stages["ingest"]
    assert st.counts["edges_per_type"] == {"cites": 2, "likes": 2}
    assert st.metrics["isolated_vertices"] == 1  # vertex 13 has no edge but is in the vertex table


def test_features_from_columns_and_npy(ingest, tmp_path):
    d = tmp_path / "in"
    write(d / "e.csv", "src,dst\nu1,u2\nu2,i1\ni2,u1\n")
    write(d / "users.csv", "id,f0,f1,f2\nu1,1,2,3\nu2,4,5,6\n")
    write(d / "items.csv", "id\ni1\ni2\n")  # features from .npy, row order
    np.save(d / "items.npy", np.array([[9, 9, 9], [8, 8, 8]], np.float32))
    write(d / "more.csv", "id\nm1\n")  # features from .npy aligned by an id array
    np.save(d / "more.npy", np.array([[7, 7, 7]], np.float32))
    np.save(d / "more_ids.npy", np.array(["m1"]))
    ing = IngestConfig(
        graph="feat",
        edges=[EdgeSource(path=str(d / "e.csv"))],
        vertices=[
            VertexSource(path=str(d / "users.csv"), vertex_type="user", feature_columns=["f0", "f1", "f2"]),
            VertexSource(path=str(d / "items.csv"), vertex_type="item", features_npy=str(d / "items.npy")),
            VertexSource(
                path=str(d / "more.csv"),
                vertex_type="item",
                features_npy=str(d / "more.npy"),
                features_npy_ids=str(d / "more_ids.npy"),
            ),
        ],
    )
    dv = ingest(ing)
    m = manifest(dv)
    assert m.schema["feature_dim"] == 3 and m.schema["vertex_types"] == ["item", "user"]
    f = read_table(dv.features).merge(read_table(dv.idmap), on="vid").set_index("orig_id")
    assert {k: list(f.loc[k, "feat"]) for k in f.index} == {
        "u1": [1, 2, 3],
        "u2": [4, 5, 6],
        "i1": [9, 9, 9],
        "i2": [8, 8, 8],
        "m1": [7, 7, 7],
    }
    v = read_table(dv.idmap)
    assert list(v.sort_values("vid")["vtype"]) == sorted(v["vtype"])  # vids grouped by type
    assert m.stages["ingest"].counts["vertices_per_type"] == {"user": 2, "item": 3}


@pytest.mark.parametrize("policy", ["keep", "merge", "drop"])
def test_duplicate_policies(ingest, tmp_path, policy):
    f = write(tmp_path / "in" / "e.csv", "src,dst,w,t\n1,2,1,30\n1,2,2,10\n2,3,5,1\n1,2,4,20\n3,3,1,1\n")
    ing = IngestConfig(graph="dups", duplicates=policy, edges=[EdgeSource(path=str(f), weight="w", timestamp="t")])
    dv = ingest(ing)
    got = Counter((int(a), int(b), w, ts) for a, b, _, w, ts in edges_back(dv))
    counts = manifest(dv).stages["ingest"].counts
    if policy == "keep":
        assert got == Counter([(1, 2, 1.0, 30), (1, 2, 2.0, 10), (2, 3, 5.0, 1), (1, 2, 4.0, 20), (3, 3, 1.0, 1)])
        assert counts["duplicates_removed"] == 0
    elif policy == "merge":  # weights summed, earliest timestamp
        assert got == Counter([(1, 2, 7.0, 10), (2, 3, 5.0, 1), (3, 3, 1.0, 1)])
        assert counts["duplicates_removed"] == 2
    else:  # the first row in input order is kept
        assert got == Counter([(1, 2, 1.0, 30), (2, 3, 5.0, 1), (3, 3, 1.0, 1)])
        assert counts["duplicates_removed"] == 2
    assert counts["self_loops"] == 1 and counts["self_loops_dropped"] == 0


def test_undirected_doubling_merge_and_self_loops(ingest, tmp_path):
    f = write(tmp_path / "in" / "e.csv", "src,dst,w\na,b,1\nb,a,2\nb,c,1\nc,c,5\nd,d,1\nc,d,3\n")
    dv = ingest(
        IngestConfig(
            graph="und",
            directed=False,
            duplicates="merge",
            self_loops="drop",
            edges=[EdgeSource(path=str(f), weight="w")],
        )
    )
    m = manifest(dv)
    got = Counter((a, b, w) for a, b, _, w, _ in edges_back(dv))
    assert got == Counter(
        [("a", "b", 3.0), ("b", "a", 3.0), ("b", "c", 1.0), ("c", "b", 1.0), ("c", "d", 3.0), ("d", "c", 3.0)]
    )
    assert m.schema["directed"] is False and m.schema["num_edges"] == 6 and m.schema["num_vertices"] == 4
    c = m.stages["ingest"].counts
    assert (c["self_loops_dropped"], c["duplicates_removed"], c["reverse_edges_added"]) == (2, 1, 3)
    # keep everything: each input row twice, a self-loop once
    dv2 = ingest(IngestConfig(graph="und2", directed=False, edges=[EdgeSource(path=str(f), weight="w")]))
    got2 = Counter((a, b, w) for a, b, _, w, _ in edges_back(dv2))
    assert got2[("a", "b", 1.0)] == 1 and got2[("b", "a", 1.0)] == 1 and got2[("c", "c", 5.0)] == 1
    assert sum(got2.values()) == 2 * 6 - 2
