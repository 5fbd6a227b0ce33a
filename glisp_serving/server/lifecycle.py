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


class StopDuringStart(Exception):
    """SIGTERM/SIGINT arrived before the server was SERVING: exit 0 without serving."""


class ServingState:
    """Shared by the servicer, the health service, the verifier thread and the signal handlers."""

    def __init__(self, restarts: int = 0) -> None:
        self.stop = threading.Event()
        self.reload_requested = threading.Event()  # SIGHUP: move to the graph's latest version
        self.restarts = restarts  # times serve-cluster restarted this partition's server before this process
        self.integrity = "pending"  # "pending", "ok", "off", "failed: <files>"
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
        self._set_health("SERVING")
        self.served_once = True

    def _set_health(self, status: str) -> None:
        from grpc_health.v1 import health_pb2

        code = getattr(health_pb2.HealthCheckResponse, status)
        for name in self._services:
            self._health.set(name, code)

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
        """Hash every partition file after SERVING (and every ``interval_s`` when > 0); NOT_SERVING on a mismatch."""
        from glisp_core.partition_format.integrity import verify_checksums

        def run() -> None:
            while not self.stop.is_set():
                t = time.perf_counter()
                bad = verify_checksums(reader, stop=self.stop.is_set)
                if self.stop.is_set():
                    return
                if bad:
                    self.integrity = f"failed: {', '.join(bad)} no longer match their recorded hashes"
                    log.error("partition %s: %s", reader.path, self.integrity)
                    if self._health is not None:
                        self._set_health("NOT_SERVING")
                    return
                self.integrity = "ok"
                log.info("partition %s: content hashes verified in %.1f s", reader.path, time.perf_counter() - t)
                if interval_s <= 0 or self.stop.wait(interval_s):
                    return

        th = threading.Thread(target=run, name="glisp-verify", daemon=True)
        th.start()
        return th
