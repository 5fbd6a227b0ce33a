"""A refresh predicted to compute every row (``glisp_infer.predict``) runs as a plain run, bit for bit, with no
keys, row map or signatures, and says so; its drift is measured on a sample; a bound over the prediction
measures again."""

from __future__ import annotations

import numpy as np
import pytest

from glisp_core.dataset.manifest import StageRecord
from glisp_infer.incremental import cosine_distance
from glisp_infer.predict import calibration_of, predicted_share, sample_vids
from glisp_infer.refresh import edge_change
from tests.glisp_infer.test_infer_incremental import _by_orig, _infer


def _kept(a: np.ndarray, b: np.ndarray) -> int:
    """Rows of ``a`` matched by a row of ``b`` (multisets of row keys)."""
    ua, ca = np.unique(a, return_counts=True)
    ub, cb = np.unique(b, return_counts=True)
    _, ia, ib = np.intersect1d(ua, ub, assume_unique=True, return_indices=True)
    return int(np.minimum(ca[ia], cb[ib]).sum())


@pytest.fixture(scope="module")
def same_vid_versions(spark, tmp_path_factory):
    """v1 to v4 of one graph with the same vertices, ids and features: each version replaces 3 % of the
    previous one's edge rows by random rows; each partition record counts the change as a partition refresh
    from the previous version does (every vertex at its vid)."""
    from tests.glisp_infer.conftest import _publish_version, first_version

    root = tmp_path_factory.mktemp("predict")
    rng = np.random.default_rng(8)
    src, dst, et, feats, ids = first_version(rng)
    n = len(ids)
    out, changes, prev = [], [], None
    for name in ("v1", "v2", "v3", "v4"):
        if prev is not None:
            keep = rng.random(len(src)) > 0.03
            m = int((~keep).sum())
            s, d = rng.integers(0, n, m), rng.integers(0, n, m)
            ok = s != d
            src = np.concatenate([src[keep], s[ok]])
            dst = np.concatenate([dst[keep], d[ok]])
            et = np.concatenate([et[keep], rng.integers(0, 2, int(ok.sum())).astype(np.int32)])
        rows = (src * n + dst) * 2 + et
        counts = None
        if prev is not None:
            kept = _kept(prev[1], rows)
            inc = {"kept": kept, "added": len(rows) - kept, "removed": len(prev[1]) - kept}
            counts = {"incremental": {"base": f"g/{prev[0]}", "same_vids": True, **inc}}
            changes.append((inc["added"] + inc["removed"]) / (inc["kept"] + inc["removed"]))
        out.append(_publish_version(spark, root, name, ids, src, dst, et, feats, 0, counts))
        prev = (name, rows)
    return out, changes


def test_a_refresh_predicted_to_compute_every_row_runs_as_a_plain_run(
    spark, same_vid_versions, make_infer_cfg, new_model
):
    from glisp_infer.job import run_infer

    (v1, r1), (v2, r2), (v3, r3), (v4, r4) = same_vid_versions[0]
    c12, c23, _ = same_vid_versions[1]
    model = new_model("sage", layers=2)
    kw = {"fanouts": [3, 4], "incremental_max_share": 0.15}
    _infer(spark, v1, r1, model, "pred", make_infer_cfg, **kw)
    second = _infer(spark, v2, r2, model, "pred", make_infer_cfg, **kw)
    inc2 = second.counts["incremental"]
    w0 = inc2["first_work_share"]
    assert inc2["path"] == "partial" and inc2["full_from_layer"] == 1 and w0 > 0.15, inc2  # measured, fell back
    assert inc2["calibration"] == {"version": "v2", "edge_change": round(c12, 6), "first_work_share": w0}
    assert "refresh_start_s" in second.timings

    third = _infer(spark, v3, r3, model, "pred", make_infer_cfg, **kw)
    inc3 = third.counts["incremental"]
    assert inc3["path"] == "full" and inc3["predicted"] is True and inc3["previous"] == "g/v2", inc3
    assert inc3["calibration"] == inc2["calibration"]  # carried to the next refresh
    assert inc3["edge_change"] == pytest.approx(c23, abs=1e-6)
    assert inc3["predicted_work_share"] == pytest.approx(1 - (1 - w0) ** (c23 / round(c12, 6)), abs=1e-5)
    assert inc3["reason"].startswith("predicted:") and "infer.incremental_max_share 0.15" in inc3["reason"]
    assert third.params["sampling"] == "kernel" and "refresh_start_s" not in third.timings
    plain = run_infer(spark, make_infer_cfg(model="m", run="pred-plain", fanouts=[3, 4]), v3)
    for layer in range(3):  # a plain run: the same rows, bit for bit
        a, b = _by_orig(v3, third, layer), _by_orig(v3, plain, layer)
        assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)

    d = third.metrics["drift"]  # every vertex is in the sample of a graph this small
    new, old = _by_orig(v3, third), _by_orig(v2, second)
    dist = cosine_distance(np.stack([new[k] for k in sorted(new)]), np.stack([old[k] for k in sorted(new)]))
    assert d["against"] == "v2" and d["sampled"] == d["matched"] == 262
    assert d["moved_share"] == pytest.approx((dist > 1e-6).mean(), abs=1e-6) and 0 < d["moved_share"] < 1
    assert d["cos_max"] == pytest.approx(dist.max(), abs=1e-6)
    assert d["cos_p50"] == pytest.approx(np.quantile(dist, 0.5), abs=1e-6)
    assert 0 <= d["knn_changed_share"] <= 1 and d["knn_queries"] > 0 and "predictions_changed_share" in d

    # v4 from v3's predicted run: predicted again from the calibration it carried
    fourth = _infer(spark, v4, r4, model, "pred", make_infer_cfg, **kw)
    inc4 = fourth.counts["incremental"]
    assert inc4.get("predicted") is True and inc4["previous"] == "g/v3", inc4
    assert inc4["calibration"] == inc2["calibration"]

    # a bound over the prediction: the refresh finds out what changed again, with stable samples; v3's plain run
    # holds no vertex keys, so the row map is a join by original id (it writes this run's keys), and none of its
    # float32 rows is copied
    cfg = make_infer_cfg(model="m", run="pred", incremental=True, fanouts=[3, 4], incremental_max_share=1.0)
    again = run_infer(spark, cfg, v4, force=True)
    inc = again.counts["incremental"]
    assert "predicted" not in inc and inc["previous"] == "g/v3" and inc["path"] == "full", inc
    assert "drew kernel samples" in inc["reason"] and inc["arithmetic"] == "float64", inc
    assert inc["row_map"] == "joined by original id" and "holds no vertex keys" in inc["row_map_why"], inc
    assert again.params["sampling"] == "stable" and "refresh_start_s" in again.timings
    assert again.metrics["drift"]["matched"] == 262  # against v3's rows, through the joined map

    # glisp report --compare says which path v3's run took and that its drift is a sample's
    from glisp_app.report_compare import compare_text
    from glisp_core.dataset.manifest import read_manifest

    block = compare_text(read_manifest(v2), read_manifest(v3)).split("Embedding versions")[1]
    assert "v3:infer/pred" in block and "full: predicted:" in block and "vertices the drift sampled" in block

    # v3's arrays removed by hand: nothing to measure the drift against, so no prediction; a full run says why
    import shutil

    from glisp_core.storage.uri import parse_uri
    from glisp_infer.store import store_url

    shutil.rmtree(parse_uri(store_url(v3, v3.path / third.path)).local)
    gone = run_infer(spark, make_infer_cfg(model="m", run="pred", incremental=True, **kw), v4, force=True)
    inc = gone.counts["incremental"]
    assert "predicted" not in inc and inc["path"] == "full" and "has no arrays" in inc["reason"], inc


def _rec(counts: dict, params: dict | None = None) -> StageRecord:
    return StageRecord(name="infer/r", path="infer/r/@x", fingerprint="", params=params or {}, counts=counts)


class _Dv:
    graph, version = "g", "v1"


def test_the_change_is_counted_only_against_the_previous_runs_version_with_every_vid_kept() -> None:
    inc = {"base": "g/v1", "same_vids": True, "kept": 90, "added": 12, "removed": 10}
    assert edge_change({"incremental": inc}, _Dv()) == pytest.approx(22 / 100)
    assert edge_change({"incremental": {**inc, "base": "g/v0"}}, _Dv()) is None  # another base version
    assert edge_change({"incremental": {**inc, "same_vids": False}}, _Dv()) is None  # vids moved
    assert edge_change({}, _Dv()) is None  # a fresh partition
    assert edge_change({"incremental": {k: v for k, v in inc.items() if k != "kept"}}, _Dv()) is None


def test_the_predicted_share_grows_with_the_change_from_the_calibration() -> None:
    cal = {"version": "v2", "edge_change": 0.01, "first_work_share": 0.738}
    assert predicted_share(cal, 0.01) == pytest.approx(0.738)
    assert predicted_share(cal, 0.02) == pytest.approx(1 - 0.262**2)
    assert predicted_share(cal, 0.001) == pytest.approx(1 - 0.262**0.1) and predicted_share(cal, 0.001) < 0.5
    assert predicted_share(cal, 0.0) == 0.0  # no change: nothing to recompute, the refresh measures
    assert predicted_share({**cal, "first_work_share": 1.0}, 0.001) == 1.0
    assert calibration_of(_rec({"incremental": {"calibration": cal}})) == cal
    assert calibration_of(_rec({"incremental": {"calibration": {**cal, "edge_change": 0}}})) is None
    assert calibration_of(_rec({"incremental": {"path": "partial"}})) is None


def test_the_drift_sample_is_bounded_and_drawn_from_a_few_chunks() -> None:
    rng = np.random.default_rng(0)
    assert np.array_equal(sample_vids(50, 16, 100, rng), np.arange(50))
    got = sample_vids(10_000_000, 1 << 16, 20_000, rng)
    assert len(got) == len(np.unique(got)) == 20_000 and got.max() < 10_000_000
    assert len(np.unique(got >> 16)) <= 4  # four chunks of the by-vid index at most, whatever |V|
