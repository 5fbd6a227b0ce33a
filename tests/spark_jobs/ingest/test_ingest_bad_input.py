"""Bad input: every kind fails naming file, column and count, or is quarantined, counted and set aside."""

from __future__ import annotations

import re
from collections import Counter

import pytest
from ingest_util import edges_back, manifest, read_table, write

from glisp_core.config import EdgeSource, IngestConfig, VertexSource
from glisp_core.dataset.layout import list_versions
from glisp_core.errors import BadInputError, ConfigError


def _e(path, **kw) -> EdgeSource:
    return EdgeSource(path=str(path), **kw)


# name -> (files {name: text}, IngestConfig builder(dir), regex the message must match, count)
CASES = {  # each first example names its line in the file (the header is line 1)
    "malformed": (
        {"e1.csv": "src,dst\n1,2\n", "e2.csv": "src,dst\n1,2\n3\n4,5,6\n7,8\n"},
        lambda d: IngestConfig(graph="g", edges=[_e(d / "e*.csv")]),
        r"e2\.csv, column '\*': 2 of 4 rows have the wrong number of fields.* \(e\.g\. line 3: .*record='3'",
        2,
    ),
    "null_id": (
        {"e.csv": "src,dst\n1,2\n,3\n  ,4\n"},
        lambda d: IngestConfig(graph="g", edges=[_e(d / "e.csv")]),
        r"e\.csv, column 'src': 2 of 3 rows have a null or empty vertex id.* \(e\.g\. line 3: ",
        2,
    ),
    "bad_id_when_int": (
        {"e.csv": "a,b\n1,2\nx,3\n"},
        lambda d: IngestConfig(graph="g", id_type="int", edges=[_e(d / "e.csv", src="a", dst="b")]),
        r"e\.csv, column 'a': 1 of 2 rows have an id that is not an integer.* \(e\.g\. line 3: src='x'",
        1,
    ),
    "id_out_of_range": (
        {"e.csv": "a,b\n1,2\n3,9223372036854775808\n"},
        lambda d: IngestConfig(graph="g", id_type="int", edges=[_e(d / "e.csv", src="a", dst="b")]),
        r"e\.csv, column 'b': 1 of 2 rows have an integer id outside the int64 range .*\(e\.g\. line 3: .*dst='9223372036854775808'",
        1,
    ),
    "non_numeric_weight": (
        {"e.csv": "src,dst,w\n1,2,abc\n2,3,1\n"},
        lambda d: IngestConfig(graph="g", edges=[_e(d / "e.csv", weight="w")]),
        r"e\.csv, column 'w': 1 of 2 rows have a missing, non-numeric, negative or non-finite weight.* \(e\.g\. line 2: .*weight='abc'",
        1,
    ),
    "negative_weight": (
        {"e.csv": "src,dst,w\n1,2,-1\n2,3,1\n3,1,-0.5\n"},
        lambda d: IngestConfig(graph="g", edges=[_e(d / "e.csv", weight="w")]),
        r"e\.csv, column 'w': 2 of 3 rows have a missing, non-numeric, negative.* \(e\.g\. line 2: ",
        2,
    ),
    "non_integer_timestamp": (
        {"e.csv": "src,dst,t\n1,2,12.5\n2,3,7\n3,1,x\n"},
        lambda d: IngestConfig(graph="g", edges=[_e(d / "e.csv", timestamp="t")]),
        r"e\.csv, column 't': 2 of 3 rows have a missing or non-integer timestamp.* \(e\.g\. line 2: ",
        2,
    ),
    "unknown_edge_type": (
        {"e.csv": "src,dst,k\n1,2,a\n2,3,b\n3,1,c\n"},
        lambda d: IngestConfig(graph="g", edge_types=["a"], edges=[_e(d / "e.csv", etype="k")]),
        r"e\.csv, column 'k': 2 of 3 rows have an empty edge type or one not in ingest\.edge_types.* \(e\.g\. line 3: ",
        2,
    ),
    "unknown_vertex_type": (
        {"e.csv": "src,dst\n1,2\n", "v.csv": "id,kind\n1,user\n2,bot\n"},
        lambda d: IngestConfig(
            graph="g",
            vertex_types=["user"],
            edges=[_e(d / "e.csv")],
            vertices=[VertexSource(path=str(d / "v.csv"), vtype="kind")],
        ),
        r"v\.csv, column 'kind': 1 of 2 rows have a vertex type that is null or not in ingest\.vertex_types.* \(e\.g\. line 3: ",
        1,
    ),
    "missing_endpoint": (
        {"e.csv": "src,dst\n1,2\n2,3\n1,4\n", "v.csv": "id\n1\n2\n"},
        lambda d: IngestConfig(graph="g", edges=[_e(d / "e.csv")], vertices=[VertexSource(path=str(d / "v.csv"))]),
        r"e\.csv, column 'dst': 2 of 3 rows have an endpoint that is not in the vertex tables.* \(e\.g\. line 3: ",
        2,
    ),
    "feature_width": (
        {"e.csv": "src,dst\n1,2\n", "v.csv": "id,f\n1,1;2\n2,3;4\n3,5\n"},
        lambda d: IngestConfig(
            graph="g", edges=[_e(d / "e.csv")], vertices=[VertexSource(path=str(d / "v.csv"), features="f")]
        ),
        r"v\.csv, column 'f': 1 of 3 rows have a feature vector of the wrong width.* \(e\.g\. line 4: ",
        1,
    ),
    "bad_split": (
        {"e.csv": "src,dst\n1,2\n", "v.csv": "id,s\n1,train\n2,foo\n"},
        lambda d: IngestConfig(
            graph="g", edges=[_e(d / "e.csv")], vertices=[VertexSource(path=str(d / "v.csv"), split="s")]
        ),
        r"v\.csv, column 's': 1 of 2 rows have a split that is not train/val/test.* \(e\.g\. line 3: ",
        1,
    ),
    "duplicate_vertex": (
        {"e.csv": "src,dst\n1,2\n", "v.csv": "id,l\n1,0\n2,1\n1,1\n"},
        lambda d: IngestConfig(
            graph="g", edges=[_e(d / "e.csv")], vertices=[VertexSource(path=str(d / "v.csv"), label="l")]
        ),
        r"v\.csv, column 'id': 1 of 3 rows repeat a vertex id.* \(e\.g\. line 4: ",
        1,
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_fails_naming_file_column_count(ingest, icfg, tmp_path, case):
    files, build, pattern, count = CASES[case]
    d = tmp_path / "in"
    for name, text in files.items():
        write(d / name, text)
    with pytest.raises(BadInputError, match=pattern) as ei:
        ingest(build(d))
    assert ei.value.count == count
    assert list_versions(tmp_path / "data", "g") == []  # nothing published


def test_bytes_that_are_not_utf8_name_file_line_column_and_offset(ingest, tmp_path):
    from glisp_core.errors import failure_reason

    f = tmp_path / "in" / "e.csv"
    f.parent.mkdir(parents=True)
    f.write_bytes(b"src,dst\n1,2\n3,\xff4\n5,6\n")
    with pytest.raises(Exception) as ei:  # raised in a Spark task: the driver sees it wrapped
        ingest(IngestConfig(graph="g", edges=[_e(f)]))
    msg = failure_reason(ei.value)
    assert re.search(r"e\.csv, column 'dst': 1 rows are not valid UTF-8: line 3, byte offset 14 \(0xff\)", msg), msg
    assert "iconv" in msg
    f.write_bytes(b"# latin-1 below\nsrc,d\xe9st\n1,2\n")  # in the header, read on the driver
    with pytest.raises(
        BadInputError, match=r"e\.csv, column 'header': 1 rows are not valid UTF-8: line 2, byte offset 21"
    ):
        ingest(IngestConfig(graph="g", edges=[_e(f, comment="#")]))
    assert list_versions(tmp_path / "data", "g") == []


@pytest.mark.parametrize("text", ["src,dst\n", "", "# only a comment\n"])
def test_empty_input_is_always_an_error(ingest, tmp_path, text):
    f = write(tmp_path / "in" / "e.csv", text)
    for mode in ("fail", "quarantine"):
        with pytest.raises(
            BadInputError, match=r"e\.csv.* 0 of 0 rows (found: the edge input has no rows|found: the file is empty)"
        ):
            ingest(IngestConfig(graph="g", on_bad_input=mode, edges=[_e(f, comment="#")]))


def test_no_matching_files_is_an_error(ingest, tmp_path):
    with pytest.raises(
        ConfigError, match=r"ingest\.edges\[0\], key path: no input file matches it \(got '.*nothing-\*\.csv'\)"
    ):
        ingest(IngestConfig(graph="g", edges=[_e(tmp_path / "nothing-*.csv")]))


def test_quarantine_sets_every_kind_aside_and_counts_it(ingest, tmp_path):
    d = tmp_path / "in"
    write(
        d / "e.csv",
        "\n".join(
            [
                "src,dst,k,w,t",
                "1,2,a,1,10",  # good
                "2,3,a,2,20",  # good
                "3,4,a,1",  # malformed (4 fields)
                ",4,a,1,1",  # null id
                "1,3,zzz,1,1",  # unknown edge type
                "1,3,a,-4,1",  # negative weight
                "1,3,a,x,1",  # non-numeric weight
                "1,3,a,1,1.5",  # non-integer timestamp
                "1,9,a,1,1",  # endpoint 9 not in the vertex table
                "3,1,a,1,30",  # good
            ]
        )
        + "\n",
    )
    write(
        d / "v.csv",
        "id,kind,f,s\n1,user,1;2,train\n2,user,3;4,val\n3,user,5;6,test\n4,user,7;8,\n"
        "5,robot,1;1,train\n6,user,1,train\n7,user,1;2,later\n3,user,0;0,train\n",
    )
    lines: list[str] = []
    ing = IngestConfig(
        graph="q",
        on_bad_input="quarantine",
        edge_types=["a"],
        vertex_types=["user"],
        edges=[_e(d / "e.csv", etype="k", weight="w", timestamp="t")],
        vertices=[VertexSource(path=str(d / "v.csv"), vtype="kind", features="f", split="s")],
    )
    dv = ingest(ing, log=lines.append)
    expected = {
        "edge_malformed": 1,
        "edge_null_id": 1,
        "edge_unknown_type": 1,
        "edge_bad_weight": 2,
        "edge_bad_timestamp": 1,
        "edge_missing_endpoint": 1,
        "vertex_unknown_type": 1,
        "vertex_feature_width": 1,
        "vertex_bad_split": 1,
        "vertex_duplicate": 1,
    }
    counts = manifest(dv).stages["ingest"].counts
    assert counts["rejects"] == expected
    at_line = {  # the line of each set-aside row in its file (the header is line 1)
        "edge_malformed": [4],
        "edge_null_id": [5],
        "edge_unknown_type": [6],
        "edge_bad_weight": [7, 8],
        "edge_bad_timestamp": [9],
        "edge_missing_endpoint": [10],
        "vertex_unknown_type": [6],
        "vertex_feature_width": [7],
        "vertex_bad_split": [8],
        "vertex_duplicate": [9],
    }
    for kind, n in expected.items():
        rej = read_table(dv.rejects(kind))
        assert len(rej) == n, kind
        assert set(rej["reason"]) == {kind}
        assert rej["file"].str.endswith((".csv",)).all()
        assert sorted(rej["line"]) == at_line[kind], kind
    bad_w = read_table(dv.rejects("edge_bad_weight"))
    assert sorted(bad_w["weight"]) == ["-4", "x"] and set(bad_w["column"]) == {"w"}
    assert read_table(dv.rejects("edge_malformed"))["record"].tolist() == ["3,4,a,1"]
    assert read_table(dv.rejects("edge_missing_endpoint"))["dst"].tolist() == ["9"]
    # good rows are published; the printed lines say what was set aside
    assert Counter((int(a), int(b), w, ts) for a, b, _, w, ts in edges_back(dv)) == Counter(
        [(1, 2, 1.0, 10), (2, 3, 2.0, 20), (3, 1, 1.0, 30)]
    )
    assert counts["vertices"] == 4 and counts["vertices_per_type"] == {"user": 4}
    assert len([x for x in lines if x.startswith("quarantined: ")]) == len(expected)
    assert any(re.search(r"e\.csv, column 'w': 2 of 10 rows have a missing, non-numeric.*line 7: ", x) for x in lines)


def test_lines_are_those_of_the_file_across_chunks_comments_and_empty_lines(ingest, tmp_path):
    """A file of several read chunks (chunks are at least 4 MiB), with comment and empty lines: a bad row
    is named by its line in the file, in the error and in the rejects table; a Parquet file by its row."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    d = tmp_path / "in"
    d.mkdir()
    rows, bad = ["src,dst"], []
    for i in range(700_000):  # about 10 MiB: three chunks
        if i % 1000 == 7:
            rows.append("# a comment line")
        if i % 5003 == 11:
            rows.append("")
        if i in (5, 340_000, 699_990):
            rows.append(f"{i},x{i}")
            bad.append(len(rows))
        else:
            rows.append(f"{i:09d},{i + 1:09d}")
    (d / "e.csv").write_text("\n".join(rows) + "\n")
    assert (d / "e.csv").stat().st_size > 9 << 20
    cfg = IngestConfig(graph="g", id_type="int", edges=[_e(d / "e.csv", comment="#")])
    with pytest.raises(BadInputError, match=rf"column 'dst': 3 of .* \(e\.g\. line {bad[0]:,}: ") as ei:
        ingest(cfg)
    assert all(f"line {n:,}: " in str(ei.value) for n in bad), str(ei.value)
    dv = ingest(cfg, on_bad_input="quarantine")
    assert sorted(read_table(dv.rejects("edge_bad_id"))["line"]) == bad
    ids = pa.array([str(i) for i in range(3000)])
    dst = pa.array([str(i + 1) if i != 2500 else "y" for i in range(3000)])
    pq.write_table(pa.table({"src": ids, "dst": dst}), d / "e.parquet", row_group_size=1000)
    pq_cfg = IngestConfig(graph="p", id_type="int", edges=[_e(d / "e.parquet")])
    with pytest.raises(BadInputError, match=r"e\.parquet, column 'dst': 1 of 3,000 rows .*\(e\.g\. row 2,501: "):
        ingest(pq_cfg)
