"""The gRPC server of one partition: Gather, Lookup, VertexInfo, Stats, Routing, HeldOutEdges, grpc.health.v1.

Requests are decoded from raw bytes, validated, and run by :class:`~glisp_sampling.gather.PartitionSampler`
(numba kernels without the GIL). A bad request is answered ``INVALID_ARGUMENT`` with a message naming
the field; the server never dies of one. SIGTERM/SIGINT: health turns NOT_SERVING, no new RPCs are
accepted, in-flight ones get ``serve.grace_s`` to finish, and the process exits 0.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
import numpy as np
from grpc_health.v1 import health, health_pb2_grpc

from glisp_core.config import ServeConfig
from glisp_core.dataset.layout import DatasetVersion
from glisp_core.errors import StageError
from glisp_sampling import profile
from glisp_sampling.budget import OverBudget
from glisp_sampling.cluster_facts import dataset_facts, partition_info, read_heldout
from glisp_sampling.gather import VERSION_MISMATCH, PartitionSampler, RequestError, RequestTooCostly, VersionMismatch
from glisp_serving.proto import sampling_pb2 as pb
from glisp_serving.proto import sampling_pb2_grpc as pb_grpc
from glisp_serving.security import bind, health_only_server, server_interceptors
from glisp_serving.server.embed_rpcs import EmbeddingService
from glisp_serving.server.info_stream import heldout_chunks, routing_chunks
from glisp_serving.server.lifecycle import LEASE_RELEASE_S, ServingState, StopDuringStart
from glisp_serving.server.memory import HeapKeeper, map_large_allocations, release_clean_library_pages, snapshot
from glisp_serving.server.metrics import ServerMetrics
from glisp_serving.server.partition_cache import local_partition
from glisp_serving.server.reload import Reloader, ReloadError, Served, open_served
from glisp_serving.server.warmup import warm_up_synthetic
from glisp_serving.wire import (
    GATHER_REQUEST,
    GATHER_RESPONSE,
    LOOKUP_REQUEST,
    LOOKUP_RESPONSE,
    WireError,
    decode,
    encode,
    from_array,
    to_array,
)

if TYPE_CHECKING:
    from google.protobuf.message import Message

log = logging.getLogger("glisp.serve")
SERVICE_NAME = "glisp.sampling.v1.Sampling"
_IDS = ("<i8", "<i4")
# fault injection for the drain and failover tests: every Gather takes at least this long (never set in production)
_FAULT_GATHER_DELAY_S = float(os.environ.get("GLISP_FAULT_GATHER_DELAY_S", "0") or 0)


def _request_id(raw: bytes) -> int:
    """The request_id of a GatherRequest that did not decode as a whole (0 when unreadable)."""
    try:
        return int(decode({"request_id": GATHER_REQUEST["request_id"]}, raw).get("request_id", 0))
    except WireError:
        return 0


def _ids(m: dict, name: str) -> np.ndarray:
    """The id array field ``name`` of a decoded request; WireError unless it is int32/int64."""
    a = m.get(name)
    if a is None or a.dtype.str not in _IDS:
        raise WireError(f"{name}: dtype must be one of {sorted(_IDS)} (got {a.dtype.str if a is not None else ''!r})")
    return a


def status_of(e: Exception) -> grpc.StatusCode:
    """RESOURCE_EXHAUSTED for a request over the server's budget, FAILED_PRECONDITION for one on another
    version, INVALID_ARGUMENT for a malformed one."""
    if isinstance(e, RequestTooCostly):
        return grpc.StatusCode.RESOURCE_EXHAUSTED
    if isinstance(e, VersionMismatch):
        return grpc.StatusCode.FAILED_PRECONDITION
    return grpc.StatusCode.INVALID_ARGUMENT


def _check_version(m: dict, cur: Served) -> None:
    want = m.get("version")
    if want and want != cur.version:
        raise VersionMismatch(f"{VERSION_MISMATCH} {cur.version} (the request is for {want})")


class SamplingServicer(pb_grpc.SamplingServicer):
    def __init__(
        self,
        served: Served,
        baseline: dict[str, int],
        rss_import: int = 0,
        max_streams: int = 64,
        state: ServingState | None = None,
        embedding_mb: int = 1024,
    ) -> None:
        self.served = served  # replaced in one assignment by a reload; a request reads it once
        self.reloader: Reloader | None = None
        self.state = state or ServingState()
        self.metrics = ServerMetrics(served.engine.part)
        self.metrics_port = 0  # the /metrics HTTP port once started (serve.metrics_port >= 0)
        self.heap = HeapKeeper()  # freed heap pages back to the OS, ticked by the serving loop
        self.metrics.bind(lambda: snapshot()["rss"], lambda: self.state.in_flight, self.state.restarts)
        self.metrics.serving(served.version, served.run)
        self.t0 = time.time()
        self.baseline = baseline  # memory.snapshot() after imports + kernel warm-up, before opening the partition
        self.rss_import = rss_import
        self.max_streams = max_streams
        self._stream_lock = threading.Lock()
        self._streams: dict[int, tuple[grpc.ServicerContext, list[bool]]] = {}
        self._stopping = False
        self.token_required = False  # every call carries a checked bearer token (serve.token_file)
        self.embeddings = EmbeddingService(self, embedding_mb)  # learnable node embeddings of the masters

    @staticmethod
    def _invalid(context: grpc.ServicerContext, e: Exception) -> None:
        context.abort(status_of(e), str(e))

    def _answer(self, raw: bytes) -> bytes:
        """GatherRequest wire bytes -> GatherResponse wire bytes; RequestError/WireError for a bad request."""
        with profile.stage("server.decode"):
            m = decode(GATHER_REQUEST, raw)
            seeds = _ids(m, "seeds")
        if _FAULT_GATHER_DELAY_S:
            time.sleep(_FAULT_GATHER_DELAY_S)
        cur = self.served
        _check_version(m, cur)
        with cur as engine:
            res = engine.gather(
                seeds,
                fanout=m.get("fanout", 0),
                type_fanouts=m.get("type_fanouts"),
                method=m.get("method") or "uniform",
                direction="in" if m.get("direction", pb.OUT) == pb.IN else "out",
                max_time=m.get("max_time"),
                seed=m.get("seed", 0),
                edge_ids=m.get("edge_ids", False),
            )
        self.metrics.sampled_edges.inc(len(res.nbrs))
        self.metrics.vertices.inc(len(seeds))
        with profile.stage("server.encode"):
            return encode(
                GATHER_RESPONSE,
                counts=res.counts,
                neighbors=res.nbrs,
                keys=res.keys,
                edge_ids=res.edge_ids,
                merge=res.merge,
                fanouts=res.fanouts,
                part_id=engine.part,
                request_id=m.get("request_id") or None,
                version=cur.version,
            )

    @contextmanager
    def _held(self, raw: bytes, context: grpc.ServicerContext) -> Iterator[None]:
        """Around one request: its message and the buffers it reserves count against the server's budget
        (serve.max_inflight_mb) until its answer is built; waits no longer than the caller's deadline."""
        budget = self.served.engine.budget
        with budget.request(context.time_remaining()):
            try:
                budget.reserve(2 * len(raw), "the request message")  # the wire bytes and their decoded arrays
            except OverBudget as e:
                raise RequestTooCostly(str(e)) from None
            yield

    def _refuse_if_out_of_service(self, context: grpc.ServicerContext) -> None:
        why = self.state.refusal()
        if why is not None:
            context.abort(grpc.StatusCode.UNAVAILABLE, why)

    def Gather(self, raw: bytes, context: grpc.ServicerContext) -> bytes:
        """GatherRequest wire bytes -> GatherResponse wire bytes (see :func:`glisp_serving.wire.encode`)."""
        self._refuse_if_out_of_service(context)
        err = None
        with self.state.request(), self.metrics.observe("Gather") as obs:
            try:
                with self._held(raw, context):
                    return self._answer(raw)
            except (RequestError, WireError) as e:
                err, obs["code"] = e, status_of(e).name
        self._invalid(context, err)
        raise AssertionError("unreachable")

    def GatherStream(self, requests: Any, context: grpc.ServicerContext) -> Any:
        """Gather over one long-lived stream; a bad request is answered with error_code (stream stays open).

        At most ``serve.max_streams`` streams are open (RESOURCE_EXHAUSTED beyond: the client then uses
        unary Gather). On shutdown an idle stream is cancelled at once and a busy one after its answer.
        """
        with self._stream_lock:
            if self._stopping:
                context.abort(grpc.StatusCode.UNAVAILABLE, "the server is shutting down")
            if len(self._streams) >= self.max_streams:
                context.abort(
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f"serve.max_streams={self.max_streams} Gather streams are open; use unary Gather",
                )
            busy = [False]
            self._streams[id(context)] = (context, busy)
        self._refuse_if_out_of_service(context)
        try:
            for raw in requests:
                busy[0] = True
                try:
                    self._refuse_if_out_of_service(context)  # ends the stream: the client fails over
                    with self.state.request(), self.metrics.observe("GatherStream") as obs:
                        try:
                            with self._held(raw, context):
                                out = self._answer(raw)
                        except (RequestError, WireError) as e:
                            obs["code"] = status_of(e).name
                            raise
                except (RequestError, WireError) as e:
                    rid = _request_id(raw)
                    out = encode(
                        GATHER_RESPONSE, request_id=rid or None, error_code=status_of(e).value[0], error=str(e)
                    )
                finally:
                    busy[0] = False
                yield out
                if self._stopping:
                    return
        except grpc.RpcError:
            return  # cancelled: the client went away, or shutdown cancelled an idle stream
        finally:
            with self._stream_lock:
                self._streams.pop(id(context), None)

    def begin_shutdown(self) -> None:
        """Refuse new streams, cancel idle ones; busy ones end after their current answer."""
        with self._stream_lock:
            self._stopping = True
            idle = [ctx for ctx, busy in self._streams.values() if not busy[0]]
        for ctx in idle:
            ctx.cancel()

    def Lookup(self, raw: bytes, context: grpc.ServicerContext) -> bytes:
        """LookupRequest wire bytes -> LookupResponse wire bytes."""
        self._refuse_if_out_of_service(context)
        err = None
        with self.metrics.observe("Lookup") as obs:
            try:
                with profile.stage("server.decode"):
                    m = decode(LOOKUP_REQUEST, raw)
                    ids = _ids(m, "vertices")
                cur = self.served
                _check_version(m, cur)
                with self.state.request(), self._held(raw, context), cur as engine:
                    out = engine.features(ids, m.get("features", False), m.get("labels", False))
                    out["version"] = cur.version
                self.metrics.vertices.inc(len(ids))
            except (RequestError, WireError) as e:
                err, obs["code"] = e, status_of(e).name
        if err is not None:
            self._invalid(context, err)
        with profile.stage("server.lookup_encode"):
            return encode(LOOKUP_RESPONSE, **out)

    def VertexInfo(self, request: pb.VertexInfoRequest, context: grpc.ServicerContext) -> pb.VertexInfoResponse:
        err = None
        try:
            with self.served as engine:
                out = engine.vertex_info(from_array(request.vertices, "vertices", _IDS))
        except (RequestError, WireError) as e:
            err = e
        if err is not None:
            self._invalid(context, err)
        resp = pb.VertexInfoResponse()
        for k, v in out.items():
            getattr(resp, k).CopyFrom(to_array(v))
        return resp

    def Stats(self, request: pb.StatsRequest, context: grpc.ServicerContext) -> pb.StatsResponse:
        cur = self.served
        with cur as e:  # a version being retired stays open until this answer is built
            return self._stats(cur, e)

    def _stats(self, cur: Served, e: PartitionSampler) -> pb.StatsResponse:
        r = e.r
        with e._lock:
            counters = (e.requests, e.vertices_served, e.edges_served, e.busy_s)
        mem = snapshot(cur.partition_dir)
        prof = profile.snapshot()
        return pb.StatsResponse(
            process_cpu_seconds=prof["process_cpu_s"],
            stage_cpu_seconds=prof["stages_s"],
            stage_calls=prof["calls"],
            requests=counters[0],
            vertices_served=counters[1],
            edges_served=counters[2],
            busy_seconds=counters[3],
            rss_bytes=mem["rss"],
            rss_baseline_bytes=self.baseline["rss"],
            rss_import_bytes=self.rss_import,
            uss_bytes=mem["uss"],
            pss_bytes=mem["pss"],
            rss_anon_bytes=mem["anon"],
            rss_file_bytes=mem["file"],
            baseline_anon_bytes=self.baseline["anon"],
            partition_resident_bytes=mem["partition_resident"],
            dataset=cur.version,
            dataset_path=str(cur.dv.path),
            run=cur.run,
            part_id=e.part,
            num_parts=e.num_parts,
            num_vertices=r.num_vertices,
            num_edges=r.num_edges,
            partition_bytes=cur.file_bytes,
            uptime_seconds=time.time() - self.t0,
            edge_types=list(r.edge_type_names),
            weighted=bool(r.weighted),
            timestamped=bool(r.timestamped),
            feature_dim=int(r.feature_dim),
            format_version=int(getattr(r, "format_version", 0)),
            integrity=self.state.integrity,
            restarts=self.state.restarts,
            in_flight=self.state.in_flight,
            serving=not self.state.stop.is_set() and self.state.refusal() is None,
            metrics_port=self.metrics_port,
            heap_releases=self.heap.releases,
            heap_released_bytes=self.heap.released_bytes,
        )

    def reload(self, dataset: str = "", run: str = "", prepare_only: bool = False) -> pb.ReloadResponse:
        """Prepare or switch to another version (ReloadError when it cannot be served here)."""
        assert self.reloader is not None
        prev = self.served
        if prepare_only:
            now = self.reloader.prepare(dataset, run)
        else:
            prev, now = self.reloader.reload(dataset, run)
            if now is not prev:
                _start_integrity_check(self.state, now, self.reloader.cfg)
                self.metrics.serving(now.version, now.run)
        return pb.ReloadResponse(version=now.version, previous=prev.version, run=now.run, dataset_path=str(now.dv.path))

    def Reload(self, request: pb.ReloadRequest, context: grpc.ServicerContext) -> pb.ReloadResponse:
        """An admin call (glisp_serving.admin): from the admin socket, or over the network with a token."""
        from glisp_serving.admin import ADMIN_HELP, is_local_admin

        if not (self.token_required or is_local_admin(context)):
            context.abort(grpc.StatusCode.PERMISSION_DENIED, ADMIN_HELP)
        err = None
        try:
            return self.reload(request.dataset, request.run, request.prepare_only)
        except ReloadError as e:
            err = e
        context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(err))
        raise AssertionError("unreachable")

    def Routing(self, request: pb.RoutingRequest, context: grpc.ServicerContext) -> Iterator[pb.RoutingChunk]:
        """This partition's share of the client routing table (see glisp_sampling.cluster_facts)."""
        owner = ("in" if request.owner_direction == pb.IN else "out") if request.owners else None
        cur = self.served
        with cur as engine:
            n, fp, schema = dataset_facts(cur.dv, cur.run)
            header = {
                "num_parts": engine.num_parts,
                "num_vertices": n,
                "run": cur.run,
                "run_fingerprint": fp,
                "schema": schema,
            }
            yield from routing_chunks(partition_info(engine.r, owner), header, request.chunk)

    def HeldOutEdges(self, request: pb.HeldOutRequest, context: grpc.ServicerContext) -> Iterator[pb.HeldOutChunk]:
        """The held-out edges of a link-split run (FAILED_PRECONDITION for a run that serves every edge)."""
        err = None
        try:
            edges = read_heldout(self.served.dv, self.served.run)
        except StageError as e:
            err = e
        if err is not None:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(err))
        yield from heldout_chunks(edges, request.chunk)


def _timed(fn: Any, name: str) -> Any:
    def run(x: Any) -> Any:
        with profile.stage(name):
            return fn(x)

    return run


def add_servicer(servicer: SamplingServicer, server: grpc.Server) -> None:
    """Register the Sampling service; request parsing and response serialization count as stages."""
    rpcs: dict[str, tuple[type[Message], type[Message]]] = {
        "Gather": (pb.GatherRequest, pb.GatherResponse),
        "Lookup": (pb.LookupRequest, pb.LookupResponse),
        "VertexInfo": (pb.VertexInfoRequest, pb.VertexInfoResponse),
        "Stats": (pb.StatsRequest, pb.StatsResponse),
        "Reload": (pb.ReloadRequest, pb.ReloadResponse),
    }
    raw = ("Gather", "Lookup")  # the servicer reads and writes their wire bytes itself
    handlers = {
        name: grpc.unary_unary_rpc_method_handler(
            getattr(servicer, name),
            request_deserializer=None if name in raw else _timed(req.FromString, "server.parse"),
            response_serializer=None if name in raw else _timed(resp.SerializeToString, "server.serialize"),
        )
        for name, (req, resp) in rpcs.items()
    }
    embed: dict[str, tuple[type[Message], type[Message]]] = {
        "EmbedCreate": (pb.EmbedCreateRequest, pb.EmbedCreateResponse),
        "EmbedFetch": (pb.EmbedFetchRequest, pb.EmbedFetchResponse),
        "EmbedUpdate": (pb.EmbedUpdateRequest, pb.EmbedUpdateResponse),
        "EmbedControl": (pb.EmbedControlRequest, pb.EmbedControlResponse),
    }
    for name, (req, resp) in embed.items():
        handlers[name] = grpc.unary_unary_rpc_method_handler(
            getattr(servicer.embeddings, name),
            request_deserializer=req.FromString,
            response_serializer=resp.SerializeToString,
        )
    handlers["GatherStream"] = grpc.stream_stream_rpc_method_handler(servicer.GatherStream)
    streamed: dict[str, tuple[type[Message], type[Message]]] = {
        "Routing": (pb.RoutingRequest, pb.RoutingChunk),
        "HeldOutEdges": (pb.HeldOutRequest, pb.HeldOutChunk),
    }
    for name, (req, resp) in streamed.items():
        handlers[name] = grpc.unary_stream_rpc_method_handler(
            getattr(servicer, name), request_deserializer=req.FromString, response_serializer=resp.SerializeToString
        )
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),))


def serve(
    dv: DatasetVersion,
    run: str,
    part: int,
    cfg: ServeConfig,
    port: int | None = None,
    port_file: str | None = None,
    restarts: int = 0,
    admin_socket: str | None = None,
) -> int:
    """Serve partition ``part`` of ``run`` until SIGTERM/SIGINT; returns the exit code (0 on a clean stop,
    also when the stop arrives during warm-up). ``admin_socket``: a Unix socket for admin calls (Reload)."""
    state = ServingState(restarts)
    state.install_signals()
    try:
        return _serve(dv, run, part, cfg, port, port_file, state, admin_socket)
    except StopDuringStart as e:
        print(f"glisp serve: partition {part} stopped before serving ({e})", flush=True)
        return 0
    except Exception as e:  # the stop raised inside a library that wrapped it (numba's compiler does)
        if state.stop.is_set() and not state.served_once:
            print(f"glisp serve: partition {part} stopped before serving ({type(e).__name__})", flush=True)
            return 0
        raise


def _open_served(dv: DatasetVersion, run: str, part: int, cfg: ServeConfig) -> tuple[Served, dict[str, int], int]:
    """The runtime warmed, then the partition opened; (served version, runtime baseline, RSS after imports)."""
    map_large_allocations()  # response buffers go back to the OS when freed, not to a growing heap
    rss_import = snapshot()["rss"]
    t = time.perf_counter()
    if cfg.warmup:
        print(
            f"glisp serve: partition {part}: compiling the sampling kernels (about a minute the first time on "
            "a machine; later starts load numba's cache, see docs/reliability.md)",
            flush=True,
        )
    local = local_partition(dv, run, part, cfg)  # an object-store partition: its verified local copy
    if cfg.warmup:
        warm_up_synthetic(local[0], cfg)  # the runtime's memory (JIT, caches) before the partition's
    released = release_clean_library_pages() if cfg.release_compiler_pages else 0
    baseline = snapshot()
    served = open_served(dv, run, part, cfg, warm=cfg.warmup, local=local)
    if cfg.warmup:
        print(f"glisp serve: partition {part}: kernels ready in {time.perf_counter() - t:.1f} s", flush=True)
    if cfg.release_compiler_pages:
        released += release_clean_library_pages()  # pages a new specialisation faulted back in
    log.info(
        "released %.1f MiB of compiler pages; runtime baseline RSS %.1f MiB", released / 2**20, baseline["rss"] / 2**20
    )
    return served, baseline, rss_import


def request_limit(cfg: ServeConfig) -> int:
    """The largest request message a server reads: serve.max_batch ids of 8 bytes, plus 1 MiB for the other
    fields. gRPC refuses a longer one (RESOURCE_EXHAUSTED) from its length prefix, before buffering it."""
    return min(cfg.max_message_mb << 20, cfg.max_batch * 8 + (1 << 20))


def _grpc_server(cfg: ServeConfig, interceptors: list) -> grpc.Server:
    mb = cfg.max_message_mb * 1024 * 1024
    return grpc.server(  # a Gather stream holds a worker thread while open: one each, plus the unary RPCs'
        ThreadPoolExecutor(max_workers=max(2, cfg.threads) + cfg.max_streams, thread_name_prefix="glisp-rpc"),
        options=[
            ("grpc.max_send_message_length", mb),
            ("grpc.max_receive_message_length", request_limit(cfg)),
            ("grpc.so_reuseport", 0),
        ],
        maximum_concurrent_rpcs=cfg.max_concurrent_rpcs or None,
        interceptors=interceptors,
    )


def _serve(
    dv: DatasetVersion,
    run: str,
    part: int,
    cfg: ServeConfig,
    port: int | None,
    port_file: str | None,
    state: ServingState,
    admin_socket: str | None = None,
) -> int:
    served, baseline, rss_import = _open_served(dv, run, part, cfg)
    interceptors = server_interceptors(cfg)  # the bearer token check, when one is configured
    server = _grpc_server(cfg, interceptors)
    servicer = SamplingServicer(served, baseline, rss_import, cfg.max_streams, state, cfg.embedding_mb)
    servicer.reloader = Reloader(servicer, part, cfg)
    servicer.token_required = bool(interceptors)
    add_servicer(servicer, server)
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    bound = bind(server, cfg.host, cfg.port if port is None else port, cfg, token=bool(interceptors))
    if bound == 0:
        raise OSError(f"serve: cannot bind {cfg.host}:{cfg.port if port is None else port}")
    if admin_socket:
        from glisp_serving.admin import bind_admin_socket

        bind_admin_socket(server, admin_socket)
    server.start()
    health_server, health_port = health_only_server(health_servicer, cfg.host, cfg.health_port)
    if health_server is not None:
        print(f"glisp serve: partition {part} health-only port {cfg.host}:{health_port} (plaintext)", flush=True)
    try:
        state.started(health_servicer, ("", SERVICE_NAME))
    except StopDuringStart:
        server.stop(0).wait()
        raise
    _start_integrity_check(state, served, cfg)
    if cfg.metrics_port >= 0:
        servicer.metrics_port = servicer.metrics.start(cfg.host, cfg.metrics_port)
        print(
            f"glisp serve: partition {part}: Prometheus metrics on http://{cfg.host}:{servicer.metrics_port}/metrics",
            flush=True,
        )
    if port_file:
        tmp = Path(f"{port_file}.{os.getpid()}.tmp")
        tmp.write_text(str(bound))
        os.replace(tmp, port_file)
    print(f"glisp serve: {served.version} run {run} partition {part} listening on {cfg.host}:{bound}", flush=True)
    if cfg.follow_latest_s > 0:
        threading.Thread(
            target=servicer.reloader.follow_latest,
            args=(state.stop, cfg.follow_latest_s),
            name="glisp-follow-latest",
            daemon=True,
        ).start()
    while not state.stop.wait(0.2):
        servicer.heap.tick()
        if state.reload_requested.is_set():  # SIGHUP: move to the graph's latest
            state.reload_requested.clear()
            try:
                servicer.reload()
            except ReloadError as e:
                print(f"glisp serve: {e}", file=sys.stderr, flush=True)
    _drain(state, servicer, server, cfg)
    servicer.served.engine.close()
    if servicer.served.lease is not None:  # retention need not wait for a stopped server's lease to lapse
        _at_most(servicer.served.lease.release, LEASE_RELEASE_S)
    if health_server is not None:
        health_server.stop(0)  # after the drain, so probes saw NOT_SERVING
    if admin_socket:
        Path(admin_socket).unlink(missing_ok=True)
    print(f"glisp serve: partition {part} stopped", flush=True)
    return 0


def _at_most(fn: Any, seconds: float) -> None:
    """Run ``fn`` but wait for it no longer than ``seconds``: a store slow to answer at shutdown must not keep a
    stopping server past its supervisor's patience (a lease not released lapses by itself)."""
    t = threading.Thread(target=fn, name="glisp-shutdown-release", daemon=True)
    t.start()
    t.join(seconds)


def _start_integrity_check(state: ServingState, served: Served, cfg: ServeConfig) -> None:
    """The integrity of the version now served (a switch clears the previous one's, failed or not)."""
    generation = state.switched()
    if served.verified and cfg.verify != "off":  # hashed before serving (a cache copy, a reload's target)
        state.set_integrity("ok", generation)
    elif cfg.verify == "background":
        state.set_integrity("pending", generation)
        state.verify_in_background(served.engine.r)
    else:
        state.set_integrity("ok" if cfg.verify == "start" else "off", generation)


def _drain(state: ServingState, servicer: SamplingServicer, server: grpc.Server, cfg: ServeConfig) -> None:
    """NOT_SERVING first (probes see it for ``serve.drain_s`` while requests are still answered), then no new
    RPCs, idle streams cancelled, in-flight calls given ``serve.grace_s``."""
    state.draining()
    time.sleep(max(0.0, cfg.drain_s))
    servicer.begin_shutdown()
    server.stop(cfg.grace_s).wait()
