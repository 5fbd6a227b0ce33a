"""Stage records as objects: ``<version>/_records/<stage>/<seq>.json``, one per commit (docs/storage.md).

Publishing a stage is creating its next record with a conditional create; its current record is the one with
the highest sequence number. Nothing here rewrites an object another writer may be reading.
"""

from __future__ import annotations

import json
from typing import Any

from glisp_core.storage.store import Store
from glisp_core.storage.uri import StoreURI

RECORDS = "_records"
VERSION_FILE = "_version.json"  # created once per version: the version exists
SEQ_DIGITS = 8


def record_dir(version: StoreURI, stage: str) -> StoreURI:
    return version / RECORDS / stage


def _seq_of(name: str) -> int | None:
    stem = name.removesuffix(".json")
    return int(stem) if name.endswith(".json") and stem.isdigit() else None


def current_record(store: Store, version: StoreURI, stage: str) -> tuple[int, dict[str, Any]] | None:
    """(sequence number, record) of ``stage``'s current record; None when it never published."""
    seqs = [s for s in (_seq_of(n) for n in store.names(record_dir(version, stage))) if s is not None]
    if not seqs:
        return None
    seq = max(seqs)
    return seq, json.loads(store.read_bytes(record_dir(version, stage) / f"{seq:0{SEQ_DIGITS}d}.json"))


def current_records(store: Store, version: StoreURI) -> dict[str, tuple[int, dict[str, Any]]]:
    """Every stage's current record, by stage name (one listing of the version's records)."""
    best: dict[str, int] = {}
    for rel, _ in store.files(version / RECORDS):
        stage, _, leaf = rel.rpartition("/")
        seq = _seq_of(leaf)
        if stage and seq is not None and seq > best.get(stage, -1):
            best[stage] = seq
    return {
        stage: (seq, json.loads(store.read_bytes(record_dir(version, stage) / f"{seq:0{SEQ_DIGITS}d}.json")))
        for stage, seq in sorted(best.items())
    }


def create_record(store: Store, version: StoreURI, stage: str, seq: int, doc: dict[str, Any]) -> bool:
    """Publish ``doc`` as record ``seq`` of ``stage``; False when another writer created it first."""
    data = json.dumps(doc, indent=2, default=json_default).encode()
    return store.create_exclusive(record_dir(version, stage) / f"{seq:0{SEQ_DIGITS}d}.json", data)


def json_default(o: Any) -> Any:
    try:
        import numpy as np

        if isinstance(o, np.generic):
            return o.item()
        if isinstance(o, np.ndarray):
            return o.tolist()
    except ImportError:  # pragma: no cover
        pass
    if isinstance(o, StoreURI):
        return str(o)
    if hasattr(o, "__fspath__"):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")
