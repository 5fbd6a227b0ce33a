"""R-MAT generator on the real local Spark session: counts, ranges, determinism, power law, extras, ingest.toml."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from glisp_core.config import Config, RmatConfig, load_config
from glisp_core.errors import ConfigError
from spark_jobs.generate.rmat import _permute, check_config, generate_rmat, level_probabilities


def read_table(d: Path) -> pa.Table:
    """All part files of a Spark output directory, in file-name order (= row order for spark.range)."""
    files = sorted(p for p in d.iterdir() if p.name.startswith("part-"))
    assert files, f"no part files in {d}"
    if files[0].suffix == ".csv":
        return pa.concat_tables([pacsv.read_csv(f) for f in files])
    return pa.concat_tables([pq.read_table(f) for f in files])


def edge_arrays(out: Path) -> tuple[np.ndarray, np.ndarray]:
    t = read_table(out / "edges")
    return t.column("src").to_numpy().astype(np.int64), t.column("dst").to_numpy().astype(np.int64)


@pytest.fixture(scope="module")
def scale14(spark, tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("rmat14")
    return out, generate_rmat(spark, RmatConfig(scale=14, seed=7, files=2), out)


def test_count_range_and_power_law(scale14):
    out, res = scale14
    src, dst = edge_arrays(out)
    n, m = 1 << 14, 16 << 14
    assert res["edges"] == m and len(src) == m and len(dst) == m
    assert src.min() >= 0 and dst.min() >= 0 and src.max() < n and dst.max() < n
    deg = np.bincount(src, minlength=n) + np.bincount(dst, minlength=n)
    assert deg.sum() == 2 * m
    mean = deg.mean()
    assert deg.max() > 20 * mean, f"max degree {deg.max()} is not far above mean {mean}"
    # heavy tail: many isolated/low-degree vertices, a few hubs
    assert (deg == 0).sum() > 0.05 * n
    assert np.sort(deg)[-10:].sum() > 0.02 * 2 * m
    # the permutation scrambles ids: the biggest hub is not vertex 0, and hubs are spread over the id range
    top = np.argsort(deg)[-20:]
    assert top.max() - top.min() > n // 4


def test_ingest_toml_loads(scale14):
    out, res = scale14
    cfg = load_config(out / "ingest.toml", env={})
    assert cfg.ingest.graph == "rmat-s14-ef16-seed7" == res["graph"]
    assert len(cfg.ingest.edges) == 1 and cfg.ingest.vertices == []
    e = cfg.ingest.edges[0]
    assert Path(e.path) == out / "edges" and e.format == "csv" and e.header
    assert (e.src, e.dst, e.weight, e.timestamp) == ("src", "dst", "", "")
    assert not (out / "vertices").exists()
    assert not list(out.glob(".tmp-*"))


def test_deterministic_and_independent_of_file_count(spark, tmp_path):
    base = RmatConfig(scale=12, seed=3)
    generate_rmat(spark, replace(base, files=2), tmp_path / "a")
    generate_rmat(spark, replace(base, files=3), tmp_path / "b")
    generate_rmat(spark, replace(base, seed=4), tmp_path / "c")
    sa, da = edge_arrays(tmp_path / "a")
    sb, db = edge_arrays(tmp_path / "b")
    sc, dc = edge_arrays(tmp_path / "c")
    assert len(list((tmp_path / "b" / "edges").glob("part-*"))) == 3
    np.testing.assert_array_equal(sa, sb)
    np.testing.assert_array_equal(da, db)
    assert (sa != sc).mean() > 0.5 and (da != dc).mean() > 0.5
    # re-running into the same directory replaces the output
    generate_rmat(spark, replace(base, seed=4), tmp_path / "a")
    np.testing.assert_array_equal(edge_arrays(tmp_path / "a")[0], sc)


@pytest.mark.parametrize("bits", [1, 2, 7, 12])
def test_permutation_is_a_bijection(spark, bits):
    from pyspark.sql import functions as F

    df = spark.range(0, 1 << bits, 1, 2).select(F.col("id").alias("v"))
    got = np.array(sorted(r.v for r in _permute(df, "v", bits, seed=11).collect()))
    np.testing.assert_array_equal(got, np.arange(1 << bits))
    if bits >= 7:
        moved = np.array(
            [r.v for r in _permute(df, "v", bits, seed=11).orderBy(F.monotonically_increasing_id()).collect()]
        )
        assert (moved != np.arange(1 << bits)).mean() > 0.9


def test_permutation_keeps_the_degree_sequence(spark, tmp_path):
    generate_rmat(spark, RmatConfig(scale=11, seed=5, permute=True), tmp_path / "p")
    generate_rmat(spark, RmatConfig(scale=11, seed=5, permute=False), tmp_path / "r")
    sp, dp = edge_arrays(tmp_path / "p")
    sr, dr = edge_arrays(tmp_path / "r")
    n = 1 << 11
    dp_deg = np.bincount(sp, minlength=n) + np.bincount(dp, minlength=n)
    dr_deg = np.bincount(sr, minlength=n) + np.bincount(dr, minlength=n)
    np.testing.assert_array_equal(np.sort(dp_deg), np.sort(dr_deg))
    assert dr_deg.argmax() == 0  # raw R-MAT: vertex 0 is the hub (a is the largest quadrant)
    assert dp_deg.argmax() != 0


def test_extras_csv(spark, tmp_path):
    cfg = RmatConfig(
        scale=10, seed=2, features=5, classes=3, splits=[0.6, 0.2, 0.2], edge_types=3, weights=True, timestamps=True
    )
    out = tmp_path / "x"
    res = generate_rmat(spark, cfg, out, fmt="csv")
    n, m = 1 << 10, 16 << 10
    e = read_table(out / "edges")
    assert e.column_names == ["src", "dst", "etype", "weight", "ts"]
    assert e.num_rows == m
    assert set(e.column("etype").to_pylist()) == {"t0", "t1", "t2"}
    w = e.column("weight").to_numpy()
    assert w.min() > 0 and w.max() <= 1 and np.unique(w).size > m // 2
    ts = e.column("ts").to_numpy()
    assert ts.min() >= 1_577_836_800 and ts.max() < 1_577_836_800 + 365 * 86400
    v = read_table(out / "vertices")
    assert v.column_names == ["id", "label", "split"] + [f"f{j}" for j in range(5)]
    np.testing.assert_array_equal(v.column("id").to_numpy(), np.arange(n))
    label = v.column("label").to_numpy()
    assert set(np.unique(label)) == {0, 1, 2}
    split = np.array(v.column("split").to_pylist())
    frac = {s: (split == s).mean() for s in ("train", "val", "test")}
    assert abs(frac["train"] - 0.6) < 0.06 and abs(frac["val"] - 0.2) < 0.05 and abs(frac["test"] - 0.2) < 0.05
    feats = np.stack([v.column(f"f{j}").to_numpy() for j in range(5)], axis=1)
    assert feats.min() >= -0.5 and feats.max() <= 1.5
    # features carry the label: column j is shifted by +1 for vertices with label j mod classes
    assert feats[label == 0, 0].mean() - feats[label != 0, 0].mean() > 0.8
    assert res["vertex_table"]

    icfg = load_config(out / "ingest.toml", env={}).ingest
    es, vs = icfg.edges[0], icfg.vertices[0]
    assert (es.etype, es.weight, es.timestamp) == ("etype", "weight", "ts")
    assert Path(vs.path) == out / "vertices"
    assert (vs.id, vs.label, vs.split, vs.feature_columns) == ("id", "label", "split", [f"f{j}" for j in range(5)])


def test_extras_parquet_without_labels(spark, tmp_path):
    cfg = RmatConfig(scale=9, seed=2, features=4, splits=[0.5, 0.25, 0.0])
    out = tmp_path / "x"
    generate_rmat(spark, cfg, out, fmt="parquet")
    e = read_table(out / "edges")
    assert e.column_names == ["src", "dst"] and e.schema.field("src").type == pa.int64()
    v = read_table(out / "vertices")
    assert v.column_names == ["id", "split", "feat"]
    feat = np.array(v.column("feat").to_pylist(), dtype=np.float32)
    assert feat.shape == (1 << 9, 4) and feat.min() >= -0.5 and feat.max() <= 0.5
    split = v.column("split").to_pylist()
    assert "test" not in split and None in split  # fractions sum to 0.75: the rest has no split
    icfg = load_config(out / "ingest.toml", env={}).ingest
    assert icfg.edges[0].format == "parquet" and icfg.edges[0].edge_type == "edge"
    assert icfg.vertices[0].features == "feat" and icfg.vertices[0].label == ""


def test_level_probabilities():
    p = level_probabilities(RmatConfig(scale=20, noise=0.0))
    np.testing.assert_allclose(p, np.tile([0.57, 0.19, 0.19, 0.05], (20, 1)))
    q = level_probabilities(RmatConfig(scale=20, noise=0.1, seed=9))
    np.testing.assert_allclose(q.sum(axis=1), 1.0)
    assert q.min() >= 0 and np.ptp(q[:, 1]) > 0.02  # jitter differs by level
    np.testing.assert_allclose(q, level_probabilities(RmatConfig(scale=20, noise=0.1, seed=9)))


@pytest.mark.parametrize(
    ("kw", "key"),
    [
        ({"noise": 0.3}, "rmat.noise"),
        ({"scale": 0}, "rmat.scale"),
        ({"a": 0.7, "b": 0.2, "c": 0.2}, "rmat.a/b/c"),
        ({"splits": [0.8, 0.3, 0.1]}, "rmat.splits"),
        ({"edge_types": 0}, "rmat.edge_types"),
        ({"seed": -1}, "rmat.seed"),
    ],
)
def test_bad_parameters_name_the_key(kw, key):
    with pytest.raises(ConfigError, match=re.escape(key)) as e:
        check_config(RmatConfig(**kw))
    assert "(got " in str(e.value)


def test_cli_prints_throughput(spark, tmp_path, capsys):
    from glisp_app.cli import main

    rc = main(
        [
            "generate",
            "rmat",
            "--scale",
            "8",
            "--edge-factor",
            "4",
            "--seed",
            "3",
            "--out",
            str(tmp_path),
            "--weights",
            "--edge-types",
            "2",
            "--files",
            "1",
            "--set",
            "rmat.noise=0.05",
        ]
    )
    assert rc == 0
    text = capsys.readouterr().out
    assert "1,024 edges" in text and "edges/s" in text and "ingest.toml" in text
    e = read_table(tmp_path / "edges")
    assert e.num_rows == 1024 and e.column_names == ["src", "dst", "etype", "weight"]
    toml = (tmp_path / "ingest.toml").read_text()
    assert '"noise": 0.05' in toml
    assert isinstance(load_config(tmp_path / "ingest.toml", env={}), Config)


def test_cli_rejects_bad_scale_before_spark(tmp_path, capsys):
    from glisp_app.cli import main

    assert main(["generate", "rmat", "--scale", "50", "--out", str(tmp_path)]) == 1
    assert "rmat.scale" in capsys.readouterr().err
