"""Lease objects: an owner and an expiry in one small object, renewed by its holder while it lives.

A store has no lock that dies with its holder, so every claim GLISP makes on a dataset (a writer's attempt, a
reader's hold on a version, the graph's refresh lock) is an object naming its holder (host, pid) and an
expiry that a daemon thread pushes forward every third of the time to live. A claim counts while it has
not expired; on the holder's own host it stops counting as soon as the holder's process is gone, so a
killed run on one machine is cleaned up at once, and one on another machine after at most its time to live.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from types import TracebackType
from typing import Any

from glisp_core.storage.store import Store
from glisp_core.storage.uri import StoreURI

DEFAULT_TTL_S = 60.0


def lease_doc(holder: str, ttl_s: float, **extra: Any) -> dict[str, Any]:
    """What a lease object holds: who, where, until when."""
    return {
        "holder": holder,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "expires_at": time.time() + ttl_s,
        **extra,
    }


def alive_here(doc: dict[str, Any]) -> bool:
    """False only when the holder ran on this host and its process is gone."""
    if doc.get("host") != socket.gethostname():
        return True
    try:
        os.kill(int(doc["pid"]), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, KeyError, ValueError, TypeError):
        return True
    return True


def is_live(doc: dict[str, Any] | None) -> bool:
    """The claim still holds: not expired, and its holder not known to be dead."""
    return doc is not None and float(doc.get("expires_at", 0)) > time.time() and alive_here(doc)


def read_lease(store: Store, uri: StoreURI) -> dict[str, Any] | None:
    text = store.read_text(uri)
    if text is None:
        return None
    try:
        doc: dict[str, Any] = json.loads(text)
        return doc
    except ValueError:
        return {}  # half-written by a store without atomic writes: not a live claim


class LeaseKeeper:
    """Write the lease object at ``uri`` and keep renewing it until :meth:`release` (which deletes it)."""

    def __init__(self, store: Store, uri: StoreURI, holder: str, ttl_s: float = DEFAULT_TTL_S, **extra: Any) -> None:
        self.store, self.uri, self.holder, self.ttl_s, self.extra = store, uri, holder, float(ttl_s), extra
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.lost = False  # the object vanished or changed hands while we held it

    def write(self, create: bool = False) -> bool:
        """Write (or, with ``create``, create only if absent) the lease object; False when ``create`` lost."""
        data = self.doc_bytes()
        if create:
            return self.store.create_exclusive(self.uri, data)
        self.store.write_bytes(self.uri, data)
        return True

    def doc_bytes(self) -> bytes:
        """The lease object's bytes as of now (what :meth:`write` writes)."""
        return json.dumps(lease_doc(self.holder, self.ttl_s, **self.extra)).encode()

    def start(self) -> LeaseKeeper:
        self._thread = threading.Thread(target=self._renew, name="glisp-lease", daemon=True)
        self._thread.start()
        return self

    def _renew(self) -> None:
        while not self._stop.wait(self.ttl_s / 3):
            try:
                doc = read_lease(self.store, self.uri)
                if doc is None or doc.get("pid") != os.getpid() or doc.get("host") != socket.gethostname():
                    self.lost = True
                    return
                self.write()
            except OSError:
                self.lost = True
                return

    def held(self) -> bool:
        """The object is still ours (checked against the store, not just the renewing thread's view)."""
        doc = read_lease(self.store, self.uri)
        return doc is not None and doc.get("pid") == os.getpid() and doc.get("host") == socket.gethostname()

    def stop(self, wait: bool = True) -> None:
        """Stop renewing; ``wait``: until a renewal under way ends (at most 5 s), not for a store that hangs."""
        self._stop.set()
        if self._thread is not None and wait:
            self._thread.join(timeout=5)
        self._thread = None

    def release(self) -> None:
        self.stop()
        try:
            self.store.delete(self.uri)
        except OSError:
            pass

    def __enter__(self) -> LeaseKeeper:
        self.write()
        return self.start()

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.release()
