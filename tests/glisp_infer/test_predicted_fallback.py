"""A refresh predicted to compute every row (``glisp_infer.predict``) runs as a plain run, bit for bit, with no
keys, row map or signatures, and says so; its drift is measured on a sample; a bound over the prediction
measures again."""

from __future__ import annotations

import numpy as np
import pytest

from glisp_core.dataset.manifest import StageRecord, read_manifest
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


def _added(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The row keys of ``b`` not matched by a row of ``a`` (the multiset difference), each as often as added."""
    ub, cb = np.unique(b, return_counts=True)
    ua, ca = np.unique(a, return_counts=True)
    at = np.searchsorted(ua, ub).clip(0, max(len(ua) - 1, 0))
    had = np.where((len(ua) > 0) & (ua[at] == ub), ca[at], 0)
    return np.repeat(ub, np.maximum(cb - had, 0))


def _chain(spark, root, rng, names, among: int | None = None, touched: bool = False):
    """Versions ``names`` of one graph with the same vertices, ids and features: each replaces 3 % of the previous
    one's edge rows by random rows (between the first ``among`` vertices only, where given); each partition record
    counts the change as a partition refresh from the previous version does (every vertex at its vid), with the
    vertices its added rows touched where ``touched``. Returns [(dv, run)], the changes and each version's dst."""
    from tests.glisp_infer.conftest import _publish_version, first_version

    src, dst, et, feats, ids = first_version(rng)
    n = len(ids)
    out, changes, dsts, prev = [], [], [], None
    for name in names:
        if prev is not None:
            keep = rng.random(len(src)) > 0.03
            m = int((~keep).sum())
            s, d = rng.integers(0, among or n, m), rng.integers(0, among or n, m)
            ok = s != d
            src = np.concatenate([src[keep], s[ok]])
            dst = np.concatenate([dst[keep], d[ok]])
            et = np.concatenate([et[keep], rng.integers(0, 2, int(ok.sum())).astype(np.int32)])
        rows = (src * n + dst) * 2 + et
        counts = None
        if prev is not None:
            kept = _kept(prev[1], rows)
            inc = {"kept": kept, "added": len(rows) - kept, "removed": len(prev[1]) - kept}
            if touched:
                ends = _added(prev[1], rows) // 2
                inc["touched_vertices"] = len(np.unique(np.concatenate([ends // n, ends % n])))
            counts = {"incremental": {"base": f"g/{prev[0]}", "same_vids": True, **inc}}
            changes.append((inc["added"] + inc["removed"]) / (inc["kept"] + inc["removed"]))
        out.append(_publish_version(spark, root, name, ids, src, dst, et, feats, 0, counts))
        dsts.append(dst)
        prev = (name, rows)
    return out, changes, dsts


@pytest.fixture(scope="module")
def same_vid_versions(spark, tmp_path_factory):
    """v1 to v4 (:func:`_chain`), their partition records without the touched vertices: no profile to predict from."""
    out, changes, _ = _chain(
        spark, tmp_path_factory.mktemp("predict"), np.random.default_rng(8), ("v1", "v2", "v3", "v4")
    )
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


@pytest.fixture(scope="module")
def spread_and_local_versions(spark, tmp_path_factory):
    """Two pairs of versions whose partition records count the vertices the added rows touched: in one the 3 %
    of new rows fall anywhere, in the other between 12 vertices."""
    spread = _chain(spark, tmp_path_factory.mktemp("spread"), np.random.default_rng(8), ("v1", "v2"), touched=True)
    local = _chain(spark, tmp_path_factory.mktemp("local"), np.random.default_rng(8), ("v1", "v2"), 12, True)
    return spread, local


def test_a_first_refresh_predicts_from_the_previous_runs_work_per_in_degree_where_the_change_is_spread(
    spark, spread_and_local_versions, make_infer_cfg, new_model
):
    from glisp_infer.profile import bin_floor, bin_of, profile_of, spread_like_rows, work_share

    (((v1, r1), (v2, r2)), (c12,), (dst1, _)), local = spread_and_local_versions
    model = new_model("sage", layers=2)
    kw = {"fanouts": [3, 4], "incremental_max_share": 0.15}
    first = _infer(spark, v1, r1, model, "prof", make_infer_cfg, **kw)
    prof = first.counts["work_profile"]  # the plan job's, by every in-edge (stable samples gather them all)
    deg = np.bincount(dst1, minlength=262)
    bins, vertices = np.unique(bin_of(deg), return_counts=True)
    assert prof["vertices"] == vertices.tolist() and prof["capped"] is False, prof
    assert prof["degree"] == bin_floor(bins).tolist()  # a vertex's work: its sampled in-edges and its own row
    assert all(v <= w <= v * (d + 1) for d, v, w in zip(prof["degree"], vertices, prof["work"], strict=True))

    second = _infer(spark, v2, r2, model, "prof", make_infer_cfg, **kw)
    inc = second.counts["incremental"]
    part_inc = read_manifest(v2).stage(f"partition/{r2}").counts["incremental"]
    assert inc["path"] == "full" and inc["predicted"] is True and inc["predicted_from"] == "work_profile", inc
    assert "calibration" not in inc and "refresh_start_s" not in second.timings
    assert inc["predicted_work_share"] == pytest.approx(work_share(profile_of(first.counts), c12), abs=1e-6)
    assert inc["touched_vertices"] == part_inc["touched_vertices"] and "touched" in inc["reason"], inc
    assert second.params["sampling"] == "kernel" and second.counts["work_profile"]["capped"] is True

    # the same share of new rows between 12 vertices: the model would predict as much, but the touched vertices
    # say the change is not spread, so the refresh measures (and finds far less)
    ((l1, q1), (l2, q2)), (cl,), _ = local
    first = _infer(spark, l1, q1, model, "prof", make_infer_cfg, **kw)
    profile = profile_of(first.counts)
    assert work_share(profile, cl) > 0.15
    part_inc = read_manifest(l2).stage(f"partition/{q2}").counts["incremental"]
    assert part_inc["touched_vertices"] <= 12 and not spread_like_rows(profile, part_inc)[0]
    measured = _infer(spark, l2, q2, model, "prof", make_infer_cfg, **kw).counts["incremental"]
    assert "predicted" not in measured and measured["first_work_share"] < work_share(profile, cl), measured


def test_the_work_profile_is_a_lower_bound_of_the_models_share_within_its_bins() -> None:
    from glisp_infer.profile import NUM_BINS, histogram, profile_of, record, spread_like_rows, work_share

    rng = np.random.default_rng(3)
    deg = np.minimum(rng.zipf(1.8, 200_000) - 1, 10**7)
    work = deg + 1
    parts = [histogram(deg[i::3], work[i::3]) for i in range(3)]  # three tasks' histograms, summed
    rec = record(parts, capped=False)
    assert rec is not None and len(rec["degree"]) <= NUM_BINS and sum(rec["vertices"]) == len(deg)
    prof = profile_of({"work_profile": rec})
    for c in (0.001, 0.01, 0.05):
        exact = float((work * (1 - (1 - c) ** deg)).sum() / work.sum())
        assert exact - 0.01 <= work_share(prof, c) <= exact + 1e-12, (c, exact)
    small = np.arange(64).repeat(3)  # degrees under 64 have a bin each: the share is exact
    sp = profile_of({"work_profile": record([histogram(small, small + 1)], False)})
    exact = float(((small + 1) * (1 - 0.98**small)).sum() / (small + 1).sum())
    assert work_share(sp, 0.02) == pytest.approx(exact, rel=1e-12) and work_share(sp, 0.0) == 0.0
    assert profile_of({}) is None and profile_of({"work_profile": {"degree": [1]}}) is None
    inc = {"kept": 9700, "added": 300, "removed": 300}
    assert spread_like_rows(prof, inc) == (False, {})  # no touched count: no prediction from the profile


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
