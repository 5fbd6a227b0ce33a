"""Versions of one graph over time: the ``latest`` pointer, leases of readers, retention, the refresh lock.

A scheduled refresh adds a version per snapshot. Consumers follow ``<root>/<graph>/LATEST``, one small
object naming the newest version whose every configured stage succeeded; it is replaced whole by one write,
so a reader sees the old name or the new one. A running server or trainer holds a *lease* on the version it
reads: an object under ``<version>/_leases/`` with an expiry its holder renews (glisp_core.storage.lease).
Retention keeps the newest ``dataset.keep_versions`` versions and never deletes the one ``LATEST`` names or
one with a live lease. One pipeline run at a time per graph: a generation-numbered lock object
(docs/storage.md, Locks).
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Callable
from types import TracebackType
from typing import Any

from glisp_core.dataset.layout import (
    LATEST,
    DatasetVersion,
    _latest_named,
    candidate_versions,
    check_name,
    list_versions,
)
from glisp_core.dataset.publish import remove_abandoned_in, remove_unpublished
from glisp_core.dataset.records import VERSION_FILE
from glisp_core.errors import StageError
from glisp_core.storage.lease import DEFAULT_TTL_S, LeaseKeeper, is_live, read_lease
from glisp_core.storage.store import store_for
from glisp_core.storage.uri import StoreURI, parse_uri

LEASES = "_leases"
LOCKS = "_locks"

# ---- the latest pointer ------------------------------------------------------------------------


def read_latest(graph_dir: StoreURI | str | os.PathLike[str]) -> str | None:
    """The version ``LATEST`` names, if it names a published one."""
    return _latest_named(parse_uri(graph_dir))


def set_latest(dv: DatasetVersion) -> None:
    """Point ``LATEST`` of ``dv``'s graph at ``dv`` (one whole-object write)."""
    if not dv.store.exists(dv.manifest_path):
        raise StageError(f"latest: {dv.path} is not a published version")
    dv.store.write_bytes(dv.path.parent / LATEST, (dv.version + "\n").encode())


# ---- leases ------------------------------------------------------------------------------------


def active_leases(dv: DatasetVersion) -> list[dict[str, Any]]:
    """Leases on ``dv`` that have not expired and whose holder is not known to be dead."""
    store = dv.store
    out = []
    for name in store.names(dv.path / LEASES):
        doc = read_lease(store, dv.path / LEASES / name)
        if doc is not None and is_live(doc):
            out.append(doc)
    return out


class VersionLease(LeaseKeeper):
    """Hold ``dv`` against retention while this process reads it (a server, a trainer, inference).

    ::

        with VersionLease(dv, "serve partition 3"):
            serve()

    The lease object is renewed every ``ttl_s / 3`` by a daemon thread and removed on release.
    """

    def __init__(self, dv: DatasetVersion, holder: str, ttl_s: float = DEFAULT_TTL_S) -> None:
        name = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}.json"
        super().__init__(dv.store, dv.path / LEASES / name, holder, ttl_s, version=dv.version)
        self.dv = dv

    def acquire(self) -> VersionLease:
        self.write()
        self.start()
        return self

    def __enter__(self) -> VersionLease:
        return self.acquire()


# ---- retention ---------------------------------------------------------------------------------


def apply_retention(
    root: StoreURI | str | os.PathLike[str], graph: str, keep: int, log: Callable[[str], None] = print
) -> list[str]:
    """Delete all but the newest ``keep`` versions of ``graph``; never LATEST's, never a leased one.

    ``keep`` <= 0 keeps everything. Returns the removed version names. ``_version.json`` goes first, so the
    version leaves every listing at once and a reader never resolves half a version.
    """
    if keep <= 0:
        return []
    gdir = parse_uri(root) / check_name("graph", graph)
    versions = list_versions(gdir.parent, graph)  # oldest first
    latest = read_latest(gdir)
    removed = []
    for v in versions[: max(0, len(versions) - keep)]:
        dv = DatasetVersion(gdir.parent, graph, v)
        if v == latest:
            continue
        leases = active_leases(dv)
        if leases:
            remove_abandoned_in(dv)
            log(f"retention: keeping {graph}/{v}, leased by " + ", ".join(sorted({r["holder"] for r in leases})))
            continue
        dv.store.delete(dv.path / VERSION_FILE)
        dv.store.delete(dv.path)
        removed.append(v)
        log(f"retention: removed {graph}/{v}")
    for v in set(versions) - set(removed):  # what killed writers left in the versions that stay
        remove_abandoned_in(DatasetVersion(gdir.parent, graph, v))
    _remove_failed_ingests(gdir, set(versions), log)
    return removed


def _remove_failed_ingests(gdir: StoreURI, published: set[str], log: Callable[[str], None]) -> None:
    """Version prefixes a first ingest left without publishing them (killed, or failed on a store that stopped
    answering) under names nobody ingests again: gone once no live ingest writes there. Only a prefix with an
    ``ingest/`` directory is a version's; anything else under the graph is not retention's."""
    store = store_for(gdir)
    for name in candidate_versions(store, gdir):
        if name not in published and store.is_dir(gdir / name / "ingest") and remove_unpublished(store, gdir / name):
            log(f"retention: removed {gdir.name}/{name}, a first ingest that never published")


# ---- the refresh lock --------------------------------------------------------------------------


class GraphLock:
    """One pipeline run per graph at a time; a second one fails at once naming the holder.

    The lock is the highest generation under ``<graph>/_locks/`` whose lease is live. Taking it means creating
    the next generation with a conditional create once the current one lapsed, so two takers cannot both win.
    """

    def __init__(self, root: StoreURI | str | os.PathLike[str], graph: str) -> None:
        self.gdir = parse_uri(root) / check_name("graph", graph)
        self.store = store_for(self.gdir)
        self._keeper: LeaseKeeper | None = None
        self._generation = 0

    def _generations(self) -> list[int]:
        names = self.store.names(self.gdir / LOCKS)
        return sorted(int(n[:-5]) for n in names if n.endswith(".json") and n[:-5].isdigit())

    def __enter__(self) -> GraphLock:
        gens = self._generations()
        top = gens[-1] if gens else 0
        if gens:
            doc = read_lease(self.store, self.gdir / LOCKS / f"{top:012d}.json")
            if is_live(doc):
                assert doc is not None
                since = time.strftime("%FT%TZ", time.gmtime(float(doc.get("since", 0))))
                raise StageError(
                    f"graph {self.gdir.name!r}: another pipeline run holds {self.gdir / LOCKS} "
                    f"(pid {doc.get('pid')} on {doc.get('host')} since {since}); wait for it to finish "
                    "(the lock lapses when its holder ends)"
                )
        keeper = LeaseKeeper(
            self.store, self.gdir / LOCKS / f"{top + 1:012d}.json", "glisp pipeline", since=time.time()
        )
        if not keeper.write(create=True):
            raise StageError(f"graph {self.gdir.name!r}: another pipeline run took the lock just now; wait for it")
        for g in self._generations():  # the ones before ours are done with
            if g <= top:
                self.store.delete(self.gdir / LOCKS / f"{g:012d}.json")
        self._keeper = keeper.start()
        self._generation = top + 1
        return self

    def check(self) -> None:
        """StageError when another run took the lock from us (ours lapsed: this process stalled past its expiry)."""
        if (
            self._keeper is None
            or self._keeper.lost
            or not self._keeper.held()
            or self._generations()[-1:] != [self._generation]
        ):
            raise StageError(
                f"graph {self.gdir.name!r}: this run lost its lock to another pipeline run (it stalled past the "
                "lock's expiry); stopping before it moves latest"
            )

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        if self._keeper is not None:
            self._keeper.release()
            self._keeper = None
