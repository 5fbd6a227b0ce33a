"""What users consume: link scores of every edge or of an edge list, the id helper, the CLI and the report."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest
import torch

from glisp_core.dataset.manifest import read_manifest
from glisp_core.errors import BadInputError, GlispError
from tests.glisp_infer.conftest import infer_cfg, make_model

pytestmark = pytest.mark.usefixtures("spark")


@pytest.fixture(scope="module")
def link(spark, infer_graph):
    """A link-task SAGE at full fanout through the CLI; the every-edge scores are published with it."""
    from glisp_app.cli import main
    from glisp_train.publish import publish_model

    g = infer_graph
    model = make_model("sage", task="link", out_dim=4, seed=7)
    publish_model(g.dv, "link", model, g.run)
    assert main(LINK_ARGS(g)) == 0
    return model, g.reference(model)


def LINK_ARGS(g) -> list[str]:  # noqa: N802
    return ["infer", str(g.dv.path), "--model", "link", "--set", "infer.chunk_rows=16", "--set", "infer.batch_size=24"]


def _scores(ref: torch.Tensor, src, dst) -> np.ndarray:
    from glisp_core.models import link_scores

    return link_scores(ref[torch.as_tensor(src)], ref[torch.as_tensor(dst)]).numpy()


def test_every_edge_is_scored_once_with_original_ids(infer_graph, link, capsys) -> None:
    from glisp_app.cli import main
    from glisp_core.dataset.manifest import read_manifest

    g = infer_graph
    _, ref = link
    rec = read_manifest(g.dv).stage("infer/link-pds")
    assert rec.counts["scores"] == len(g.src) and rec.params["task"] == "link"
    t = pq.read_table(g.dv.path / rec.path / "scores").to_pandas()
    got = t.sort_values(["src_vid", "dst_vid", "etype", "score"])
    want = np.lexsort((g.etype, g.dst, g.src))
    assert np.array_equal(got["src_vid"].to_numpy(), g.src[want]) and np.array_equal(got["dst_vid"], g.dst[want])
    assert (got["src"].to_numpy() == got["src_vid"].to_numpy().astype(str)).all()
    assert set(got["etype"]) == {"cites", "likes"}
    np.testing.assert_allclose(t["score"].to_numpy(), _scores(ref, t["src_vid"], t["dst_vid"]), rtol=1e-4, atol=1e-5)
    assert main(LINK_ARGS(g)) == 0  # current: nothing recomputed
    assert "up to date (use --force to run it again)" in capsys.readouterr().out
    assert read_manifest(g.dv).stage("infer/link-pds").completed_at == rec.completed_at


def test_edge_list_scores_and_bad_ids(spark, infer_graph, link, tmp_path) -> None:
    from glisp_infer.job import run_infer

    g = infer_graph
    _, ref = link
    pairs = pa.table({"a": ["3", "17", "261", "3"], "b": ["5", "3", "0", "3"], "note": ["x", "y", "z", "w"]})
    pcsv.write_csv(pairs, tmp_path / "pairs.csv")
    cfg = infer_cfg(model="link", run="link-list", edges=str(tmp_path / "pairs.csv"), edges_src="a", edges_dst="b")
    rec = run_infer(spark, cfg, g.dv)
    t = pq.read_table(g.dv.path / rec.path / "scores").to_pandas().sort_values("note")
    assert rec.counts["scores"] == 4 and list(t["note"]) == ["w", "x", "y", "z"]
    np.testing.assert_allclose(t["score"], _scores(ref, t["src_vid"], t["dst_vid"]), rtol=1e-4, atol=1e-5)
    assert list(t["src_vid"]) == [3, 3, 17, 261]  # an isolated vertex has an embedding too
    pq.write_table(pa.table({"src": [1, 999999], "dst": [2, 3]}), tmp_path / "bad.parquet")
    bad = infer_cfg(model="link", run="link-bad", edges=str(tmp_path / "bad.parquet"))
    with pytest.raises(BadInputError, match=r"bad.parquet, column 'src': 1 of 2 rows name no vertex .*999999"):
        run_infer(spark, bad, g.dv)
    with pytest.raises(GlispError, match="no column 'from'"):
        run_infer(
            spark, infer_cfg(model="link", run="link-bad", edges=str(tmp_path / "bad.parquet"), edges_src="from"), g.dv
        )

    assert "infer/link-bad" not in read_manifest(g.dv).stages


def test_read_helper_by_original_ids(infer_graph, link) -> None:
    from glisp_infer.read import InferenceRun, read_embeddings

    g = infer_graph
    _, ref = link
    ids = ["200", "7", "200", "0"]
    got = read_embeddings(g.dv.path, ids, run="link-pds")
    np.testing.assert_allclose(got, ref.numpy()[[200, 7, 200, 0]], rtol=1e-4, atol=1e-5)
    run = InferenceRun.open(g.dv.path, "link-pds")
    np.testing.assert_array_equal(run.embeddings(["7"], layer=0), g.features[[7]])
    assert run.layer(-1).shape[1] == 4 and run.layer(0).shape[1] == 6
    with pytest.raises(GlispError, match=r"2 ids are not vertices of the graph \(got e.g. \['x', '99999'\]\)"):
        run.embeddings(["x", "7", "99999"])


def test_report_shows_inference_runs(infer_graph, link) -> None:
    from glisp_app.report import summary

    text = summary(read_manifest(infer_graph.dv), infer_graph.dv)
    assert "Inference runs" in text and "link-pds" in text
    assert "fill/model" in text and "hit ratio" in text and "exchange/model" in text and "halo rows" in text


def test_cli_errors(infer_graph, capsys) -> None:
    from glisp_app.cli import main

    g = infer_graph
    assert main(["infer", str(g.dv.path), "--model", "nope"]) == 1
    assert "no version of graph 'rmat8' holds train/nope; train it first" in capsys.readouterr().err
    assert main(["infer", str(g.dv.path), "--fanouts", "3,x"]) == 1
    assert "--fanouts: expected integers like 15,10,5 or 'full'" in capsys.readouterr().err
    assert main(["infer", str(g.dv.path), "--order", "zz"]) == 1
    assert "expected one of pds, ns, ds, ps" in capsys.readouterr().err
    from glisp_train.publish import publish_model

    publish_model(g.dv, "three", make_model("sage", layers=2), g.run)
    assert main(["infer", str(g.dv.path), "--model", "three", "--fanouts", "5,5,5"]) == 1
    assert "the model has 2 layers, so give 2 fanouts (got [5, 5, 5])" in capsys.readouterr().err


def test_the_cli_starts_spark_early_only_for_a_run_that_has_work(infer_graph, link, monkeypatch, capsys) -> None:
    """Without a record of the run (or with --force) the session starts in the background while the model's
    imports load; a run with a record may be current, which needs the model to tell: nothing starts early."""
    import glisp_spark.session as S
    from glisp_app.cli import main
    from glisp_infer.cli import _published

    g = infer_graph
    assert _published(g.dv, [("", "pds")], "link") and _published(g.dv, [("link-pds", "ns")], None)
    assert not _published(g.dv, [("", "ns")], "link") and not _published(g.dv, [("other", "pds")], "link")
    assert not _published(g.dv, [("", "pds"), ("", "ns")], "link")  # every order's run must have a record
    man = read_manifest(g.dv)
    assert _published(g.dv, [("", "pds")], None) == (f"infer/{man.latest_run('train')}-pds" in man.stages)
    early: list[bool] = []
    real = S.LazySpark.prestart

    def spy(self: S.LazySpark) -> None:
        early.append(True)
        real(self)

    monkeypatch.setattr(S.LazySpark, "prestart", spy)
    assert main(LINK_ARGS(g)) == 0
    assert "up to date" in capsys.readouterr().out and early == []
    assert main([*LINK_ARGS(g), "--run", "link-early"]) == 0  # no record of it: it runs, the session started early
    assert early == [True] and read_manifest(g.dv).stage("infer/link-early").counts["scores"] == len(g.src)
    # a start that fails (no Java here) ends the run with its error, and publishes nothing (that the background
    # thread's failure is raised by the first use, and not retried unseen, is test_lazy_session's)
    env = {**os.environ, "JAVA_HOME": "/nonexistent-java", "PYTHONPATH": os.getcwd()}
    r = subprocess.run(
        [sys.executable, "-m", "glisp_app.cli", *LINK_ARGS(g), "--run", "link-nojava"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert r.returncode != 0 and "Java not found" in r.stderr, r.stdout + r.stderr
    assert "infer/link-nojava" not in read_manifest(g.dv).stages
