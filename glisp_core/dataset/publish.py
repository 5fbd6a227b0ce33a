"""Atomic stage publishing: write under a hidden temporary directory, rename, then update the manifest.

A crash, a kill or an exception before ``commit`` leaves only a ``.tmp-*`` directory that no reader
looks at (and that the next run of the stage removes); the previously published output and manifest
are untouched. Re-running a stage whose fingerprint (params + upstream fingerprints + inputs) is
unchanged is a no-op unless forced.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
import uuid
from pathlib import Path
from types import TracebackType
from typing import Any

from glisp_core.dataset.layout import MANIFEST, DatasetVersion
from glisp_core.dataset.manifest import Manifest, StageRecord, _json_default, manifest_lock, now_iso
from glisp_core.errors import StageError


def fingerprint(*parts: Any) -> str:
    blob = json.dumps(parts, sort_keys=True, default=_json_default).encode()
    return hashlib.sha256(blob).hexdigest()


def file_fingerprints(paths: list[Path], mode: str = "content") -> list[dict[str, Any]]:
    """Per-file size and sha256 (mode "content") or size and mtime (mode "stat")."""
    out = []
    for p in sorted(paths):
        st = p.stat()
        rec: dict[str, Any] = {"path": str(p), "bytes": st.st_size}
        if mode == "content":
            h = hashlib.sha256()
            with open(p, "rb") as f:
                for block in iter(lambda: f.read(1 << 22), b""):
                    h.update(block)
            rec["sha256"] = h.hexdigest()
        else:
            rec["mtime_ns"] = st.st_mtime_ns
        out.append(rec)
    return out


def remove_stale_temps(parent: Path, name: str) -> None:
    """Remove ``.tmp-<name>-*`` left by runs that died; they were never published."""
    if parent.is_dir():
        for d in parent.glob(f".tmp-{name}-*"):
            shutil.rmtree(d, ignore_errors=True)


class StagePublisher:
    """Publish one stage of an existing dataset version.

    Usage::

        pub = StagePublisher(dv, "partition/adadne-p8", dv.partition("adadne-p8"), params, depends)
        if pub.is_current() and not force:
            return pub.record()
        with pub:                      # removes the temp dir if the body raises
            write_outputs(pub.tmp)
            pub.commit(counts=..., metrics=..., timings=...)
    """

    def __init__(
        self,
        dv: DatasetVersion,
        stage: str,
        target: Path,
        params: dict[str, Any],
        depends: list[str] | None = None,
        extra_inputs: Any = None,
    ) -> None:
        self.dv, self.stage, self.target, self.params = dv, stage, Path(target), params
        manifest = Manifest.read(dv.manifest_path)
        self.depends = {d: manifest.stage(d).fingerprint for d in (depends or [])}
        self.fingerprint = fingerprint(stage, params, self.depends, extra_inputs)
        self._tmp: Path | None = None
        self._t0 = time.perf_counter()

    def record(self) -> StageRecord | None:
        m = Manifest.read(self.dv.manifest_path)
        return m.stages.get(self.stage)

    def is_current(self) -> bool:
        rec = self.record()
        return rec is not None and rec.fingerprint == self.fingerprint and (self.dv.path / rec.path).exists()

    @property
    def tmp(self) -> Path:
        if self._tmp is None:
            parent = self.target.parent
            parent.mkdir(parents=True, exist_ok=True)
            remove_stale_temps(parent, self.target.name)
            self._tmp = parent / f".tmp-{self.target.name}-{uuid.uuid4().hex[:12]}"
            self._tmp.mkdir()
        return self._tmp

    def __enter__(self) -> StagePublisher:
        _ = self.tmp
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        if et is not None:
            self.abort()

    def abort(self) -> None:
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def commit(
        self,
        counts: dict[str, Any] | None = None,
        metrics: dict[str, Any] | None = None,
        timings: dict[str, float] | None = None,
        schema_update: dict[str, Any] | None = None,
    ) -> StageRecord:
        if self._tmp is None:
            raise StageError(f"stage {self.stage}: commit without output")
        timings = dict(timings or {})
        timings.setdefault("total_s", round(time.perf_counter() - self._t0, 3))
        rec = StageRecord(
            name=self.stage,
            path=str(self.target.relative_to(self.dv.path)),
            fingerprint=self.fingerprint,
            params=self.params,
            depends=self.depends,
            counts=counts or {},
            metrics=metrics or {},
            timings=timings,
            completed_at=now_iso(),
        )
        with manifest_lock(self.dv.path):
            old = None
            if self.target.exists():
                old = self.target.parent / f".old-{self.target.name}-{uuid.uuid4().hex[:12]}"
                os.rename(self.target, old)
            os.rename(self._tmp, self.target)
            self._tmp = None
            m = Manifest.read(self.dv.manifest_path)
            m.stages[self.stage] = rec
            if schema_update:
                m.schema.update(schema_update)
            m.write(self.dv.manifest_path)
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
        return rec


class VersionPublisher:
    """Create a new dataset version atomically (the ingest stage): the whole directory appears at once.

    The version is built under ``<root>/<graph>/.tmp-<version>-<id>/`` and renamed into place with
    its manifest inside; earlier versions are never touched. Forcing a re-ingest of an existing
    version id replaces that version only after the new one is complete.
    """

    def __init__(self, root: Path, graph: str, version: str) -> None:
        self.dv = DatasetVersion(Path(root), graph, version)
        gdir = self.dv.path.parent
        gdir.mkdir(parents=True, exist_ok=True)
        remove_stale_temps(gdir, version)
        self.tmp_dv = DatasetVersion(Path(root), graph, f".tmp-{version}-{uuid.uuid4().hex[:12]}")
        self.tmp_dv.path.mkdir()
        self._done = False

    def __enter__(self) -> VersionPublisher:
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        if not self._done:
            shutil.rmtree(self.tmp_dv.path, ignore_errors=True)

    def commit(self, manifest: Manifest) -> DatasetVersion:
        manifest.version = self.dv.version
        manifest.write(self.tmp_dv.path / MANIFEST)
        old = None
        if self.dv.path.exists():
            old = self.dv.path.parent / f".old-{self.dv.version}-{uuid.uuid4().hex[:12]}"
            os.rename(self.dv.path, old)
        os.rename(self.tmp_dv.path, self.dv.path)
        self._done = True
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        return self.dv
