"""EmbeddingLookup: batches of original ids from the published Zarr, one reader following LATEST."""

from __future__ import annotations

import numpy as np
import pytest

from glisp_core.errors import GlispError

pytestmark = pytest.mark.usefixtures("spark")


def test_lookup_answers_by_original_id_and_follows_latest(spark, two_versions, make_infer_cfg, new_model) -> None:
    from glisp_core.dataset.versions import set_latest
    from glisp_infer.job import run_infer
    from glisp_infer.lookup import EmbeddingLookup
    from glisp_infer.read import InferenceRun
    from glisp_train.publish import publish_model

    v = two_versions
    model = new_model("sage", layers=2)
    for dv, run in ((v.old, v.old_run), (v.new, v.new_run)):
        publish_model(dv, "look-m", model, run)
        run_infer(spark, make_infer_cfg(model="look-m", run="look"), dv)
    set_latest(v.old)
    lookup = EmbeddingLookup(v.old.path.parent.local, run="look", recheck_s=0)
    ids = ["u3", "u200", "u17", "u3", "u61"]
    got = lookup.get(ids)
    np.testing.assert_array_equal(got, InferenceRun(v.old, "look").embeddings(ids))
    lookup.get(["u5"])
    assert lookup.opens == 1 and lookup.version == "v1"  # LATEST re-read, unchanged: nothing reopened
    # a refresh publishes v2 and moves LATEST: the same reader answers from v2, opened once
    set_latest(v.new)
    new_ids = ["new0", "u3", "new4"]
    np.testing.assert_array_equal(lookup.get(new_ids), InferenceRun(v.new, "look").embeddings(new_ids))
    assert lookup.version == "v2" and lookup.opens == 2
    lookup.get(ids[:2])
    assert lookup.opens == 2
    with pytest.raises(GlispError, match="not vertices of the graph"):
        lookup.get(["u3", "nobody"])
    assert np.isnan(lookup.get(["nobody", "u3"], missing="nan")[0]).all()
    # a reader that rechecks rarely keeps answering from the version it holds
    set_latest(v.old)
    slow = EmbeddingLookup(v.old.path.parent.local, run="look", recheck_s=3600)
    assert slow.version == "v1"
    set_latest(v.new)
    slow.get(["u3"])
    assert slow.version == "v1" and slow.refresh() and slow.version == "v2"
