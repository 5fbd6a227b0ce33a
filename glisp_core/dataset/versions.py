"""Versions of one graph over time: the ``latest`` pointer, leases of readers, retention, the refresh lock.

A scheduled refresh adds a version per snapshot. Consumers follow ``<root>/<graph>/LATEST``, a one-line
file naming the newest version whose every configured stage succeeded; it is replaced atomically
(write, fsync, rename), so a reader sees the old name or the new one. A running server or trainer holds
a *lease* on the version it reads: a file under ``<version>/.leases/`` with an expiry that its holder
renews; a crashed holder stops renewing and its lease lapses (on the holder's own host, as soon as its
process is gone). Retention keeps the newest ``dataset.keep_versions`` versions and never deletes the
one ``LATEST`` names or one with a live lease. One pipeline run at a time per graph: a second is refused
by an advisory lock that the kernel releases when its holder dies.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import socket
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

from glisp_core.dataset.layout import LATEST, DatasetVersion, _latest_named, check_name, list_versions
from glisp_core.errors import StageError

LEASES = ".leases"
LOCK = ".pipeline.lock"


# ---- the latest pointer ------------------------------------------------------------------------


def read_latest(graph_dir: Path) -> str | None:
    """The version ``LATEST`` names, if it names a published one."""
    return _latest_named(graph_dir)


def set_latest(dv: DatasetVersion) -> None:
    """Point ``LATEST`` of ``dv``'s graph at ``dv`` (atomically)."""
    if not dv.manifest_path.exists():
        raise StageError(f"latest: {dv.path} is not a published version")
    gdir = dv.path.parent
    tmp = gdir / f".{LATEST}.{os.getpid()}.{uuid.uuid4().hex[:8]}"
    with open(tmp, "w") as f:
        f.write(dv.version + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, gdir / LATEST)


# ---- leases ------------------------------------------------------------------------------------


def _alive_here(rec: dict[str, Any]) -> bool:
    """False only when the holder ran on this host and its process is gone (or was reused)."""
    if rec.get("host") != socket.gethostname():
        return True
    try:
        os.kill(int(rec["pid"]), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, KeyError, ValueError, TypeError):
        return True
    return True


def active_leases(dv: DatasetVersion) -> list[dict[str, Any]]:
    """Leases on ``dv`` that have not expired and whose holder is not known to be dead."""
    out: list[dict[str, Any]] = []
    d = dv.path / LEASES
    if not d.is_dir():
        return out
    now = time.time()
    for f in d.glob("*.json"):
        try:
            rec = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        if float(rec.get("expires_at", 0)) > now and _alive_here(rec):
            out.append(rec)
    return out


class VersionLease:
    """Hold ``dv`` against retention while this process reads it (a server, a trainer, inference).

    ::

        with VersionLease(dv, "serve partition 3"):
            serve()

    The lease file is renewed every ``ttl_s / 3`` by a daemon thread and removed on release.
    """

    def __init__(self, dv: DatasetVersion, holder: str, ttl_s: float = 60.0) -> None:
        self.dv, self.holder, self.ttl_s = dv, holder, float(ttl_s)
        self.path = dv.path / LEASES / f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}.json"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _write(self) -> None:
        rec = {
            "holder": self.holder,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "version": self.dv.version,
            "expires_at": time.time() + self.ttl_s,
        }
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(rec))
        os.replace(tmp, self.path)

    def acquire(self) -> VersionLease:
        self.path.parent.mkdir(exist_ok=True)
        self._write()
        self._thread = threading.Thread(target=self._renew, name="glisp-lease", daemon=True)
        self._thread.start()
        return self

    def _renew(self) -> None:
        while not self._stop.wait(self.ttl_s / 3):
            try:
                self._write()
            except OSError:  # the version was removed under us; nothing left to hold
                return

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.path.unlink(missing_ok=True)

    def __enter__(self) -> VersionLease:
        return self.acquire()

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.release()


# ---- retention ---------------------------------------------------------------------------------


def apply_retention(root: Path, graph: str, keep: int, log: Callable[[str], None] = print) -> list[str]:
    """Delete all but the newest ``keep`` versions of ``graph``; never LATEST's, never a leased one.

    ``keep`` <= 0 keeps everything. Returns the removed version names. A version is renamed to a
    hidden name before it is deleted, so a reader never sees half a version.
    """
    if keep <= 0:
        return []
    gdir = Path(root) / check_name("graph", graph)
    versions = list_versions(Path(root), graph)  # oldest first
    latest = read_latest(gdir)
    removed = []
    for v in versions[: max(0, len(versions) - keep)]:
        dv = DatasetVersion(Path(root), graph, v)
        if v == latest:
            continue
        leases = active_leases(dv)
        if leases:
            log(f"retention: keeping {graph}/{v}, leased by " + ", ".join(sorted({r["holder"] for r in leases})))
            continue
        doomed = gdir / f".deleting-{v}~{uuid.uuid4().hex[:12]}"
        os.rename(dv.path, doomed)
        shutil.rmtree(doomed, ignore_errors=True)
        removed.append(v)
        log(f"retention: removed {graph}/{v}")
    return removed


# ---- the refresh lock --------------------------------------------------------------------------


class GraphLock:
    """One pipeline run per graph at a time; a second one fails at once naming the holder."""

    def __init__(self, root: Path, graph: str) -> None:
        self.gdir = Path(root) / check_name("graph", graph)
        self._fd: int | None = None

    def __enter__(self) -> GraphLock:
        self.gdir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.gdir / LOCK, os.O_CREAT | os.O_RDWR, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 4096, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise StageError(
                f"graph {self.gdir.name!r}: another pipeline run holds {self.gdir / LOCK} ({holder}); "
                "wait for it to finish (the lock is released when its process ends)"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(
            fd,
            f"pid {os.getpid()} on {socket.gethostname()} since {time.strftime('%FT%TZ', time.gmtime())}".encode(),
            0,
        )
        self._fd = fd
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
