"""Peak resident memory of the Spark side of a benchmark: the JVM this process started (under ``local[N]`` the
driver and its executors) and the Python workers below it, sampled from /proc while a run goes on.

Why: ``ru_maxrss`` sees only the driver's Python process; the executors' memory (the JVM's heap and off-heap,
the Python workers' arrays) is in other processes, and what a task holds is what bounds the executor size.
"""

from __future__ import annotations

import threading
from typing import Self

import psutil


class Sampler:
    """A thread calling ``sample()`` every ``interval`` s while the ``with`` block runs (a process that ends
    between listing and reading it is skipped: ``psutil.Error``)."""

    def __init__(self, interval: float = 0.2) -> None:
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.sample()
            except psutil.Error:
                pass
            self._stop.wait(self.interval)

    def sample(self) -> None:
        raise NotImplementedError


class PeakRSS(Sampler):
    """``with PeakRSS() as peak: ...``; then ``peak.jvm_mb`` (the JVM) and ``peak.workers_mb`` (the largest sum of
    its Python descendants at one sample) and ``peak.worker_mb`` (the largest one worker)."""

    def __init__(self, interval: float = 0.2) -> None:
        super().__init__(interval)
        self.jvm_mb = self.workers_mb = self.worker_mb = 0.0
        self._me = psutil.Process()

    def sample(self) -> None:
        me, mb = self._me, 1024 * 1024
        for jvm in (c for c in me.children() if "java" in c.name()):
            self.jvm_mb = max(self.jvm_mb, jvm.memory_info().rss / mb)
            workers = [p.memory_info().rss / mb for p in jvm.children(recursive=True) if "python" in p.name()]
            self.workers_mb = max(self.workers_mb, sum(workers))
            self.worker_mb = max([self.worker_mb, *workers])
