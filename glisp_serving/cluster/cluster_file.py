"""The cluster file: where each partition's server listens, so that clients need nothing else.

JSON, written by ``glisp serve-cluster`` (or by the templates in ``submit/serving/``)::

    {"format": "glisp-cluster", "format_version": 1,
     "dataset": "/data/glisp/twitter/v1", "run": "adadne-p4", "num_parts": 4,
     "addresses": [["10.0.0.5:7000"], ["10.0.0.6:7000"], ...],   # per partition, first = preferred
     "admin": "unix:/tmp/glisp-cluster-x/admin.sock"}            # serve-cluster's admin socket, if any

Each partition may list several addresses (replicated servers); the client fails over on UNAVAILABLE.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from glisp_core.dataset.layout import DatasetVersion, resolve_dataset
from glisp_core.dataset.manifest import read_manifest
from glisp_core.errors import FormatError, StageError

CLUSTER_FORMAT = "glisp-cluster"
CLUSTER_VERSION = 1


@dataclass(frozen=True)
class ClusterSpec:
    dataset: str  # version directory
    run: str
    num_parts: int
    addresses: list[list[str]]
    admin: str = ""  # serve-cluster's admin socket ("unix:/..."): where glisp serve-reload asks it to move

    @property
    def dv(self) -> DatasetVersion:
        return resolve_dataset(self.dataset)

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": CLUSTER_FORMAT,
            "format_version": CLUSTER_VERSION,
            "dataset": self.dataset,
            "run": self.run,
            "num_parts": self.num_parts,
            "addresses": self.addresses,
            **({"admin": self.admin} if self.admin else {}),
        }

    def write(self, path: str | os.PathLike[str]) -> Path:
        """Write atomically (a client never reads half a file)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=2))
        os.replace(tmp, path)
        return path

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> ClusterSpec:
        path = Path(path)
        try:
            d = json.loads(path.read_text())
        except FileNotFoundError:
            raise FormatError(
                f"{path}: cluster file not found (start the servers with 'glisp serve-cluster')"
            ) from None
        except json.JSONDecodeError as e:
            raise FormatError(f"{path}: cluster file is not valid JSON ({e})") from None
        if d.get("format") != CLUSTER_FORMAT or d.get("format_version") != CLUSTER_VERSION:
            raise FormatError(
                f"{path}: expected format {CLUSTER_FORMAT!r} version {CLUSTER_VERSION} "
                f"(got {d.get('format')!r} version {d.get('format_version')!r})"
            )
        try:
            addrs = [[a] if isinstance(a, str) else list(a) for a in d["addresses"]]
            spec = cls(
                dataset=str(d["dataset"]),
                run=str(d["run"]),
                num_parts=int(d["num_parts"]),
                addresses=addrs,
                admin=str(d.get("admin", "")),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise FormatError(f"{path}: malformed cluster file ({e!r})") from None
        if len(spec.addresses) != spec.num_parts or any(not a for a in spec.addresses):
            raise FormatError(
                f"{path}: 'addresses' must list at least one address for each of {spec.num_parts} partitions "
                f"(got {len(spec.addresses)} entries)"
            )
        return spec


def resolve_run(dv: DatasetVersion, run: str | None) -> str:
    """The serialized partition run to serve: ``run``, or the most recently published ``serialize/*``."""
    man = read_manifest(dv)
    if "ingest" not in man.stages:  # every later stage reads its output: name it, not a symptom
        raise StageError(
            f"{dv}: the ingest stage's record is missing, so nothing of this version can be served "
            f"('glisp report {dv.path}' lists what is missing or damaged)"
        )
    if run:
        man.stage(f"serialize/{run}")  # raises when absent or stale
        return run
    latest = man.latest_run("serialize", current_only=True)
    if latest is None:
        raise StageError(f"{dv}: no serialized partition run (run 'glisp serialize' first)")
    return latest


def num_parts_of(dv: DatasetVersion, run: str) -> int:
    """Partition count of a serialized run, from the first partition's meta.json."""
    meta = dv.partition_dir(run, 0) / "meta.json"
    text = dv.store.read_text(meta)
    if text is None:
        raise StageError(f"{meta}: not found; is serialize/{run} published?")
    return int(json.loads(text)["num_parts"])
