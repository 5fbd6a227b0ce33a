"""A server's budget of memory for the requests it works on at once (``serve.max_inflight_mb``).

Each request's own bounds (serve.max_batch, max_request_edges, max_message_mb) cap one request; this
caps their sum. A request reserves what its buffers will take (its wire bytes, then what its sampled
edges or looked-up rows imply) before allocating them, waits while others hold the budget, and is
refused RESOURCE_EXHAUSTED (:class:`RequestTooCostly`) when the wait would pass its deadline. The
reservation is released when the request's answer has been built: memory use follows the budget, not
the number of callers.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager


class OverBudget(Exception):
    """The reservation cannot be had in time (the caller maps it to RequestTooCostly)."""


class WorkBudget:
    """Bytes held by requests in progress, at most ``capacity`` (0 = no limit)."""

    def __init__(self, capacity: int = 0) -> None:
        self.capacity = int(capacity)
        self.used = 0
        self.peak = 0
        self._cond = threading.Condition()
        self._local = threading.local()

    @contextmanager
    def request(self, wait_s: float | None = None) -> Iterator[None]:
        """Around one request: what it reserves inside is given back when it ends (answered or refused).
        ``wait_s``: how long a reservation may wait for others to finish (the caller's deadline)."""
        self._local.held, self._local.wait_s = 0, wait_s
        try:
            yield
        finally:
            held, self._local.held = getattr(self._local, "held", 0), 0
            if held:
                with self._cond:
                    self.used -= held
                    self._cond.notify_all()

    def reserve(self, nbytes: int, what: str) -> None:
        """Hold ``nbytes`` more for the current request; OverBudget naming ``what`` when they cannot be had."""
        if self.capacity <= 0 or nbytes <= 0:
            return
        if nbytes > self.capacity:
            raise OverBudget(
                f"{what} needs {nbytes >> 20} MiB, over the server's whole budget serve.max_inflight_mb="
                f"{self.capacity >> 20}; split the request"
            )
        wait_s = getattr(self._local, "wait_s", None)
        end = time.monotonic() + (30.0 if wait_s is None else max(0.0, wait_s))
        with self._cond:
            while self.used + nbytes > self.capacity:
                left = end - time.monotonic()
                if left <= 0:
                    raise OverBudget(
                        f"{what} needs {nbytes >> 20} MiB and the server's requests in progress hold "
                        f"{self.used >> 20} of serve.max_inflight_mb={self.capacity >> 20} until past the "
                        "deadline; retry, or use another replica"
                    )
                self._cond.wait(left)
            self.used += nbytes
            self.peak = max(self.peak, self.used)
        self._local.held = getattr(self._local, "held", 0) + nbytes
