"""dataset.confine_to: no path GLISP is given may resolve outside the configured directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from glisp_app.cli import main as glisp
from glisp_core.config import EdgeSource, IngestConfig, load_config, with_values
from glisp_core.dataset.paths import confine
from glisp_core.errors import ConfigError


def test_confine_follows_symlinks_and_dotdot(tmp_path: Path) -> None:
    jail = tmp_path / "data"
    (jail / "raw").mkdir(parents=True)
    (jail / "raw" / "e.csv").write_text("src,dst\n1,2\n")
    outside = tmp_path / "secret.csv"
    outside.write_text("src,dst\n")
    (jail / "raw" / "link.csv").symlink_to(outside)
    assert confine(jail / "raw" / "e.csv", str(jail), "k") == (jail / "raw" / "e.csv").resolve()
    assert confine(jail, str(jail), "k") == jail.resolve()
    assert confine(outside, "", "k") == outside.resolve()  # not configured: anywhere
    for bad in (outside, jail / "raw" / ".." / ".." / "secret.csv", jail / "raw" / "link.csv", tmp_path / "data2"):
        with pytest.raises(ConfigError, match=r"dataset.confine_to, key k: .* outside .*symlinks followed"):
            confine(bad, str(jail), "k")


def test_ingest_refuses_a_table_outside_before_any_work(spark, tmp_path: Path) -> None:
    from spark_jobs.ingest.job import run_ingest

    jail = tmp_path / "data"
    jail.mkdir()
    outside = tmp_path / "elsewhere.csv"
    outside.write_text("src,dst\n1,2\n")
    cfg = with_values(load_config(env={}), "dataset", root=str(jail / "glisp"), confine_to=str(jail))
    ing = IngestConfig(graph="g", edges=[EdgeSource(path=str(outside))])
    with pytest.raises(ConfigError, match="ingest table or feature file: .*elsewhere.csv"):
        run_ingest(spark, cfg, ing)
    assert not (jail / "glisp").exists()  # refused before anything was written
    cfg_root_out = with_values(cfg, "dataset", root=str(tmp_path / "other-root"))
    inside = jail / "e.csv"
    inside.write_text("src,dst\n1,2\n")
    with pytest.raises(ConfigError, match="dataset.root"):
        run_ingest(spark, cfg_root_out, IngestConfig(graph="g", edges=[EdgeSource(path=str(inside))]))


def test_cli_refuses_root_and_dataset_outside(tmp_path: Path, capsys) -> None:
    jail = tmp_path / "data"
    jail.mkdir()
    rc = glisp(["report", str(tmp_path), "--root", str(jail), "--set", f"dataset.confine_to={str(jail)!r}"])
    assert rc == 1 and "DATASET argument" in capsys.readouterr().err
    rc = glisp(["report", "g", "--root", str(tmp_path), "--set", f"dataset.confine_to={str(jail)!r}"])
    assert rc == 1 and "dataset.root" in capsys.readouterr().err
