"""A server's life: starting (warm-up that SIGTERM may cut short), serving, integrity, draining.

:class:`ServingState` is what the servicer and the signal handlers share: the stop event, the requests
in flight (reported by Stats, so a drain can be observed rather than slept on), the health status
and the result of the background content check. A partition whose files stop matching their recorded
hashes takes the server out of SERVING: health reports NOT_SERVING and sampling RPCs answer
UNAVAILABLE, which clients treat as "use another replica".
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

log = logging.getLogger("glisp.serve")


LEASE_RELEASE_S = 5.0  # at shutdown, the longest wait for the version lease's release (then it lapses by itself)


class StopDuringStart(Exception):
    """SIGTERM/SIGINT arrived before the server was SERVING: exit 0 without serving."""


class ServingState:
    """Shared by the servicer, the health service, the verifier thread and the signal handlers."""

    def __init__(self, restarts: int = 0) -> None:
        self.stop = threading.Event()
        self.reload_requested = threading.Event()  # SIGHUP: move to the graph's latest version
        self.restarts = restarts  # times serve-cluster restarted this partition's server before this process
        self.integrity = "pending"  # "pending", "ok", "off", "failed: <files>"; set through set_integrity
        self._generation = 0  # bumped at each switch of version: a check of a retired version changes nothing
        self._lock = threading.Lock()
        self._in_flight = 0
        self._health: Any = None
        self._starting = True
        self.served_once = False  # set once SERVING: a stop before that is a stop during start

    # ------------------------------------------------------------------ signals
    def install_signals(self) -> None:
        """SIGTERM/SIGINT: before SERVING, abandon the start (StopDuringStart); after, begin the drain."""

        def on_signal(signum: int, frame: object) -> None:
            self.stop.set()
            if self._starting:
                self._starting = False  # raise once: the cleanup that follows must not be interrupted
                raise StopDuringStart(signal.Signals(signum).name)

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        signal.signal(signal.SIGHUP, lambda signum, frame: self.reload_requested.set())

    def started(self, health: Any, services: tuple[str, ...]) -> None:
        """SERVING from now on (unless a stop or a failed check came first)."""
        self._health, self._services = health, services
        self._starting = False
        if self.stop.is_set():
            raise StopDuringStart("stop requested during start")
        self._set_health("NOT_SERVING" if self.integrity.startswith("failed") else "SERVING")
        self.served_once = True

    def _set_health(self, status: str) -> None:
        from grpc_health.v1 import health_pb2

        code = getattr(health_pb2.HealthCheckResponse, status)
        for name in self._services:
            self._health.set(name, code)

    def switched(self) -> int:
        """A new version is served from now on: its integrity is unknown until checked; the new generation."""
        with self._lock:
            self._generation += 1
            return self._generation

    def set_integrity(self, status: str, generation: int | None = None) -> None:
        """Record the served version's integrity and keep health in step with it: NOT_SERVING exactly while
        it failed, SERVING otherwise (unless stopping). A result for a retired ``generation`` is dropped."""
        with self._lock:
            if generation is not None and generation != self._generation:
                return
            self.integrity = status
        if self._health is not None and not self.stop.is_set():
            self._set_health("NOT_SERVING" if status.startswith("failed") else "SERVING")

    def draining(self) -> None:
        """NOT_SERVING for probes and load balancers; RPCs are still answered until the drain ends."""
        if self._health is not None:
            self._set_health("NOT_SERVING")

    # ------------------------------------------------------------------ requests
    @contextmanager
    def request(self) -> Iterator[None]:
        with self._lock:
            self._in_flight += 1
        try:
            yield
        finally:
            with self._lock:
                self._in_flight -= 1

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def refusal(self) -> str | None:
        """Why sampling RPCs must be refused now (None while the partition is trusted)."""
        if self.integrity.startswith("failed"):
            return f"partition integrity check {self.integrity}; this server is out of service"
        return None

    # ------------------------------------------------------------------ integrity
    def verify_in_background(self, reader: Any, interval_s: float = 0.0) -> threading.Thread:
        """Hash every partition file after SERVING (and every ``interval_s`` when > 0); NOT_SERVING on a mismatch.

        The result counts only while ``reader``'s version is still the one served (a reload moves on)."""
        from glisp_core.partition_format.integrity import verify_checksums

        generation = self._generation

        def run() -> None:
            while not self.stop.is_set() and generation == self._generation:
                t = time.perf_counter()
                bad = verify_checksums(reader, stop=lambda: self.stop.is_set() or generation != self._generation)
                if self.stop.is_set() or generation != self._generation:
                    return
                if bad:
                    status = f"failed: {', '.join(bad)} no longer match their recorded hashes"
                    log.error("partition %s: %s", reader.path, status)
                    self.set_integrity(status, generation)
                    return
                self.set_integrity("ok", generation)
                log.info("partition %s: content hashes verified in %.1f s", reader.path, time.perf_counter() - t)
                if interval_s <= 0 or self.stop.wait(interval_s):
                    return

        th = threading.Thread(target=run, name="glisp-verify", daemon=True)
        th.start()
        return th
