"""Failures: a task killed part-way and retried by Spark leaves a correct array; a failed run publishes nothing
and loses nothing already published."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from glisp_core.dataset.manifest import read_manifest
from tests.glisp_infer.conftest import infer_cfg, make_model

ROOT = Path(__file__).resolve().parents[2]


def _stage_dirs(g) -> list[str]:
    d = g.dv.path.local / "infer"
    return sorted(p.name for p in d.iterdir()) if d.exists() else []


def test_a_failed_run_publishes_nothing_and_keeps_the_last_good_one(spark, infer_graph, tmp_path) -> None:
    from glisp_infer.job import run_infer
    from glisp_infer.read import InferenceRun
    from glisp_train.publish import publish_model

    g = infer_graph
    publish_model(g.dv, "sage-f", make_model("sage", seed=3), g.run)
    cfg = infer_cfg(model="sage-f", run="sage-f", store=f"file://{tmp_path}/ext")
    before = _stage_dirs(g)
    with pytest.raises(Exception, match="injected failure"):
        run_infer(spark, cfg, g.dv, fault="1:0:1:raise")
    man = read_manifest(g.dv)
    assert "infer/sage-f" not in man.stages and _stage_dirs(g) == before  # no stage, no leftovers
    assert not any((tmp_path / "ext").rglob("zarr.json"))  # the external store of the failed run is gone
    good = run_infer(spark, cfg, g.dv)
    emb = InferenceRun.open(g.dv.path, "sage-f").embeddings([str(i) for i in range(g.n)])
    with pytest.raises(Exception, match="injected failure"):
        run_infer(spark, cfg, g.dv, force=True, fault="2:1:1:raise")
    after = read_manifest(g.dv).stage("infer/sage-f")
    assert after.fingerprint == good.fingerprint and after.completed_at == good.completed_at
    np.testing.assert_array_equal(InferenceRun.open(g.dv.path, "sage-f").embeddings([str(i) for i in range(g.n)]), emb)
    assert not [p for p in (g.dv.path.local / "infer").iterdir() if p.name.startswith(".")]
    assert len(list((tmp_path / "ext").rglob("layers/zarr.json"))) == 1  # only the published store remains


def test_a_killed_task_is_retried_and_leaves_a_correct_array(infer_graph, jvm_processes) -> None:
    """``glisp infer`` in its own Spark (local[2,2]: one retry per task); the first attempt of partition 1's
    layer-1 task kills its Python worker after writing one chunk."""
    from glisp_infer.read import InferenceRun
    from glisp_train.publish import publish_model

    g = infer_graph
    model = make_model("sage", seed=4)
    publish_model(g.dv, "sage-r", model, g.run)
    env = dict(os.environ, PYTHONPATH=str(ROOT), GLISP_INFER_FAULT="1:1:1")
    cmd = [
        sys.executable,
        "-m",
        "glisp_app.cli",
        "infer",
        str(g.dv.path),
        "--model",
        "sage-r",
        "--master",
        "local[2,2]",
        "--set",
        "infer.chunk_rows=16",
        "--set",
        "infer.batch_size=24",
        "--set",
        "spark.driver_memory=1g",
        "--set",
        "spark.log_level=ERROR",
    ]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    rec = read_manifest(g.dv).stage("infer/sage-r-pds")
    assert rec.metrics["retried_tasks"] == 1 and rec.metrics["layers"]["layer1"]["attempts_per_part"] == [1, 2, 1]
    emb = InferenceRun.open(g.dv.path, "sage-r-pds").embeddings([str(i) for i in range(g.n)])
    np.testing.assert_allclose(emb, g.reference(model).numpy(), rtol=1e-4, atol=1e-5)


def test_removing_a_failed_runs_store_retries_and_never_raises(tmp_path, monkeypatch, capsys) -> None:
    """A task of the aborted job may still write into the store while the driver removes it: the removal tries
    again, and when it cannot finish it says so instead of raising over the run's own error."""
    import fsspec

    from glisp_infer import job

    monkeypatch.setattr(job.time, "sleep", lambda s: None)
    (tmp_path / "s" / "layers").mkdir(parents=True)
    fs = fsspec.filesystem("file")
    real, calls = fs.rm, []

    def busy_twice(path, recursive=False):
        calls.append(path)
        if len(calls) <= 2:
            raise OSError(39, "Directory not empty", "layers")
        return real(path, recursive=recursive)

    monkeypatch.setattr(type(fs), "rm", lambda self, path, recursive=False: busy_twice(path, recursive))
    job._remove_store(f"file://{tmp_path}/s")
    assert len(calls) == 3 and not (tmp_path / "s").exists()
    (tmp_path / "t").mkdir()
    calls.clear()
    monkeypatch.setattr(type(fs), "rm", lambda self, path, recursive=False: (_ for _ in ()).throw(OSError(39, "busy")))
    job._remove_store(str(tmp_path / "t"))  # no exception
    assert "could not remove the unpublished store" in capsys.readouterr().err and (tmp_path / "t").exists()
