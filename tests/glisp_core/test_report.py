"""``glisp report`` on a real dataset directory: JSON round trip, summary tables, the degree plot PNG."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from glisp_app.cli import main as glisp
from glisp_app.report import PLOT_NAME, degree_histograms, partition_rows
from glisp_app.text_tables import fmt
from glisp_core.dataset.manifest import Manifest, StageRecord, now_iso, read_manifest
from glisp_testing.graphs import rmat_edges, write_dataset, write_records
from spark_jobs.ingest.stats import log2_histogram

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _ingest_hist(src: np.ndarray, dst: np.ndarray, n: int) -> dict:
    """The histogram exactly as the ingest stage records it (spark_jobs.ingest.stats)."""
    out = {}
    for kind, deg in (("out", np.bincount(src, minlength=n)), ("in", np.bincount(dst, minlength=n))):
        d, c = np.unique(deg, return_counts=True)
        out[kind] = log2_histogram(d, c)
    d, c = np.unique(np.bincount(src, minlength=n) + np.bincount(dst, minlength=n), return_counts=True)
    out["total"] = log2_histogram(d, c)
    return out


def _partition(run: str, algo: str, parts: int, rf: float, secs: float) -> StageRecord:
    return StageRecord(
        name=f"partition/{run}",
        path=f"partition/{run}",
        fingerprint=run,
        params={"algorithm": algo, "parts": parts, "seed": 1},
        depends={"ingest": "x"},
        counts={"parts": parts, "edges_per_part": [10] * parts, "rounds": 3},
        metrics={"rf": rf, "vb": 1.05, "eb": 1.01, "interior_fraction": 0.5},
        timings={"total_s": secs},
        completed_at=now_iso(),
    )


@pytest.fixture
def dataset(tmp_path: Path):
    src, dst = rmat_edges(9, edge_factor=8, seed=3)
    n = 1 << 9
    dv = write_dataset(tmp_path / "root", "g", src, dst, num_vertices=n)
    m = read_manifest(dv)
    ing = m.stages["ingest"]
    ing.metrics = {"degree_histogram_log2": _ingest_hist(src, dst, n), "max_degree": {"total": 99}}
    ing.counts.update({"rejects": {"bad_id": 3, "missing_dst": 0}, "rejected_rows": 3})
    for rec in (
        _partition("adadne-p4", "adadne", 4, 1.31, 2.5),
        _partition("random-p4", "random", 4, 2.80, 0.4),
        _partition("hdrf-p4", "hdrf", 4, 1.75, 1.2),
        _partition("dne-p2", "dne", 2, 1.40, 1.0),
    ):
        m.stages[rec.name] = rec
    m.stages["serialize/adadne-p4"] = StageRecord(
        name="serialize/adadne-p4",
        path="serialize/adadne-p4",
        fingerprint="s",
        depends={"partition/adadne-p4": "adadne-p4"},
        counts={"parts": 4, "master_per_part": [130, 120, 131, 131]},
        # the shape spark_jobs/serialize/job.py records, plus fields this report has never heard of
        metrics={
            "bytes_total": 36874,
            "bytes_per_edge": 9.0024,
            "bytes_per_field": {"out_nbr": 16390, "in_eid": 16384, "out_indptr": 4100},
            "bytes_per_edge_by_field": {"out_nbr": 4.0015, "in_eid": 4.0, "out_indptr": 1.001},
            "future_dict": {"a": 1.5, "b": 2.5},
            "future_metric": 7.5,
        },
        timings={"total_s": 3.2},
    )
    write_records(dv, m.stages.values())
    return dv, len(src)


def test_json_round_trips_the_manifest(dataset, capsys):
    dv, _ = dataset
    assert glisp(["report", str(dv.path), "--json"]) == 0
    out = capsys.readouterr().out
    assert json.loads(out) == json.loads(read_manifest(dv).to_json())
    assert Manifest.from_dict(json.loads(out)).to_dict() == read_manifest(dv).to_dict()
    assert not (dv.path.local / "report").exists()  # --json alone writes no plot


def test_summary_tables_and_plot(dataset, capsys):
    dv, m = dataset
    assert glisp(["report", "g", "--root", str(dv.root)]) == 0
    out = capsys.readouterr().out
    assert f"GLISP dataset g/{dv.version}" in out
    assert "|V| 512" in out and f"|E| {m:,}" in out
    # the comparison table: dne-p2 first (fewer parts), then the p4 runs by RF
    table = out[out.index("Partition runs") :].splitlines()
    assert table[1].split() == ["run", "algorithm", "parts", "RF", "VB", "EB", "interior", "seconds"]
    runs = [line.split()[0] for line in table[3:7]]
    assert runs == ["dne-p2", "adadne-p4", "hdrf-p4", "random-p4"]
    assert table[4].split() == ["adadne-p4", "adadne", "4", "1.31", "1.05", "1.01", "0.5", "2.5"]
    # serialize: bytes per field and per directed edge, and a field the report does not know about
    ser = out[out.index("Serialized partitions") :]
    block = ser[ser.index("metrics.bytes_per_field") : ser.index("metrics.bytes_per_edge_by_field")]
    lines = {ln.split()[0]: ln.split()[1:] for ln in block.splitlines() if ln.strip()}
    assert lines["out_nbr"] == ["16,390", fmt(16390 / m)] and fmt(16390 / m) == "4.001"
    assert lines["total"] == ["36,874", fmt(36874 / m)]
    assert "future_metric=7.5" in ser and "future_dict" in ser and "bytes_per_edge=9.002" in ser
    assert "master_per_part=[130, 120, 131, 131]" in ser
    # rejects and stage details
    assert "Rejects" in out and "bad_id=3" in out
    assert "Stage partition/random-p4" in out and "rounds" in out
    png = dv.path.local / "report" / PLOT_NAME
    assert f"degree plot: {png}" in out
    data = png.read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) > 5000
    import matplotlib.image

    img = matplotlib.image.imread(png)
    assert img.shape[0] > 200 and img.shape[1] > 200


def test_plot_path_and_json_keep_stdout_clean(dataset, tmp_path, capsys):
    dv, _ = dataset
    target = tmp_path / "plots" / "deg.png"
    assert glisp(["report", str(dv.path), "--json", "--plot", str(target)]) == 0
    cap = capsys.readouterr()
    json.loads(cap.out)
    assert str(target) in cap.err
    assert target.read_bytes()[:8] == PNG_MAGIC


def test_single_run_and_no_histogram(tmp_path, capsys):
    dv = write_dataset(tmp_path, "small", np.array([0, 1, 2]), np.array([1, 2, 0]))
    m = read_manifest(dv)
    m.stages["partition/random-p2"] = _partition("random-p2", "random", 2, 1.5, 0.1)
    write_records(dv, m.stages.values())
    assert glisp(["report", str(dv.path)]) == 0
    out = capsys.readouterr().out
    assert "Partition runs" not in out and "Stage partition/random-p2" in out
    assert "no degree histogram" in out
    assert not (dv.path.local / "report" / PLOT_NAME).exists()


def test_missing_dataset_is_a_clear_error(tmp_path, capsys):
    assert glisp(["report", "nope", "--root", str(tmp_path)]) == 1
    assert "no published version" in capsys.readouterr().err


def test_histogram_formats():
    edges = {"bin_edges": [0, 1, 2, 4, 8], "counts": [5, 10, 6, 2]}
    h = degree_histograms({"degree_hist": {"out": edges, "in": edges, "total": edges}})
    assert set(h) == {"out", "in", "total"}
    assert h["out"] == ([0.0, 1.0, 2.0, 4.0], [1.0, 2.0, 4.0, 8.0], [5.0, 10.0, 6.0, 2.0])
    h = degree_histograms({"degree_hist": {"bins": [1, 2, 3], "counts": [4, 2, 1]}, "other": 1})
    assert h == {"total": ([1.0, 2.0, 3.0], [2.0, 3.0, 4.0], [4.0, 2.0, 1.0])}
    h = degree_histograms({"degree_histogram_log2": {"total": {"bin_lo": [0, 1, 2, 4], "count": [1, 2, 3, 4]}}})
    assert h["total"][1] == [1.0, 2.0, 4.0, 8.0]
    assert degree_histograms({"degree_hist": {"counts": "bad"}, "max_degree": 3}) == {}


def test_partition_rows_tolerate_missing_metrics(tmp_path):
    m = Manifest(graph="g", version="v")
    m.stages["partition/x"] = StageRecord(name="partition/x", path="partition/x", fingerprint="f")
    m.stages["partition/y-p3"] = _partition("y-p3", "dbh", 3, 1.2, 0.3)
    rows = partition_rows(m)
    assert [r[0] for r in rows] == ["y-p3", "x"]
    assert rows[1][1:] == ["-", None, None, None, None, None, None]


def test_compare_two_versions_side_by_side(dataset, capsys):
    dv, _ = dataset
    src, dst = rmat_edges(9, edge_factor=4, seed=4)
    dv2 = write_dataset(dv.root, "g", src, dst, num_vertices=1 << 9, version="v2")
    m2 = read_manifest(dv2)
    m2.stages["partition/adadne-p4"] = _partition("adadne-p4", "adadne", 4, 1.62, 5.0)
    write_records(dv2, m2.stages.values())
    assert glisp(["report", str(dv.path), "--compare", "g/v2", "--root", str(dv.root)]) == 0
    out = capsys.readouterr().out
    assert f"A = g/{dv.version}   B = g/v2" in out
    rows = {tuple(line.split()[:2]): line.split()[2:] for line in out.splitlines()[3:]}
    assert rows[("partition/adadne-p4", "timings.total_s")] == ["2.5", "5", "2"]
    assert rows[("partition/adadne-p4", "metrics.rf")] == ["1.31", "1.62", "1.237"]
    assert rows[("schema", "num_edges")][2] == "0.5"  # half the edges in B
    assert rows[("serialize/adadne-p4", "published")][:2] == ["yes", "no"]  # only A has it


def test_one_stage_with_dash_dash_stage(dataset, capsys):
    """``--stage NAME`` prints that stage's record alone; an unknown name lists the stages there are."""
    from glisp_core.errors import GlispError

    dv, _ = dataset
    name = next(n for n in read_manifest(dv).stages if n.startswith("partition/"))
    assert glisp(["report", str(dv.path), "--stage", name]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"Stage {name}") and "Stage ingest" not in out and "GLISP dataset" not in out
    assert "counts:" in out and "params:" in out
    with pytest.raises(GlispError, match=r"no stage 'train/none' \(stages: ingest, "):
        from glisp_app.report import stage_summary

        stage_summary(read_manifest(dv), "train/none")
