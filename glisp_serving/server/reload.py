"""Hot reload: a running server moves to another dataset version without a gap.

The servicer answers every request from one :class:`Served` object, read once at the start of the
request; a reload opens the new version's partition beside the old one (structure checked, kernels
warmed), then replaces that reference in one assignment. Requests that started on the old version
finish on it; the old engine is closed once they have (its thread pool drains) and its memory goes
back to the OS. Every answer names the version it came from, which is how a client keeps one
mini-batch on one version (glisp_serving/client/sampling_client.py).

A cluster moves in two phases (``glisp serve-reload``, ``serve-cluster`` on SIGHUP): every server
*prepares* the new version, then every server *commits*, so the window in which servers disagree is
the few milliseconds between commits, not the time to open a partition.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from glisp_core.config import ServeConfig
from glisp_core.dataset.layout import DatasetVersion, resolve_dataset
from glisp_core.dataset.manifest import read_manifest
from glisp_core.dataset.versions import VersionLease
from glisp_core.errors import GlispError
from glisp_core.storage.uri import StoreError
from glisp_sampling.budget import WorkBudget
from glisp_sampling.gather import PartitionSampler
from glisp_serving.server.memory import release_free_heap
from glisp_serving.server.warmup import warm_up

log = logging.getLogger("glisp.serve")


class ReloadError(GlispError):
    """A reload that cannot be done (maps to FAILED_PRECONDITION); the old version keeps serving."""


@dataclass
class Served:
    """One dataset version's partition as this server answers from it."""

    engine: PartitionSampler
    dv: DatasetVersion
    run: str
    lease: VersionLease | None = None
    verified: bool = False  # content hashes checked before serving (a cache copy of an object-store partition)

    def __post_init__(self) -> None:
        self._active = 0
        self._lock = threading.Lock()

    def __enter__(self) -> PartitionSampler:
        """``with served as engine:`` around a request, so a retired version waits for it."""
        with self._lock:
            self._active += 1
        return self.engine

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._active -= 1

    @property
    def version(self) -> str:
        return f"{self.dv.graph}/{self.dv.version}"

    @property
    def file_bytes(self) -> int:
        return int(sum(self.engine.r.file_bytes().values()))

    @property
    def partition_dir(self) -> Path | None:
        p = getattr(self.engine.r, "path", None)
        return Path(p) if p else None

    def retire(self) -> None:
        """Close once the requests still running on this version are done; give the memory back."""

        def run() -> None:
            time.sleep(1.0)  # a request that read the old reference just before the switch has entered by now
            while self._active:  # requests that started on this version finish on it
                time.sleep(0.02)
            self.engine.close()
            if self.lease is not None:
                self.lease.release()
            self.engine = None  # type: ignore[assignment]  # drop the arrays (dense id map, memmaps)
            release_free_heap()

        threading.Thread(target=run, name="glisp-retire", daemon=True).start()


def open_served(
    dv: DatasetVersion,
    run: str,
    part: int,
    cfg: ServeConfig,
    warm: bool = True,
    local: tuple[Path, bool] | None = None,
    budget: WorkBudget | None = None,
) -> Served:
    """The partition checked and opened, its kernels warmed, the version leased against retention.

    ``local`` is the partition's local directory and whether its hashes were checked (``local_partition``),
    when the caller already has it; an object-store partition is copied to ``serve.cache_dir`` first.
    """
    from glisp_core.partition_format import open_partition
    from glisp_core.partition_format.integrity import check_structure
    from glisp_serving.server.partition_cache import local_partition

    path, hashed = local or local_partition(dv, run, part, cfg)
    reader = open_partition(path, verify=cfg.verify == "start" and not hashed)
    check_structure(reader)  # the kernels index without bounds checks: nothing out of range may reach them
    engine = PartitionSampler(
        reader,
        threads=cfg.threads,
        chunk=cfg.chunk,
        max_batch=cfg.max_batch,
        dense_id_map_mb=cfg.dense_id_map_mb,
        max_fanout=cfg.max_fanout,
        max_request_edges=cfg.max_request_edges,
        max_response_bytes=cfg.max_message_mb << 20,
        budget=budget or WorkBudget(cfg.max_inflight_mb << 20),  # one per server: a reload passes it on
    )
    if warm:
        warm_up(engine)
    return Served(engine, dv, run, _lease(dv, run, part), verified=hashed)


def _lease(dv: DatasetVersion, run: str, part: int) -> VersionLease | None:
    """A lease retention honours, when this server may write one; None (and, for a store, one line) otherwise.

    A read-only local dataset directory is served without one, as before; on an object store, whether the
    credentials may write shows only by trying: a refused write means retention cannot see this server.
    """
    holder = f"glisp serve {run} partition {part}"
    if dv.path.is_local:
        return VersionLease(dv, holder).acquire() if os.access(dv.path.local, os.W_OK) else None
    try:
        return VersionLease(dv, holder).acquire()
    except (OSError, StoreError) as e:
        if not _access_denied(e):
            raise
        print(
            f"glisp serve: partition {part}: cannot write a lease under {dv.path} ({e}); serving without one, "
            "so retention cannot see this server and may delete this version while it serves",
            flush=True,
        )
        return None


def _access_denied(e: Exception) -> bool:
    """An object store's refusal to write (its credentials may read only), as pyarrow and boto3 word it."""
    text = str(e)
    return isinstance(e, PermissionError) or any(
        w in text for w in ("AccessDenied", "Access Denied", "Forbidden", "403")
    )


def resolve_target(current: Served, dataset: str, run: str) -> tuple[DatasetVersion, str]:
    """The version and run a reload moves to: ``dataset`` ("" = the graph's ``latest``) and ``run`` ("" = a
    run of the same name when the new version has it, else its newest serialized run)."""
    from glisp_serving.cluster.cluster_file import resolve_run

    spec = dataset or str(current.dv.root / current.dv.graph)
    try:
        dv = resolve_dataset(spec, current.dv.root)
        if not run and f"serialize/{current.run}" in read_manifest(dv).stages:
            run = current.run
        return dv, resolve_run(dv, run or None)
    except (GlispError, OSError, KeyError) as e:  # a path that is not a dataset, unreadable, or half-written
        raise ReloadError(f"reload: cannot serve {spec!r}: {e}") from None


def _verified(served: Served, cfg: ServeConfig) -> Served:
    """``served`` once every file matches its recorded hash (unless serve.verify=off); a ReloadError naming
    the files that do not, before anything switches: a damaged version never reaches clients."""
    from glisp_core.partition_format.integrity import verify_checksums

    if served.verified or cfg.verify == "off":
        return served
    bad = verify_checksums(served.engine.r)
    if bad:
        served.retire()
        raise ReloadError(
            f"reload: {served.version} run {served.run} partition {served.engine.part}: {', '.join(bad)} do not "
            "match their recorded hashes; still serving the current version"
        )
    served.verified = True
    return served


class Reloader:
    """Prepare / commit / reload for one servicer (thread-safe; one reload at a time)."""

    def __init__(self, servicer: Any, part: int, cfg: ServeConfig) -> None:
        self.servicer, self.part, self.cfg = servicer, part, cfg
        self._lock = threading.Lock()
        self._pending: Served | None = None

    def prepare(self, dataset: str = "", run: str = "") -> Served:
        """Open the target beside the served version (the same one again is a no-op)."""
        from glisp_serving.cluster.cluster_file import num_parts_of

        with self._lock:
            cur = self.servicer.served
            dv, run = resolve_target(cur, dataset, run)
            if (dv.path, run) == (cur.dv.path, cur.run):
                self._drop_pending()  # preparing what is served aborts a prepared switch (glisp serve-reload)
                return cur
            if self._pending is not None and (self._pending.dv.path, self._pending.run) == (dv.path, run):
                return self._pending
            parts = num_parts_of(dv, run)
            if parts != cur.engine.num_parts:
                raise ReloadError(
                    f"reload: {dv.graph}/{dv.version} run {run} has {parts} partitions, this cluster serves "
                    f"{cur.engine.num_parts}; a different partition count needs a new cluster (serve-cluster)"
                )
            self._drop_pending()
            try:
                pending = open_served(dv, run, self.part, self.cfg, budget=cur.engine.budget)
            except (GlispError, OSError) as e:
                raise ReloadError(f"reload: cannot open {dv.graph}/{dv.version} run {run}: {e}") from None
            self._pending = _verified(pending, self.cfg)
            log.info("prepared %s run %s beside %s", self._pending.version, run, cur.version)
            return self._pending

    def _drop_pending(self) -> None:
        if self._pending is not None:
            self._pending.retire()
            self._pending = None

    def commit(self) -> tuple[Served, Served]:
        """Switch to the prepared version in one assignment; (previous, now served)."""
        with self._lock:
            old, new = self.servicer.served, self._pending
            if new is None:
                return old, old
            self.servicer.served, self._pending = new, None
        old.retire()
        print(
            f"glisp serve: partition {self.part} now serves {new.version} run {new.run} (was {old.version})", flush=True
        )
        return old, new

    def reload(self, dataset: str = "", run: str = "") -> tuple[Served, Served]:
        self.prepare(dataset, run)
        return self.commit()

    def follow_latest(self, stop: threading.Event, every_s: float) -> None:
        """Reload whenever the graph's ``latest`` names another version (``serve.follow_latest_s``), through
        the servicer, as SIGHUP and the Reload RPC do."""
        while not stop.wait(every_s):
            try:
                self.servicer.reload()
            except ReloadError as e:
                log.error("%s", e)
