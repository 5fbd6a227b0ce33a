"""A bound on a cluster that cannot keep executors up: the driver's jobs fail, naming why, instead of waiting.

Why: a broken executor environment (a Python without the packages, an archive that does not unpack, a full
disk, a bad JVM option) makes the cluster manager relaunch executors without end: a standalone master resets
its retry count each time an executor process starts, so an application saw 38 relaunches in 2.5 minutes and
never failed. Task failures are bounded by Spark (``spark.task.maxFailures``); executor failures are not,
except on YARN and Kubernetes (``spark.executor.maxNumFailures``). So the driver watches:

- executors that registered and were lost (Spark's status store keeps the dead ones): more than
  ``spark.max_executor_losses`` (0: ``max(3, 2 x the most executors alive at once)``, YARN's default rule) and
  the active jobs are cancelled;
- no executor alive while a job waits for ``spark.no_executor_timeout_s`` (0: never; executors that fail
  before they register are invisible to the driver, so time is the only sign): the same.

The cancellation's reason is the message a stage fails with. Local masters (the driver is the executor) and
dynamic allocation (which removes idle executors on purpose) are not watched.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

POLL_S = 2.0


@dataclass
class Verdict:
    """What the watch has seen so far; :meth:`reason` says whether to fail the jobs."""

    max_losses: int
    no_executor_s: float
    peak: int = 0
    idle_since: float | None = None  # when a job started waiting with no executor alive

    def reason(self, alive: int, lost: int, jobs: bool, now: float) -> str | None:
        self.peak = max(self.peak, alive)
        limit = self.max_losses or max(3, 2 * self.peak)
        if lost > limit:
            return (
                f"{lost} executors were lost (more than spark.max_executor_losses = {limit}): the cluster cannot keep "
                "them up; their logs on the workers say why (a missing package or archive, a full disk, memory)"
            )
        self.idle_since = None if alive or not jobs else (self.idle_since or now)
        if self.no_executor_s and self.idle_since is not None and now - self.idle_since > self.no_executor_s:
            return (
                f"no executor has been up for {now - self.idle_since:.0f} s while a job waited (more than "
                f"spark.no_executor_timeout_s = {self.no_executor_s:g}): executors fail before they register "
                "(a bad Python or JVM option, an archive or a class that cannot be fetched) or the cluster has no room"
            )
        return None


def _executors(sc: Any) -> tuple[int, int]:
    """(alive, lost) executors of the application, from Spark's status store (the driver's entry excluded)."""
    summaries = sc._jsc.sc().statusStore().executorList(False)
    alive = lost = 0
    for i in range(summaries.size()):
        e = summaries.apply(i)
        if e.id() != "driver":
            alive, lost = (alive + 1, lost) if e.isActive() else (alive, lost + 1)
    return alive, lost


def watch(sc: Any, max_losses: int, no_executor_s: float, poll_s: float = POLL_S) -> threading.Thread:
    """Start the watch on ``sc`` (a daemon thread that ends with the context)."""
    verdict = Verdict(max_losses, no_executor_s)

    def run() -> None:
        while not sc._jsc.sc().isStopped():
            jobs = list(sc.statusTracker().getActiveJobsIds())
            why = verdict.reason(*_executors(sc), bool(jobs), time.monotonic())
            if why:
                for job in jobs:
                    sc._jsc.sc().cancelJob(int(job), f"by GLISP: {why}")
            time.sleep(poll_s)

    def guarded() -> None:
        try:
            run()
        except Exception:  # the context stopped under it (py4j gone): nothing left to watch
            return

    t = threading.Thread(target=guarded, name="glisp-executor-watch", daemon=True)
    t.start()
    return t
