"""Copies of dataset versions between stores, so a test can start a stage on ``s3://`` from local inputs."""

from __future__ import annotations

import json

from glisp_core.dataset.layout import DatasetVersion
from glisp_core.dataset.versions import LEASES
from glisp_core.storage.store import Store
from glisp_core.storage.uri import StoreURI


def copy_version(src: DatasetVersion, root: StoreURI, version: str | None = None, created_ns: int | None = None):
    """A byte copy of ``src``'s version prefix at ``<root>/<graph>/<version>`` (the layout is relative), without
    the source's leases; ``version`` and ``created_ns`` rename and re-date it."""
    version = version or src.version
    store = Store(root)
    dst = root / src.graph / version
    store.upload(src.path.local, dst)
    store.delete(dst / LEASES)
    doc = json.loads(store.read_text(dst / "_version.json") or "{}")
    doc.update(version=version, created_ns=created_ns or doc["created_ns"])
    store.write_bytes(dst / "_version.json", json.dumps(doc).encode())
    return DatasetVersion(root, src.graph, version)
