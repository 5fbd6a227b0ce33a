"""manifest.json: the one record of what a dataset version holds and how it was made.

A stage's output counts as published only when the manifest lists it; a directory the manifest does
not name (a crashed run's leftovers) is never read.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from glisp_core.dataset.stages import run_of
from glisp_core.errors import FormatError, StageError

SCHEMA_VERSION = 1
STAMP = "_GLISP_STAGE.json"  # inside every published stage directory: the record it belongs to


@dataclass
class StageRecord:
    """What one published stage wrote, with what parameters, and what it measured."""

    name: str  # e.g. "ingest", "partition/adadne-p8", "serialize/adadne-p8"
    path: str  # relative to the version directory
    fingerprint: str  # hash of params + inputs; equal fingerprint = nothing to redo
    params: dict[str, Any] = field(default_factory=dict)
    depends: dict[str, str] = field(default_factory=dict)  # upstream stage name -> its fingerprint
    counts: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    completed_at: str = ""

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
    location: Path | None = field(default=None, compare=False, repr=False)  # the version directory, once read

    # ---- (de)serialisation ----
    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("location")
        d["stages"] = {k: asdict(v) for k, v in self.stages.items()}
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any], source: str = "manifest.json") -> Manifest:
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

    @classmethod
    def read(cls, path: Path) -> Manifest:
        try:
            m = cls.from_dict(json.loads(path.read_text()), str(path))
        except FileNotFoundError:
            raise FormatError(f"{path}: manifest not found") from None
        except json.JSONDecodeError as e:
            raise FormatError(f"{path}: manifest is not valid JSON ({e})") from None
        m.location = path.parent
        return m

    def write(self, path: Path) -> None:
        """Write atomically: a reader sees the old or the new manifest, never half of one."""
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=2, sort_keys=False, default=_json_default))
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)

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
            out = self.location / rec.path
            stamp = read_stamp(out) if out.is_dir() else None
            if not out.exists() or stamp not in (None, rec.fingerprint):
                raise StageError(
                    f"{self.graph}/{self.version}: the output of stage {name!r} at {out} is "
                    f"{'missing' if not out.exists() else 'not the one its manifest record describes'} "
                    "(an interrupted publish?); re-run the stage to restore or rebuild it"
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


def write_stamp(directory: Path, stage: str, fp: str) -> None:
    """Record inside a stage's output which manifest record it belongs to (checked by Manifest.stage)."""
    (directory / STAMP).write_text(json.dumps({"stage": stage, "fingerprint": fp}))


def read_stamp(directory: Path) -> str | None:
    """The fingerprint a stage output was published under; None for outputs from before stamps."""
    try:
        return str(json.loads((directory / STAMP).read_text())["fingerprint"])
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError):
        return "<unreadable stamp>"


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _json_default(o: Any) -> Any:
    try:
        import numpy as np

        if isinstance(o, np.generic):
            return o.item()
        if isinstance(o, np.ndarray):
            return o.tolist()
    except ImportError:  # pragma: no cover
        pass
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


@contextmanager
def manifest_lock(version_dir: Path) -> Iterator[None]:
    """Serialise manifest updates of concurrent stages on one version (POSIX advisory lock)."""
    version_dir.mkdir(parents=True, exist_ok=True)
    with open(version_dir / ".manifest.lock", "a+") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)
