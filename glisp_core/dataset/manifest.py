"""The manifest of a dataset version: what it holds and how it was made, assembled from its stage records.

A stage's output counts as published only when a record names it (docs/storage.md); a prefix no record
names (a crashed run's leftovers) is never read. :func:`read_manifest` reads ``_version.json`` and every
stage's current record; the schema and the inputs are ingest's.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from glisp_core.dataset.layout import DatasetVersion
from glisp_core.dataset.records import VERSION_FILE, current_records, json_default
from glisp_core.dataset.stages import run_of
from glisp_core.errors import FormatError, StageError

SCHEMA_VERSION = 2


@dataclass
class StageRecord:
    """What one published stage wrote, with what parameters, and what it measured."""

    name: str  # e.g. "ingest", "partition/adadne-p8", "serialize/adadne-p8"
    path: str  # the attempt prefix, relative to the version directory
    fingerprint: str  # hash of params + inputs; equal fingerprint = nothing to redo
    params: dict[str, Any] = field(default_factory=dict)
    depends: dict[str, str] = field(default_factory=dict)  # upstream stage name -> its fingerprint
    counts: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    completed_at: str = ""
    schema: dict[str, Any] = field(default_factory=dict)  # ingest: the version's schema
    inputs: list[dict[str, Any]] = field(default_factory=list)  # ingest: its input files

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> StageRecord:
        known = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        return cls(**known)


@dataclass
class Manifest:
    graph: str
    version: str
    schema_version: int = SCHEMA_VERSION
    created_at: str = ""
    inputs: list[dict[str, Any]] = field(default_factory=list)  # {path, bytes, sha256|mtime}
    schema: dict[str, Any] = field(default_factory=dict)  # vertex/edge type names, feature dim, flags
    stages: dict[str, StageRecord] = field(default_factory=dict)
    location: DatasetVersion | None = field(default=None, compare=False, repr=False)  # once read

    # ---- (de)serialisation ----
    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("location")
        d["stages"] = {k: asdict(v) for k, v in self.stages.items()}
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, default=json_default)

    @classmethod
    def from_dict(cls, d: dict[str, Any], source: str = "manifest") -> Manifest:
        sv = d.get("schema_version")
        if sv != SCHEMA_VERSION:
            raise FormatError(
                f"{source}: manifest schema version {sv}, this GLISP reads {SCHEMA_VERSION}; "
                "re-run 'glisp ingest' with this version"
            )
        try:
            stages = {k: StageRecord.from_dict(v) for k, v in d.get("stages", {}).items()}
            return cls(
                graph=d["graph"],
                version=d["version"],
                schema_version=sv,
                created_at=d.get("created_at", ""),
                inputs=d.get("inputs", []),
                schema=d.get("schema", {}),
                stages=stages,
            )
        except (KeyError, TypeError) as e:
            raise FormatError(f"{source}: malformed manifest ({e})") from None

    # ---- queries ----
    def stage(self, name: str) -> StageRecord:
        """A published stage whose upstream stages are still the ones it was built from."""
        rec = self.stages.get(name)
        if rec is None:
            have = ", ".join(sorted(self.stages)) or "none"
            raise StageError(f"{self.graph}/{self.version}: stage {name!r} has not run (published: {have})")
        for dep, fp in rec.depends.items():
            up = self.stages.get(dep)
            if up is None or up.fingerprint != fp:
                raise StageError(
                    f"{self.graph}/{self.version}: stage {name!r} was built from an older {dep!r}; re-run it"
                )
        if self.location is not None and rec.path:
            out = self.location.path / rec.path
            if not self.location.store.exists(out):
                raise StageError(
                    f"{self.graph}/{self.version}: the output of stage {name!r} at {out} is missing "
                    "(removed by hand?); re-run the stage to rebuild it"
                )
        return rec

    def has_stage(self, name: str) -> bool:
        try:
            self.stage(name)
            return True
        except StageError:
            return False

    def stages_with_prefix(self, prefix: str) -> list[StageRecord]:
        return [s for n, s in self.stages.items() if n.startswith(prefix)]

    def latest_run(self, kind: str, current_only: bool = False) -> str | None:
        """The run of the ``kind`` stage published last (by completion time, then name); None when there is none.

        ``current_only`` skips records whose inputs changed or whose output is gone (see :meth:`stage`).
        """
        recs = [r for r in self.stages_with_prefix(f"{kind}/") if not current_only or self.has_stage(r.name)]
        if not recs:
            return None
        return run_of(max(recs, key=lambda r: (r.completed_at, r.name)).name)


def read_manifest(dv: DatasetVersion) -> Manifest:
    """``dv``'s manifest: ``_version.json`` and every stage's current record (FormatError when unpublished)."""
    store = dv.store
    text = store.read_text(dv.path / VERSION_FILE)
    if text is None:
        raise FormatError(f"{dv.path}: not a published dataset version (no {VERSION_FILE})")
    try:
        head = json.loads(text)
    except ValueError as e:
        raise FormatError(f"{dv.path / VERSION_FILE}: not valid JSON ({e})") from None
    stages = {name: StageRecord.from_dict(doc) for name, (_, doc) in current_records(store, dv.path).items()}
    ingest = stages.get("ingest")
    m = Manifest.from_dict(
        {
            **head,
            "version": dv.version,
            "inputs": ingest.inputs if ingest else [],
            "schema": dict(ingest.schema) if ingest else {},
        },
        str(dv.path / VERSION_FILE),
    )
    m.stages = stages
    m.location = dv
    return m


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
