"""Copies of dataset versions between stores, so a test can start a stage on ``s3://`` from local inputs."""

from __future__ import annotations

import json
from pathlib import Path

from glisp_core.dataset.layout import DatasetVersion
from glisp_core.dataset.versions import LEASES
from glisp_core.storage.store import Store
from glisp_core.storage.uri import StoreURI


def copy_version(
    src: DatasetVersion,
    root: StoreURI,
    version: str | None = None,
    created_ns: int | None = None,
    skip: tuple[str, ...] = (),
):
    """A byte copy of ``src``'s version prefix at ``<root>/<graph>/<version>`` (the layout is relative), without
    the source's leases; ``version`` and ``created_ns`` rename and re-date it. ``skip``: stage families (e.g.
    ``("infer", "train")``) whose outputs and records stay behind: a session-scoped version collects every
    test's runs, and copying them all into a bucket is most of a late test's time."""
    version = version or src.version
    store = Store(root)
    dst = root / src.graph / version
    local = Path(src.path.local)
    children = [c for c in sorted(local.iterdir()) if c.name not in skip] if skip else []
    if not skip:
        store.upload(local, dst)
    for child in children:
        if child.name == "_records":
            for family in (c for c in sorted(child.iterdir()) if c.name not in skip):
                store.upload(family, dst / "_records" / family.name)
        elif child.is_dir():
            store.upload(child, dst / child.name)
        else:
            store.write_bytes(dst / child.name, child.read_bytes())
    store.delete(dst / LEASES)
    doc = json.loads(store.read_text(dst / "_version.json") or "{}")
    doc.update(version=version, created_ns=created_ns or doc["created_ns"])
    store.write_bytes(dst / "_version.json", json.dumps(doc).encode())
    return DatasetVersion(root, src.graph, version)
