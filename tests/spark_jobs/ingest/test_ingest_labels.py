"""Labels with missing values: an empty cell or null is no label, ``ingest.label_missing`` names a value that is no
label either (never a class), and ingest counts the labelled vertices and their split."""

from __future__ import annotations

import pytest
from ingest_util import manifest, read_table, write

from glisp_core.config import EdgeSource, IngestConfig, VertexSource

VERTICES = "id,lab,sp\n1,1,train\n2,2,train\n3,0,val\n4,,test\n5,2,test\n6,0,\n"


@pytest.mark.parametrize("missing", ["", "0"])
def test_missing_labels_are_counted_and_never_a_class(ingest, tmp_path, missing):
    d = tmp_path / "in"
    write(d / "e.csv", "src,dst\n1,2\n2,3\n3,4\n4,5\n5,6\n")
    write(d / "v.csv", VERTICES)
    ing = IngestConfig(
        graph=f"g{missing or 'none'}",
        edges=[EdgeSource(path=str(d / "e.csv"))],
        vertices=[VertexSource(path=str(d / "v.csv"), label="lab", split="sp")],
        label_missing=missing,
    )
    dv = ingest(ing)
    m = manifest(dv)
    v = read_table(dv.vertices).set_index("vid")
    counts = m.stages["ingest"].counts
    if missing:  # 0 means "no label": 1 and 2 are the classes, 3 of 6 vertices are labelled
        assert v["label"].isna().sum() == 3 and m.schema["num_classes"] == 3
        assert set(v["label"].dropna().astype(int)) == {1, 2}
        want = {"labelled_vertices": 3, "labelled_train": 2, "labelled_val": 0, "labelled_test": 1}
    else:  # 0 is a class; only the empty cell is no label
        assert v["label"].isna().sum() == 1 and set(v["label"].dropna().astype(int)) == {0, 1, 2}
        want = {"labelled_vertices": 5, "labelled_train": 2, "labelled_val": 1, "labelled_test": 1}
    assert {k: counts[k] for k in want} == want
