"""Atomic stage publishing: write under a hidden temporary directory, rename, then update the manifest.

A crash, a kill or an exception before ``commit`` leaves only a ``.tmp-*`` directory that no reader
looks at (and that the next run of the stage removes); the previously published output and manifest
are untouched. Re-running a stage whose fingerprint (params + upstream fingerprints + inputs) is
unchanged is a no-op unless forced.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import time
import uuid
from pathlib import Path
from types import TracebackType
from typing import Any

from glisp_core.dataset.layout import MANIFEST, DatasetVersion
from glisp_core.dataset.manifest import (
    Manifest,
    StageRecord,
    _json_default,
    manifest_lock,
    now_iso,
    read_stamp,
    write_stamp,
)
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


LEASE = ".lease"  # inside a staging directory: flock-held by the run that writes it
TMP_SEP = "~"  # never in a stage, run or version name, so ".tmp-a-p8~..." cannot match run "a-p8-seed2"
STALE_UNLEASED_S = 60.0  # a staging directory without a lease is a run's first instant, or a crash
_ID = r"[0-9a-f]{12}"


def _staging_pattern(kind: str, name: str) -> re.Pattern[str]:
    """``.tmp-<name>~<id>`` (and the pre-lease form ``.tmp-<name>-<id>``) for exactly this ``name``."""
    return re.compile(rf"^\.{kind}-{re.escape(name)}(?:{TMP_SEP}|-){_ID}$")


class Lease:
    """An exclusive advisory lock on ``<dir>/.lease``, held while this process writes ``dir``.

    The kernel drops it when the holder dies, however it dies, so a crashed run cannot keep its staging
    directory alive: the next run takes the lock and removes the leftovers. A live run's directory is
    never touched, whatever its name.
    """

    def __init__(self, directory: Path) -> None:
        self.path = directory / LEASE
        self._fd: int | None = os.open(self.path, os.O_CREAT | os.O_RDWR, 0o644)
        fcntl.flock(self._fd, fcntl.LOCK_EX)

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _is_abandoned(d: Path) -> bool:
    """True when nobody holds ``d``'s lease (its writer died), or it has none and is not brand new."""
    lease = d / LEASE
    try:
        fd = os.open(lease, os.O_RDWR)
    except FileNotFoundError:
        try:
            return time.time() - d.stat().st_mtime > STALE_UNLEASED_S
        except FileNotFoundError:
            return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def remove_stale_temps(parent: Path, name: str) -> list[Path]:
    """Remove the staging directories of ``name`` whose writer died (never published); returns them.

    Only exact ``.tmp-<name>~<id>`` names count, and only when their lease is free: a concurrent run of
    ``name`` (or of a run whose name merely starts with ``name``) keeps its staging directory.
    """
    removed = []
    if parent.is_dir():
        pat = _staging_pattern("tmp", name)
        for d in parent.iterdir():
            if pat.match(d.name) and d.is_dir() and _is_abandoned(d):
                shutil.rmtree(d, ignore_errors=True)
                removed.append(d)
    return removed


def restore_interrupted(target: Path) -> Path | None:
    """Put back the published output that an interrupted replacement renamed away; returns it.

    A replacement renames the old output to ``.old-<name>~<id>``, renames the new one in, updates the
    manifest and only then deletes the old one. When a crash hit between the two renames, ``target``
    is missing and the manifest still describes the old output: renaming it back restores exactly
    what was published.
    """
    if target.exists() or not target.parent.is_dir():
        return None
    pat = _staging_pattern("old", target.name)
    olds = sorted((d for d in target.parent.iterdir() if pat.match(d.name)), key=lambda d: d.stat().st_mtime)
    if not olds:
        return None
    os.rename(olds[-1], target)
    return target


def restore_all_interrupted(parent: Path) -> list[Path]:
    """:func:`restore_interrupted` for every output under ``parent`` that has an ``.old-*`` and no original."""
    if not parent.is_dir():
        return []
    names = {m.group(1) for d in parent.iterdir() if (m := re.match(rf"^\.old-(.+)(?:{TMP_SEP}|-){_ID}$", d.name))}
    return [t for t in (restore_interrupted(parent / n) for n in sorted(names)) if t is not None]


def new_staging(parent: Path, name: str, kind: str = "tmp") -> Path:
    return parent / f".{kind}-{name}{TMP_SEP}{uuid.uuid4().hex[:12]}"


class StagePublisher:
    """Publish one stage of an existing dataset version.

    Usage::

        pub = StagePublisher(dv, "partition/adadne-p8", dv.partition("adadne-p8"), params, depends)
        if pub.is_current() and not force:
            return pub.record()
        with pub:                      # removes the temp dir if the body raises
            write_outputs(pub.tmp)
            pub.commit(counts=..., metrics=..., timings=...)

    The staging directory ``.tmp-<name>~<id>`` is leased (see :class:`Lease`) for as long as this
    object writes it. ``commit`` stamps the output with the record's fingerprint, so an output and a
    manifest record that do not belong together (a crash between the rename and the manifest update)
    are refused by :meth:`Manifest.stage` instead of being read, and the next run of the stage puts
    the published output back (:func:`restore_interrupted`).
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
        self._recover()
        manifest = Manifest.read(dv.manifest_path)
        self.depends = {d: manifest.stage(d).fingerprint for d in (depends or [])}
        self.fingerprint = fingerprint(stage, params, self.depends, extra_inputs)
        self._tmp: Path | None = None
        self._lease: Lease | None = None
        self._t0 = time.perf_counter()

    def _recover(self) -> None:
        """Undo a replacement of this stage's output that a crash interrupted (see the class docstring)."""
        if not self.target.parent.is_dir():
            return
        with manifest_lock(self.dv.path):
            rec = Manifest.read(self.dv.manifest_path).stages.get(self.stage)
            if rec is None:
                return
            if self.target.exists() and read_stamp(self.target) not in (None, rec.fingerprint):
                pat = _staging_pattern("old", self.target.name)
                olds = [d for d in self.target.parent.iterdir() if pat.match(d.name)]
                if any(read_stamp(d) == rec.fingerprint for d in olds):
                    shutil.rmtree(self.target)  # never published: the manifest does not describe it
            restore_interrupted(self.target)

    def record(self) -> StageRecord | None:
        m = Manifest.read(self.dv.manifest_path)
        return m.stages.get(self.stage)

    def is_current(self) -> bool:
        """Published with this fingerprint, and the output on disk is the one the record describes."""
        rec = self.record()
        return (
            rec is not None
            and rec.fingerprint == self.fingerprint
            and (self.dv.path / rec.path).exists()
            and read_stamp(self.dv.path / rec.path) in (None, rec.fingerprint)
        )

    @property
    def tmp(self) -> Path:
        if self._tmp is None:
            parent = self.target.parent
            parent.mkdir(parents=True, exist_ok=True)
            remove_stale_temps(parent, self.target.name)
            tmp = new_staging(parent, self.target.name)
            tmp.mkdir()
            self._lease = Lease(tmp)
            self._tmp = tmp
        return self._tmp

    def __enter__(self) -> StagePublisher:
        _ = self.tmp
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        if et is not None:
            self.abort()

    def _release(self) -> None:
        if self._lease is not None:
            self._lease.release()
            self._lease = None

    def abort(self) -> None:
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None
        self._release()

    def commit(
        self,
        counts: dict[str, Any] | None = None,
        metrics: dict[str, Any] | None = None,
        timings: dict[str, float] | None = None,
        schema_update: dict[str, Any] | None = None,
    ) -> StageRecord:
        if self._tmp is None:
            raise StageError(f"stage {self.stage}: commit without output")
        if not (self._tmp / LEASE).exists():
            self.abort()
            raise StageError(
                f"stage {self.stage}: its staging directory was removed while the stage ran "
                "(by another process?); nothing was published, re-run the stage"
            )
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
            write_stamp(self._tmp, self.stage, self.fingerprint)
            (self._tmp / LEASE).unlink()
            old = None
            if self.target.exists():
                old = new_staging(self.target.parent, self.target.name, "old")
                os.rename(self.target, old)
            os.rename(self._tmp, self.target)
            self._tmp = None
            self._release()
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

    The version is built under ``<root>/<graph>/.tmp-<version>~<id>/`` (leased while it is written)
    and renamed into place with its manifest inside; earlier versions are never touched. Forcing a
    re-ingest of an existing version id replaces that version only after the new one is complete; a
    crash between the two renames of that replacement is undone by the next run.
    """

    def __init__(self, root: Path, graph: str, version: str) -> None:
        self.dv = DatasetVersion(Path(root), graph, version)
        gdir = self.dv.path.parent
        gdir.mkdir(parents=True, exist_ok=True)
        restore_all_interrupted(gdir)
        remove_stale_temps(gdir, version)
        tmp = new_staging(gdir, version)
        tmp.mkdir()
        self._lease: Lease | None = Lease(tmp)
        self.tmp_dv = DatasetVersion(Path(root), graph, tmp.name)
        self._done = False

    def __enter__(self) -> VersionPublisher:
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        if not self._done:
            shutil.rmtree(self.tmp_dv.path, ignore_errors=True)
        self._release()

    def _release(self) -> None:
        if self._lease is not None:
            self._lease.release()
            self._lease = None

    def commit(self, manifest: Manifest) -> DatasetVersion:
        if not (self.tmp_dv.path / LEASE).exists():
            raise StageError(
                f"ingest of {self.dv.graph}/{self.dv.version}: its staging directory was removed while it ran "
                "(by another process?); nothing was published, re-run it"
            )
        manifest.version = self.dv.version
        manifest.write(self.tmp_dv.path / MANIFEST)
        (self.tmp_dv.path / LEASE).unlink()
        old = None
        if self.dv.path.exists():
            old = new_staging(self.dv.path.parent, self.dv.version, "old")
            os.rename(self.dv.path, old)
        os.rename(self.tmp_dv.path, self.dv.path)
        self._done = True
        self._release()
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        return self.dv
