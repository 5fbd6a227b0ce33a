"""Atomic publish, idempotent re-runs, the CLI and the built-in graphs."""

from __future__ import annotations

import json

import numpy as np
import pytest
from ingest_util import edges_back, manifest, read_table, write

from glisp_app.cli import main as glisp
from glisp_core.config import EdgeSource, IngestConfig
from glisp_core.dataset.layout import list_versions, resolve_dataset
from spark_jobs.generate.builtin import BUILTIN_COUNTS, builtin_config


def _graph(tmp_path):
    f = write(tmp_path / "in" / "e.csv", "src,dst\n1,2\n2,3\n3,1\n")
    return IngestConfig(graph="pub", edges=[EdgeSource(path=str(f))])


def test_failure_mid_stage_publishes_nothing_and_keeps_earlier_version(ingest, tmp_path, monkeypatch):
    import spark_jobs.ingest.job as job

    ing = _graph(tmp_path)
    v1 = ingest(ing, version="v1")
    before = read_table(v1.edges)

    def boom(*a, **k):
        raise RuntimeError("injected failure after the tables were written")

    monkeypatch.setattr(job, "degree_metrics", boom)
    with pytest.raises(RuntimeError, match="injected failure"):
        ingest(ing, version="v2", duplicates="drop")
    with pytest.raises(RuntimeError, match="injected failure"):
        ingest(ing, version="v1", force=True)  # a forced rebuild of v1 that fails leaves v1 as it was
    gdir = tmp_path / "data" / "pub"
    assert list_versions(tmp_path / "data", "pub") == ["v1"]
    assert sorted(p.name for p in gdir.iterdir() if not p.name.startswith(".")) == ["v1"]
    assert not [p for p in gdir.iterdir() if p.name.startswith(".tmp-")]  # temp dirs cleaned up
    assert resolve_dataset("pub", tmp_path / "data").version == "v1"
    assert manifest(v1).stages["ingest"].counts["edges"] == 3
    assert read_table(v1.edges).equals(before)


def test_rerun_is_idempotent_and_force_rebuilds(ingest, tmp_path):
    ing = _graph(tmp_path)
    lines: list[str] = []
    dv = ingest(ing)
    assert dv.version.endswith(manifest(dv).stages["ingest"].fingerprint[:8])
    stamp = dv.manifest_path.local.stat().st_mtime_ns
    again = ingest(ing, log=lines.append)
    assert again == dv and dv.manifest_path.local.stat().st_mtime_ns == stamp
    assert any(x.startswith("ingest: up to date at ") for x in lines)
    # different params: a new version
    other = ingest(ing, self_loops="drop")
    assert other.version != dv.version
    marker = dv.ingest.local / "left-by-the-first-build"
    marker.write_text("a forced run rebuilds the ingest output, so this file must go")
    forced = ingest(ing, force=True)
    assert forced == dv and not marker.exists()  # rebuilt and swapped in, not skipped
    assert dv.ingest != marker.parent
    assert manifest(forced).stages["ingest"].fingerprint == manifest(dv).stages["ingest"].fingerprint
    assert len(read_table(forced.edges)) == 3
    # changed input content: not up to date any more
    write(tmp_path / "in" / "e.csv", "src,dst\n1,2\n2,3\n3,4\n")
    changed = ingest(ing)
    assert manifest(changed).stages["ingest"].fingerprint != manifest(dv).stages["ingest"].fingerprint
    assert (manifest(changed).schema["num_vertices"], manifest(changed).schema["num_edges"]) == (4, 3)


def test_cli_edges_quick_path(spark, tmp_path, capsys):
    f = write(tmp_path / "in" / "g.txt", "# SNAP\n1\t2\n2\t3\n3\t3\n")
    root = tmp_path / "data"
    rc = glisp(
        [
            "ingest",
            "--graph",
            "snap",
            "--edges",
            str(f),
            "--no-header",
            "--comment",
            "#",
            "--undirected",
            "--self-loops",
            "drop",
            "--version",
            "v1",
            "--root",
            str(root),
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "|V| = 3" in out and "|E| = 4" in out and "edges/s" in out
    dv = resolve_dataset("snap/v1", root)
    assert sorted((int(a), int(b)) for a, b, *_ in edges_back(dv)) == [(1, 2), (2, 1), (2, 3), (3, 2)]
    # bad input through the CLI: exit status 1 and the message on stderr
    bad = write(tmp_path / "in" / "bad.csv", "src,dst,w\n1,2,x\n")
    rc = glisp(["ingest", "--graph", "bad", "--edges", str(bad), "--weight", "w", "--root", str(root)])
    err = capsys.readouterr().err
    assert rc == 1 and "bad.csv, column 'w': 1 of 1 rows" in err


def test_builtin_cora(ingest):
    dv = ingest(builtin_config("cora"))
    m = manifest(dv)
    s = m.schema
    assert (s["num_vertices"], s["num_edges"]) == (2708, 5429) == tuple(BUILTIN_COUNTS["cora"].values())
    assert s["feature_dim"] == 1433 and s["num_classes"] == 7 and s["id_type"] == "int"
    feats = read_table(dv.features)
    assert len(feats) == 2708 and feats["feat"].map(len).eq(1433).all()
    assert m.stages["ingest"].metrics["power_law"]["alpha"] > 1
    json.dumps(m.to_dict())


def test_builtin_lastfm_and_imdb(ingest):
    lf = manifest(ingest(builtin_config("lastfm")))
    s = lf.schema
    assert s["vertex_types"] == ["Artist", "User"] and s["weighted"] and s["timestamped"]
    assert (s["num_vertices"], s["num_edges"]) == (19914, 292030)
    assert lf.stages["ingest"].counts["edges_per_type"] == {"IS_FRIEND": 12717, "LISTEN_TO": 92834, "TAGGED": 186479}
    dv = ingest(builtin_config("imdb"))
    im = manifest(dv)
    s = im.schema
    assert len(s["vertex_types"]) == 4 and s["edge_types"] == ["ACTED_IN", "DIRECTED_IN"]
    assert (s["num_vertices"], s["num_edges"]) == (12772, 18644) and s["num_classes"] == 3
    v = read_table(dv.vertices)
    movie = s["vertex_types"].index("Movie")
    assert v.loc[v["vtype"] == movie, "label"].notna().all()
    assert np.isin(v.loc[v["vtype"] != movie, "label"].isna(), [True]).all()


def test_two_identical_ingests_at_once_do_the_work_once(ingest, tmp_path, capsys):
    """Two ingests of the same inputs and parameters at the same time (two driver threads, as two
    schedulers' tasks would be): one builds, the other waits for its claim and returns the same version;
    one version is published, and no claim is left behind."""
    import threading
    import time

    ing = _graph(tmp_path)
    out: dict[int, object] = {}

    def run(i: int) -> None:
        out[i] = ingest(ing)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    threads[0].start()
    running, deadline = tmp_path / "data" / "pub" / "_running", time.time() + 120
    while not (running.exists() and any(running.glob("ingest-*.json"))):  # the first holds its claim
        assert time.time() < deadline and threads[0].is_alive(), "the first ingest never claimed the run"
        time.sleep(0.005)
    threads[1].start()
    for t in threads:
        t.join(300)
    assert out[0] == out[1]
    assert len(list_versions(tmp_path / "data", "pub")) == 1
    assert "an identical run is in progress" in capsys.readouterr().out
    assert not (tmp_path / "data" / "pub" / "_running").exists()
