"""Prometheus metrics of one sampling server (``serve.metrics_port``; -1 = off, 0 = a free port).

Per RPC: requests by status code and a latency histogram; sampled edges and vertices served; resident
memory, requests in flight, the version served (``glisp_serving_version_info{version,run}`` = 1) and
the restarts ``serve-cluster`` made. Each server has its own registry, so several servers (or tests)
in one process never share counters.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

_LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)


class ServerMetrics:
    """The metrics of one server; ``observe(rpc)`` around each request."""

    def __init__(self, part: int) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "glisp_serving_requests", "RPCs answered, by method and status code", ["rpc", "code"], registry=r
        ).labels
        self.latency = Histogram(
            "glisp_serving_request_seconds", "RPC latency in the server", ["rpc"], buckets=_LATENCY_BUCKETS, registry=r
        ).labels
        self.sampled_edges = Counter("glisp_serving_sampled_edges", "edges returned by Gather", registry=r)
        self.vertices = Counter("glisp_serving_vertices", "seeds and ids answered by Gather and Lookup", registry=r)
        self.resident = Gauge("glisp_serving_resident_bytes", "resident set size of the server", registry=r)
        self.in_flight = Gauge("glisp_serving_in_flight", "requests being answered", registry=r)
        self.version = Gauge(
            "glisp_serving_version_info", "the dataset version served (1)", ["version", "run"], registry=r
        )
        self.restarts = Gauge("glisp_serving_restarts", "times serve-cluster restarted this server", registry=r)
        self.partition = Gauge("glisp_serving_partition", "the partition this server holds", registry=r)
        self.partition.set(part)
        self._version: tuple[str, str] | None = None

    def bind(self, resident: Callable[[], float], in_flight: Callable[[], float], restarts: int) -> None:
        """Gauges read when scraped (no background thread)."""
        self.resident.set_function(resident)
        self.in_flight.set_function(in_flight)
        self.restarts.set(restarts)

    def serving(self, version: str, run: str) -> None:
        if self._version is not None:
            self.version.remove(*self._version)
        self._version = (version, run)
        self.version.labels(version, run).set(1)

    @contextmanager
    def observe(self, rpc: str) -> Iterator[dict[str, str]]:
        """Time one request; the caller sets ``out["code"]`` when it is not OK."""
        out = {"code": "OK"}
        t = time.perf_counter()
        try:
            yield out
        except Exception:
            if out["code"] == "OK":
                out["code"] = "ERROR"
            raise
        finally:
            self.latency(rpc).observe(time.perf_counter() - t)
            self.requests(rpc, out["code"]).inc()

    def start(self, host: str, port: int) -> int:
        """Serve /metrics over HTTP; the bound port."""
        server, _ = start_http_server(port, addr=host, registry=self.registry)
        return int(server.server_port)
