"""Client of a GLISP sampling cluster: routing, Gather over gRPC, Apply, blocks, prefetching loader.

::

    with SamplingClient("glisp-cluster.json") as client:
        for batch in client.loader(train_ids, batch_size=1024, fanouts=[15, 10, 5]):
            out = model(batch.x, batch.blocks)

One asyncio event loop (grpc.aio), shared by the process's clients, runs on a background thread; each
hop sends ONE Gather RPC per server holding part of the frontier, all in parallel, and the loader keeps
``client.prefetch`` batches in flight so the servers never wait on the client's Apply. Every call has a deadline
(``client.deadline_s``) and is retried on UNAVAILABLE (``client.retries``, exponential backoff, next
address of the partition when several are listed).

A failover that worked is quiet: it is counted in :attr:`SamplingClient.metrics` and logged once at INFO
on the ``glisp.client`` logger (the dead address and the replica that took over; later failovers away
from that address are counted, not logged, until it answers again). A request that failed raises
:class:`SamplingError`. Every future and task the client makes has its outcome observed, so neither
shows up as an asyncio traceback on stderr, also when the client is closed with requests in flight
(they raise SamplingError CANCELLED; a call after close does too).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
import time
from collections.abc import Coroutine, Iterator, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
import numpy as np

from glisp_core.config import ClientConfig
from glisp_core.errors import GlispError
from glisp_sampling import profile
from glisp_sampling.apply import HopSample, Partial, merge_partials
from glisp_sampling.blocks import SampledBatch
from glisp_sampling.gather import VERSION_MISMATCH
from glisp_sampling.khop import (
    Fanout,
    HopRequest,
    KHopSampler,
    VersionChanged,
    hop_request,
    iterate_batches,
)
from glisp_sampling.routing import RoutingTable
from glisp_serving.client.colocated import ColocatedReader, open_colocated
from glisp_serving.client.event_loop import client_loop
from glisp_serving.client.info_fetch import load_routing
from glisp_serving.client.streams import NO_STREAM, GatherStream, StreamFailure
from glisp_serving.cluster.cluster_file import ClusterSpec
from glisp_serving.errors import SamplingError
from glisp_serving.proto import sampling_pb2 as pb
from glisp_serving.security import open_channel
from glisp_serving.wire import (
    GATHER_REQUEST,
    GATHER_RESPONSE,
    LOOKUP_REQUEST,
    LOOKUP_RESPONSE,
    decode,
    encode,
)

if TYPE_CHECKING:
    from google.protobuf.message import Message

log = logging.getLogger("glisp.client")

# a restarted server is used again within a second or two (gRPC's default reconnect backoff grows to 120 s)
RECONNECT_OPTIONS = [
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.min_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 2000),
]
_FAILOVER = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
SHUTDOWN_ROUNDS, SHUTDOWN_WAIT_S = 5, 2.0  # close() cancels what runs at most this often, waiting this long each


def _retryable(code: grpc.StatusCode, details: str) -> bool:
    """Worth another replica: the server is gone, slow, or refusing for load (not for the request's size)."""
    if code in _FAILOVER:
        return True
    return code == grpc.StatusCode.RESOURCE_EXHAUSTED and "serve.max_" not in (details or "")


@dataclasses.dataclass
class ClientMetrics:
    """Counters of one client since it opened (:attr:`SamplingClient.metrics`; kept on its event loop)."""

    requests: int = 0  # requests to a partition (Gather, Lookup, Stats), each counted once however often tried
    retries: int = 0  # attempts that failed with a retryable status and were tried again
    failovers: int = 0  # requests another replica answered after one failed
    failed: int = 0  # requests that raised SamplingError
    version_changes: int = 0  # hot reloads followed: the servers moved to another dataset version


def _retrieve(task: asyncio.Future) -> None:
    """Mark the outcome of a finished task seen (its caller reads it from its own future, if it still wants it)."""
    if not task.cancelled():
        task.exception()


def _wire_ids(ids: np.ndarray) -> np.ndarray:
    """Ids as they travel: int32 when every id fits, else int64."""
    ids = np.asarray(ids, np.int64)
    if len(ids) == 0 or (ids.min() >= 0 and ids.max() < 2**31):
        return ids.astype(np.int32)
    return ids


def _timed(fn: Any, name: str) -> Any:
    def run(x: Any) -> Any:
        with profile.stage(name):
            return fn(x)

    return run


class _Stub:
    """The Sampling methods on one channel. Gather and Lookup take and return wire bytes; the others
    protobuf messages (their serialization and parsing count as profile stages)."""

    Gather: grpc.aio.UnaryUnaryMultiCallable
    Lookup: grpc.aio.UnaryUnaryMultiCallable
    VertexInfo: grpc.aio.UnaryUnaryMultiCallable
    Stats: grpc.aio.UnaryUnaryMultiCallable

    def __init__(self, channel: grpc.aio.Channel) -> None:
        rpcs: dict[str, tuple[type[Message], type[Message]]] = {
            "Gather": (pb.GatherRequest, pb.GatherResponse),
            "Lookup": (pb.LookupRequest, pb.LookupResponse),
            "VertexInfo": (pb.VertexInfoRequest, pb.VertexInfoResponse),
            "Stats": (pb.StatsRequest, pb.StatsResponse),
            "EmbedCreate": (pb.EmbedCreateRequest, pb.EmbedCreateResponse),
            "EmbedFetch": (pb.EmbedFetchRequest, pb.EmbedFetchResponse),
            "EmbedUpdate": (pb.EmbedUpdateRequest, pb.EmbedUpdateResponse),
            "EmbedControl": (pb.EmbedControlRequest, pb.EmbedControlResponse),
        }
        for name, (req, resp) in rpcs.items():
            raw = name in ("Gather", "Lookup")  # wire bytes both ways (glisp_serving.wire.encode/decode)
            setattr(
                self,
                name,
                channel.unary_unary(
                    f"/glisp.sampling.v1.Sampling/{name}",
                    request_serializer=None if raw else _timed(req.SerializeToString, "client.serialize"),
                    response_deserializer=None if raw else _timed(resp.FromString, "client.parse"),
                ),
            )
        self.GatherStream = channel.stream_stream("/glisp.sampling.v1.Sampling/GatherStream")


class RemoteBackend:
    """Gather and lookups against the servers of a cluster (runs on the client's event loop)."""

    def __init__(self, spec: ClusterSpec, routing: RoutingTable, cfg: ClientConfig, mode: str, max_mb: int) -> None:
        self.spec, self.routing, self.cfg, self.mode = spec, routing, cfg, mode
        self.num_vertices = routing.num_vertices
        self.max_mb = max_mb
        self.owner_direction: str | None = None
        self.version: str | None = None  # <graph>/<version> the answers come from; set by the first one
        self._opts = [
            ("grpc.max_send_message_length", max_mb << 20),
            ("grpc.max_receive_message_length", max_mb << 20),
            *RECONNECT_OPTIONS,
        ]
        self._channels: list[list[grpc.aio.Channel]] = []
        self._stubs: list[list[_Stub]] = []
        self._next = [0] * spec.num_parts  # round robin over each partition's replicas
        self._down: dict[tuple[int, int], tuple[float, int]] = {}  # (part, replica) -> (skip until, failures)
        self.colocated: ColocatedReader | None = None  # set by SamplingClient when partitions are on this host
        self._streams: dict[tuple[int, int], GatherStream] = {}  # (partition, address index) -> open stream
        self._unary_only: set[tuple[int, int]] = set()
        self.metrics = ClientMetrics()
        self._logged_down: set[tuple[int, int]] = set()  # replicas whose failover was logged, until they answer

    async def open(self) -> None:
        for addrs in self.spec.addresses:
            chans = [open_channel(a, self.cfg, self._opts, aio=True) for a in addrs]
            self._channels.append(chans)
            self._stubs.append([_Stub(c) for c in chans])

    async def close(self) -> None:
        for st in self._streams.values():
            await st.aclose()
        for chans in self._channels:
            for c in chans:
                await c.close()

    async def call(self, part: int, method: str, request: Any) -> Any:
        """One request to partition ``part`` with a deadline per attempt.

        Requests take the partition's replicas in turn (round robin), skipping one that failed within
        the last ``client.backoff_s`` x 2^failures; UNAVAILABLE, DEADLINE_EXCEEDED and concurrency
        back-pressure (RESOURCE_EXHAUSTED not about a request's own size) fail over to the next replica,
        at most ``client.retries`` times. ``Gather`` takes encoded request bytes and returns the decoded
        answer (over the replica's Gather stream when ``client.gather_streams``); other methods take and
        return messages. A request another replica answered counts as a failover (:class:`ClientMetrics`).
        """
        addrs = self.spec.addresses[part]
        delay, tried = self.cfg.backoff_s, []
        failed: tuple[int, grpc.StatusCode, str] | None = None  # the last replica that failed this request
        self.metrics.requests += 1
        for attempt in range(self.cfg.retries + 1):
            i = self._pick(part)
            tried.append(addrs[i])
            try:
                resp = await self._once(part, i, method, request)
                if self._down.pop((part, i), None) is not None and (part, i) in self._logged_down:
                    self._logged_down.discard((part, i))
                    log.info("partition %d: %s (replica %d) answers again", part, addrs[i], i)
                if failed is not None and failed[0] != i:
                    self._failed_over(part, failed, i)
                return resp
            except grpc.aio.AioRpcError as e:
                code, details = e.code(), e.details()
            except StreamFailure as e:
                code, details = e.code, e.details
            except TimeoutError:
                code, details = (
                    grpc.StatusCode.DEADLINE_EXCEEDED,
                    f"no answer within client.deadline_s={self.cfg.deadline_s}",
                )
            if _retryable(code, details) and attempt < self.cfg.retries:
                self.metrics.retries += 1
                failed = (i, code, details or "")
                self._mark_down(part, i)
                if len(addrs) == 1 or all((part, j) in self._down for j in range(len(addrs))):
                    await asyncio.sleep(delay)  # nowhere else to go: wait before trying again
                    delay *= 2
                continue
            if code == grpc.StatusCode.FAILED_PRECONDITION and (details or "").startswith(VERSION_MISMATCH):
                raise VersionChanged({details[len(VERSION_MISMATCH) :].split()[0]}, self.version)
            where = addrs[i] if len(set(tried)) == 1 else f"replicas {sorted(set(tried))}"
            self.metrics.failed += 1
            raise SamplingError(f"partition {part} at {where}: {method} failed with {code.name}: {details}", code)
        raise AssertionError("unreachable")

    def _failed_over(self, part: int, failed: tuple[int, grpc.StatusCode, str], took_over: int) -> None:
        """Count a failover; log it at INFO when it is the first away from that replica since it last answered."""
        self.metrics.failovers += 1
        dead, code, details = failed
        if (part, dead) in self._logged_down:
            return
        self._logged_down.add((part, dead))
        addrs = self.spec.addresses[part]
        log.info(
            "partition %d: %s (replica %d) failed with %s (%s); failed over to %s (replica %d)",
            part,
            addrs[dead],
            dead,
            code.name,
            details[:200],
            addrs[took_over],
            took_over,
        )

    def _pick(self, part: int) -> int:
        """The next replica of ``part`` in turn, skipping those marked down while one is not."""
        n = len(self.spec.addresses[part])
        now = time.monotonic()
        for _ in range(n):
            i = self._next[part] % n
            self._next[part] += 1
            until = self._down.get((part, i))
            if until is None or until[0] <= now:
                return i
        return min(range(n), key=lambda j: self._down[(part, j)][0])  # all down: the one back soonest

    def _mark_down(self, part: int, i: int) -> None:
        failures = self._down.get((part, i), (0.0, 0))[1] + 1
        self._down[(part, i)] = (time.monotonic() + self.cfg.backoff_s * 2 ** min(failures - 1, 6), failures)

    async def _once(self, part: int, i: int, method: str, request: Any) -> Any:
        stub = self._stubs[part][i]
        if method != "Gather":
            return await getattr(stub, method)(request, timeout=self.cfg.deadline_s)
        if self.cfg.gather_streams and (part, i) not in self._unary_only:
            s = self._streams.get((part, i))
            if s is None or s.failed is not None:
                s = self._streams[(part, i)] = GatherStream(stub.GatherStream)
            try:
                return await s.request(request, self.cfg.deadline_s)
            except StreamFailure as e:
                if e.code not in NO_STREAM and not e.ask_unary:
                    raise
                if not e.ask_unary:
                    self._unary_only.add((part, i))  # no streams there: unary calls from now on
        raw = await stub.Gather(request, timeout=self.cfg.deadline_s)
        with profile.stage("client.decode"):
            return decode(GATHER_RESPONSE, raw)

    def _gather_request(self, ids: np.ndarray, req: HopRequest) -> bytes:
        return encode(
            GATHER_REQUEST,
            seeds=_wire_ids(ids),
            fanout=req.fanout or None,
            type_fanouts=req.type_fanouts,
            method=req.method,
            direction=pb.IN if req.direction == "in" else None,
            seed=req.seed or None,
            edge_ids=req.edge_ids,
            max_time=req.max_time,
            version=self.version or None,
        )

    async def gather(self, frontier: np.ndarray, req: HopRequest, scratch: np.ndarray | None = None) -> HopSample:
        """Gather (one RPC per server holding part of the frontier, in parallel), then Apply.

        With a relabel ``scratch`` (see :func:`glisp_sampling.apply.relabel`) Apply also relabels the
        hop into its block."""
        with profile.stage("client.route"):
            frontier = np.asarray(frontier, np.int64)
            split = self.routing.split(frontier, self.mode)
            parts = [k for k in range(len(split)) if len(split[k])]
        with profile.stage("client.encode"):
            reqs = [self._gather_request(frontier[split[k]], req) for k in parts]
        resps = await asyncio.gather(*[self.call(k, "Gather", r) for k, r in zip(parts, reqs, strict=True)])
        self._same_version([r.get("version", "") for r in resps])
        with profile.stage("client.decode"):
            typed = req.type_fanouts  # non-empty: typed sampling (HopRequest.typed)
            nslot = len(typed) if typed else 1
            fanouts = np.array([f for _, f in typed] if typed else [req.fanout], np.int64)
            partials, merge = [], "concat"
            for k, r in zip(parts, resps, strict=True):
                merge = r.get("merge", "concat")
                partials.append(
                    Partial(
                        pos=split[k],
                        counts=r["counts"].reshape(len(split[k]), nslot),
                        nbrs=r["neighbors"],
                        keys=r.get("keys"),
                        edge_ids=r.get("edge_ids"),
                    )
                )
        with profile.stage("client.apply"):
            return merge_partials(
                len(frontier), partials, merge, fanouts, want_eids=req.edge_ids, dst=frontier, scratch=scratch
            )

    async def lookup(self, ids: np.ndarray, features: bool, labels: bool) -> dict[str, np.ndarray]:
        """Features / labels of ``ids`` from their master partitions, in the order of ``ids``."""
        with profile.stage("client.route"):
            ids = np.asarray(ids, np.int64)
            split = self.routing.split_master(ids)
            parts = [k for k in range(len(split)) if len(split[k])]
        local = [k for k in parts if self.colocated is not None and k in self.colocated.parts]
        remote = [k for k in parts if k not in local]
        reqs = [
            encode(
                LOOKUP_REQUEST,
                vertices=_wire_ids(ids[split[k]]),
                features=features,
                labels=labels,
                version=self.version or None,
            )
            for k in remote
        ]
        resps = await asyncio.gather(*[self.call(k, "Lookup", r) for k, r in zip(remote, reqs, strict=True)])
        with profile.stage("client.lookup_assemble"):
            answers = [decode(LOOKUP_RESPONSE, raw) for raw in resps]
            self._same_version([a.get("version", "") for a in answers])
            got = [(k, self.colocated.fields(k, features, labels)) for k in local]  # type: ignore[union-attr]
            got += list(zip(remote, answers, strict=True))
            return self._assemble(ids, split, got, set(local))

    def _same_version(self, versions: list[str]) -> None:
        """VersionChanged unless every answer is from the version this client samples on."""
        seen = {v for v in versions if v}
        if not seen:
            return  # a server that predates versioned answers
        if self.version is None and len(seen) == 1:
            self.version = next(iter(seen))
        elif seen != {self.version}:
            raise VersionChanged(seen, self.version)

    async def follow_version(self, change: VersionChanged) -> None:
        """Wait until every server of the cluster serves one version (a cluster reload commits server by
        server), then rebuild the routing table (and co-located readers) for it."""
        deadline = time.monotonic() + self.cfg.deadline_s
        while True:
            where = [(k, i) for k, addrs in enumerate(self.spec.addresses) for i in range(len(addrs))]
            stats = await asyncio.gather(*[self._stub_stats(k, i) for k, i in where], return_exceptions=True)
            live = [(k, s) for (k, _), s in zip(where, stats, strict=True) if not isinstance(s, BaseException)]
            targets = {(s.dataset, s.dataset_path, s.run) for _, s in live}  # a dead replica has no say
            if len(targets) == 1 and {k for k, _ in live} == set(range(self.spec.num_parts)):
                break
            if time.monotonic() > deadline:
                raise SamplingError(
                    f"servers disagree on the version for over client.deadline_s: {sorted(targets)}",
                    grpc.StatusCode.FAILED_PRECONDITION,
                )
            await asyncio.sleep(0.05)
        version, path, run = targets.pop()
        if version == self.version:
            return
        spec = ClusterSpec(dataset=path, run=run, num_parts=self.spec.num_parts, addresses=self.spec.addresses)
        loop = asyncio.get_running_loop()
        routing = await loop.run_in_executor(None, load_routing, spec, self.cfg, self.owner_direction, self.max_mb)
        colocated = self.colocated
        if colocated is not None:
            colocated = await loop.run_in_executor(None, open_colocated, spec, routing.master)
        if version == self.version:
            return  # another batch followed the servers there meanwhile
        old, self.version, self.colocated = self.version, version, colocated
        self.spec, self.routing, self.num_vertices = spec, routing, routing.num_vertices
        self.metrics.version_changes += 1
        log.info("the servers moved from %s to %s (run %s): sampling on it", old, version, run)

    async def _stub_stats(self, part: int, i: int) -> Any:
        return await self._stubs[part][i].Stats(pb.StatsRequest(), timeout=self.cfg.deadline_s)

    def _assemble(
        self, ids: np.ndarray, split: list[np.ndarray], got: list[tuple[int, dict]], local: set[int]
    ) -> dict[str, np.ndarray]:
        """One array per field in the order of ``ids``: co-located rows gathered from their partition's
        arrays, remote ones copied from the Lookup answers (which hold exactly the rows asked)."""
        out: dict[str, np.ndarray] = {}
        for name in ("features", "labels", "split"):
            have = [(k, r[name]) for k, r in got if name in r]
            if not have:
                continue
            first = have[0][1]
            arr = np.empty((len(ids),) + first.shape[1:], first.dtype)
            for k, a in have:
                if k in local:
                    self.colocated.fill(k, a, ids, split[k], arr)  # type: ignore[union-attr]
                else:
                    arr[split[k]] = a
            out[name] = arr
        return out


class SamplingClient:
    """A connection to a sampling cluster (see the module docstring)."""

    def __init__(
        self,
        cluster: str | Path | ClusterSpec,
        cfg: ClientConfig | None = None,
        routing: str | None = None,
        direction: str = "out",
        max_message_mb: int = 256,
        routing_table: RoutingTable | None = None,
    ) -> None:
        self.cfg = cfg or ClientConfig()
        self.spec = cluster if isinstance(cluster, ClusterSpec) else ClusterSpec.read(cluster)
        self.mode = routing or self.cfg.routing
        owner_direction = direction if self.mode == "owner" else None
        # from the partition files, or from the servers when this machine has only the cluster file
        routing_table = routing_table or load_routing(self.spec, self.cfg, owner_direction, max_message_mb)
        self.direction = direction
        self._closed = False
        self._submit_lock = threading.Lock()  # a request is scheduled before close() begins, or refused
        self._loop = client_loop()  # shared by the process's clients (event_loop's docstring says why)
        self._tasks: set[asyncio.Task] = set()  # this client's requests in flight (touched on the loop only)
        self.backend = RemoteBackend(self.spec, routing_table, self.cfg, self.mode, max_message_mb)
        self.backend.owner_direction = owner_direction
        if self.cfg.local_reads == "auto":  # partitions whose files are not readable here use Lookup
            self.backend.colocated = open_colocated(self.spec, self.routing.master)
        elif self.cfg.local_reads != "never":
            raise GlispError(f"client.local_reads: expected 'auto' or 'never' (got {self.cfg.local_reads!r})")
        self._run(self.backend.open())

    @property
    def routing(self) -> RoutingTable:
        """The routing table of the version the client samples on (rebuilt when the servers reload)."""
        return self.backend.routing

    @property
    def version(self) -> str | None:
        """``<graph>/<version>`` of the answers so far (None before the first)."""
        return self.backend.version

    @property
    def metrics(self) -> ClientMetrics:
        """A copy of the client's counters: requests, retries, failovers, failed requests, version changes."""
        return dataclasses.replace(self.backend.metrics)

    # ------------------------------------------------------------------ plumbing
    def _submit(self, coro: Coroutine[Any, Any, Any]) -> Future:
        """Run ``coro`` on the client's loop; SamplingError CANCELLED once the client is closed."""
        with self._submit_lock:
            if not self._closed:
                return asyncio.run_coroutine_threadsafe(self._closable(coro), self._loop)
        coro.close()  # never started: nothing to await, nothing for Python to warn about
        raise SamplingError("the client is closed", grpc.StatusCode.CANCELLED)

    async def _closable(self, coro: Coroutine[Any, Any, Any]) -> Any:
        """``coro``, whose cancellation by :meth:`close` raises SamplingError CANCELLED in the caller.

        Its task's outcome is marked seen when it ends: a caller that cancelled its future (a loader that
        stopped early) no longer reads it, and close() may still have ended the task with that error."""
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            task.add_done_callback(_retrieve)
        try:
            return await coro
        except asyncio.CancelledError:
            if not self._closed:
                raise  # the caller cancelled its future (a loader that stopped early)
            raise SamplingError(
                "the client was closed while this request was in flight", grpc.StatusCode.CANCELLED
            ) from None

    def _run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return self._submit(coro).result()

    async def _shutdown(self) -> None:
        """Close streams and channels, then cancel this client's requests still running (batches a loader
        prefetched) until none is: each ends here, with its outcome retrieved. Other clients' are not touched."""
        await self.backend.close()
        for _ in range(SHUTDOWN_ROUNDS):  # a task that swallows its cancellation must not hang close()
            rest = [t for t in self._tasks if not t.done()]
            if not rest:
                return
            for t in rest:
                t.cancel()
            await asyncio.wait(rest, timeout=SHUTDOWN_WAIT_S)
            for t in rest:
                if t.done() and not t.cancelled():
                    t.exception()  # retrieved: nothing reaches stderr as "never retrieved"
        log.warning("close: %d task(s) still running after %d rounds of cancellation", len(rest), SHUTDOWN_ROUNDS)

    def close(self) -> None:
        """Close streams and channels. Requests in flight, and any call after this, raise SamplingError
        CANCELLED."""
        with self._submit_lock:
            closed, self._closed = self._closed, True
        if closed:
            return
        asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result()

    def __enter__(self) -> SamplingClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ API
    def gather(self, frontier: np.ndarray, fanout: Fanout, **kw: Any) -> HopSample:
        """One merged one-hop sample (Gather + Apply) of ``frontier``; kw as in HopRequest."""
        kw.setdefault("direction", self.direction)
        return self._run(self.backend.gather(np.asarray(frontier, np.int64), hop_request(fanout, **kw)))

    def lookup(self, ids: np.ndarray, features: bool = True, labels: bool = True) -> dict[str, np.ndarray]:
        return self._run(self.backend.lookup(ids, features, labels))

    def sampler(self, fanouts: Sequence[Fanout], **kw: Any) -> KHopSampler:
        kw.setdefault("direction", self.direction)
        return KHopSampler(self.backend, fanouts, **kw)

    def sample(self, seeds: np.ndarray, fanouts: Sequence[Fanout], seed: int = 0, **kw: Any) -> SampledBatch:
        """One k-hop mini-batch (blocks, features, labels) for ``seeds``."""
        return self._run(self.sampler(fanouts, **kw).sample(seeds, seed))

    def loader(
        self,
        seeds: np.ndarray,
        batch_size: int,
        fanouts: Sequence[Fanout],
        shuffle: bool = True,
        seed: int = 0,
        prefetch: int | None = None,
        drop_last: bool = False,
        **kw: Any,
    ) -> Iterator[SampledBatch]:
        """Mini-batches over ``seeds`` with ``prefetch`` (default client.prefetch) batches in flight."""
        return iterate_batches(
            self._submit,
            self.sampler(fanouts, **kw),
            seeds,
            batch_size,
            shuffle,
            seed,
            prefetch or self.cfg.prefetch,
            drop_last,
        )

    def stats(self) -> list[dict[str, Any]]:
        """Stats RPC of every partition's server."""

        async def _all() -> list[Any]:
            return await asyncio.gather(
                *[self.backend.call(k, "Stats", pb.StatsRequest()) for k in range(self.spec.num_parts)]
            )

        out = []
        for r in self._run(_all()):
            d = {f.name: getattr(r, f.name) for f in r.DESCRIPTOR.fields}
            d["edge_types"] = list(r.edge_types)
            out.append(d)
        return out
