"""The executor watch's rule (glisp_spark.executor_watch.Verdict): lost executors and time with none alive.
The standalone tier runs it against a real cluster whose executors never start (tests/cluster/)."""

from __future__ import annotations

from glisp_spark.executor_watch import Verdict


def test_lost_executors_beyond_the_limit_fail_the_jobs():
    v = Verdict(max_losses=0, no_executor_s=0)
    assert v.reason(alive=2, lost=0, jobs=True, now=0) is None
    assert v.reason(alive=2, lost=4, jobs=True, now=1) is None  # auto limit: max(3, 2 x peak 2) = 4
    why = v.reason(alive=1, lost=5, jobs=True, now=2)
    assert why is not None and "5 executors were lost" in why and "spark.max_executor_losses = 4" in why
    assert Verdict(max_losses=0, no_executor_s=0).reason(alive=0, lost=4, jobs=True, now=0)  # never up: 3
    assert Verdict(max_losses=10, no_executor_s=0).reason(alive=0, lost=10, jobs=True, now=0) is None


def test_a_job_waiting_with_no_executor_fails_after_the_timeout_and_only_then():
    v = Verdict(max_losses=0, no_executor_s=30)
    assert v.reason(alive=0, lost=0, jobs=True, now=100) is None  # starts the clock
    assert v.reason(alive=0, lost=0, jobs=True, now=125) is None
    assert v.reason(alive=1, lost=0, jobs=True, now=126) is None  # one came up: the clock stops
    assert v.reason(alive=0, lost=1, jobs=False, now=150) is None  # no job waits: nothing to fail
    assert v.reason(alive=0, lost=1, jobs=True, now=160) is None  # restarts
    why = v.reason(alive=0, lost=1, jobs=True, now=191)
    assert why is not None and "no executor has been up for 31 s" in why
    assert Verdict(max_losses=0, no_executor_s=0).reason(alive=0, lost=0, jobs=True, now=1e9) is None  # 0: waits
