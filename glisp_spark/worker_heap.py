"""Keep PySpark's per-task garbage collection cheap in Python workers that hold torch, numba or zarr.

PySpark's daemon reuses a Python worker for many tasks and runs a full ``gc.collect()`` after every one. A full
collection walks every object the collector tracks, and a worker that imported torch and zarr tracks hundreds of
thousands: each task then pays 60-100 ms of CPU (measured on this machine: 30 two-task jobs cost a worker 4.8 CPU-s
with ``glisp_infer.task`` imported, 0.07 CPU-s with this call) to find that the imported modules are still alive.

:func:`freeze_worker_heap`, called first thing in a task, moves everything alive at that moment into the
permanent generation (``gc.freeze``), so the collections that follow walk only what the task itself allocates. It
freezes nothing collectable: the daemon has just collected the previous task's garbage. The driver, the tests that
call a task function in process and the sampling servers are not Spark tasks, and are left alone.
"""

from __future__ import annotations

import gc

_frozen_in: int | None = None  # the task attempt that last froze this worker's heap


def freeze_worker_heap() -> None:
    """Inside a Spark task: exclude the worker's long-lived objects from every later collection."""
    global _frozen_in
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is not None:
        gc.freeze()
        _frozen_in = ctx.taskAttemptId()


def frozen_in_this_task() -> bool:
    """Whether the running Spark task froze its worker's heap (what the tests of each task runner check)."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return ctx is not None and _frozen_in == ctx.taskAttemptId()
