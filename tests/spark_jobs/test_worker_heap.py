"""Spark tasks freeze their worker's heap, so PySpark's collection after each task skips the imported modules."""

from __future__ import annotations

import gc
import sys
from types import SimpleNamespace

from pyspark import cloudpickle

from glisp_spark.worker_heap import freeze_worker_heap, frozen_in_this_task

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers cannot import a test module


def _probe(*_: object) -> dict:
    """What a task sees of the freeze: whether its runner froze the heap, and what a freeze leaves out of a
    collection afterwards (objects alive before it are not walked, objects made after it are)."""
    from_runner = frozen_in_this_task()
    gc.unfreeze()
    before = [[] for _ in range(1000)]
    freeze_worker_heap()
    after = [[] for _ in range(1000)]
    tracked = {id(o) for g in range(3) for o in gc.get_objects(generation=g)}
    return {
        "from_runner": from_runner,
        "frozen": gc.get_freeze_count(),
        "before_walked": any(id(o) in tracked for o in before),
        "after_walked": all(id(o) in tracked for o in after),
    }


def test_the_driver_is_never_frozen() -> None:
    frozen = gc.get_freeze_count()
    freeze_worker_heap()
    assert gc.get_freeze_count() == frozen
    assert not frozen_in_this_task()


def test_the_sql_task_runner_freezes_each_task(spark) -> None:
    from glisp_spark.tasks import run_tasks

    for r in run_tasks(spark, 3, _probe):
        assert r["from_runner"], "glisp_spark.tasks.run_tasks did not freeze the worker's heap"
        assert r["frozen"] >= 1000 and not r["before_walked"] and r["after_walked"]


def test_the_inference_task_runner_freezes_each_task(spark) -> None:
    from glisp_infer.job import run_tasks

    plan = SimpleNamespace(num_parts=3)
    for r in run_tasks(spark, plan, lambda p, k, a: _probe(), "freeze probe"):
        assert r["from_runner"], "glisp_infer.job.run_tasks did not freeze the worker's heap"
        assert r["frozen"] >= 1000 and not r["before_walked"] and r["after_walked"]
