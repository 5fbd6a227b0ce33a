"""Stage publishing without rename or flock: write an attempt, then create its record (docs/storage.md).

A stage writes its whole output under a new attempt prefix ``<stage>/@<attempt>/``, leased while it is
written; creating the stage's next record (one conditional create) publishes it. A crash, a kill or an
exception before that leaves only an attempt no record names, which the next run of the stage (or retention)
removes once its lease lapsed; the previously published output and record are untouched. Re-running a stage
whose fingerprint (params + upstream fingerprints + inputs) is unchanged is a no-op unless forced.
"""

from __future__ import annotations

import calendar
import functools
import hashlib
import json
import logging
import os
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from glisp_core.dataset.layout import DatasetVersion
from glisp_core.dataset.manifest import SCHEMA_VERSION, StageRecord, now_iso, read_manifest
from glisp_core.dataset.records import VERSION_FILE, create_record, current_record, current_records, json_default
from glisp_core.errors import StageError, chain
from glisp_core.storage.backend import NOT_ANSWERING
from glisp_core.storage.lease import DEFAULT_TTL_S, LeaseKeeper, is_live, read_lease
from glisp_core.storage.store import Store, store_for
from glisp_core.storage.uri import StoreURI


def up_to_date(stage: str, where: object = None) -> str:
    """The one line every stage prints when its record is current (nothing to run; no JVM was started for it)."""
    return f"{stage}: up to date{f' at {where}' if where else ''} (use --force to run it again)"


def fingerprint(*parts: Any) -> str:
    blob = json.dumps(parts, sort_keys=True, default=json_default).encode()
    return hashlib.sha256(blob).hexdigest()


def file_fingerprints(paths: Sequence[Path | StoreURI], mode: str = "content") -> list[dict[str, Any]]:
    """Per-file size and sha256 (mode "content") or size and mtime (mode "stat"); local files or store URIs."""
    out = []
    for p in sorted(paths, key=_input_order):
        if isinstance(p, StoreURI) and not p.is_local:
            out.append(_object_fingerprint(p, mode))
            continue
        p = Path(p)
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


def _input_order(p: Path | StoreURI) -> tuple[int, Any]:
    """Local files first, in Path order (as before URIs), then objects by URI."""
    return (1, p.qualified) if isinstance(p, StoreURI) and not p.is_local else (0, Path(p))


def _object_fingerprint(u: StoreURI, mode: str) -> dict[str, Any]:
    """``file_fingerprints`` of one object in a store: size and sha256 of its bytes, or size and mtime."""
    import pyarrow.fs as pafs

    store = store_for(u)
    info = store.fs.get_file_info(store.at(u))
    if info.type != pafs.FileType.File:
        raise FileNotFoundError(f"{u}: no such input file")
    rec: dict[str, Any] = {"path": u.qualified, "bytes": int(info.size)}
    if mode == "content":
        rec["sha256"] = store.digest(u)
    else:
        rec["mtime_ns"] = info.mtime_ns
    return rec


ATTEMPT = "@"  # attempt prefixes are "@<UTC time>-<12 hex>"
LEASE = "_lease.json"  # inside an attempt while its writer lives
RUNNING = "_running"  # <version>/_running/<stage>.json: the claim of the run doing a stage now
COMMIT_TRIES = 20


def new_attempt() -> str:
    return f"{ATTEMPT}{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{uuid.uuid4().hex[:12]}"


def _age_s(name: str) -> float:
    """Seconds since the attempt ``name`` (``@YYYYmmddTHHMMSS-hex``) was started; infinite when unreadable."""
    t = name[len(ATTEMPT) : len(ATTEMPT) + 15]
    if len(t) != 15 or t[8] != "T" or not (t[:8] + t[9:]).isdigit():
        return float("inf")
    fields = (int(t[0:4]), int(t[4:6]), int(t[6:8]), int(t[9:11]), int(t[11:13]), int(t[13:15]), 0, 0, 0)
    return time.time() - calendar.timegm(fields)


class Attempt:
    """One attempt prefix of one stage, leased by this process while it writes there."""

    def __init__(self, store: Store, stage_dir: StoreURI, holder: str) -> None:
        store.check_publishable(stage_dir)  # before any output is written, not at the record
        self.store, self.uri = store, stage_dir / new_attempt()
        self.lease = LeaseKeeper(store, self.uri / LEASE, holder)
        self.published = False  # a record names it: from then on it is never removed from here
        if self.uri.is_local:
            self._appear_leased()
        else:
            self.lease.write()  # the attempt's first object: it appears with its lease
        self.lease.start()

    def _appear_leased(self) -> None:
        """On a disk, the attempt's directory appears by one rename with its lease inside: a writer killed
        while writing its lease leaves a hidden staging directory (swept once old), never an attempt that a
        later run must leave alone because it is too young to hold its lease yet."""
        staging = self.uri.parent / f".{self.uri.name}"
        for _ in range(3):  # an aborting writer may remove the empty stage directory as we create it
            try:
                os.makedirs(staging.path, exist_ok=True)
                self.store.write_bytes(staging / LEASE, self.lease.doc_bytes())
                os.rename(staging.path, self.uri.path)
                return
            except FileNotFoundError:
                continue
        raise StageError(f"{self.uri}: could not create the attempt (its stage directory kept vanishing)")

    def still_ours(self) -> bool:
        """The lease object is still there: nobody removed the attempt while we wrote it."""
        return self.lease.held()

    def finish(self) -> None:
        """A record names the attempt now: stop renewing and drop the lease.

        Not before: until the record exists, the lease is what tells a run of the stage starting meanwhile
        (which removes attempts no record names) that this one is about to be published.
        """
        self.lease.release()

    def discard(self, up_to: StoreURI | None = None, failure: BaseException | None = None) -> None:
        """Remove the attempt (once a record names it, only its lease), and the directories above it up to
        ``up_to`` that it leaves empty on a disk (object stores have no directories to leave behind).

        Where ``failure`` (what ended the writer) is the store not answering, nothing is asked of it: each call
        would wait the store's limits again (minutes with the defaults) before failing the same way. The
        attempt stays with its lease; the next run of the stage removes it (its holder is gone)."""
        if not self.published and stalled(failure):
            self.lease.stop(wait=False)
            log.warning("left %s for the next run to remove: the store did not answer", self.uri)
            return
        if self.published:
            self.lease.release()
            return
        self.lease.stop()
        self.store.delete(self.uri)
        d = self.uri.parent
        while self.uri.is_local and up_to is not None and d.path.startswith(up_to.path.rstrip("/") + "/"):
            try:
                os.rmdir(d.path)
            except OSError:
                break
            d = d.parent


log = logging.getLogger("glisp.publish")


def stalled(failure: BaseException | None) -> bool:
    """``failure`` is the store not answering within its limits: a :class:`StoreUnavailable` of a call of the
    driver's, or of a task's, whose words a Spark failure's text carries (a timeout of anything else is not)."""
    return any(NOT_ANSWERING in str(e) for e in chain(failure))


def remove_abandoned(
    store: Store, stage_dir: StoreURI, keep: set[str], named: Callable[[], set[str]] | None = None
) -> list[StoreURI]:
    """Remove the attempts under ``stage_dir`` that no record keeps and whose writer is gone; returns them.

    An attempt is abandoned when its lease lapsed (or its holder's process died on this host), or when it has
    no lease and is not named in ``keep`` (the attempt of the current record): its writer crashed without
    publishing it, or it was superseded. A live writer's attempt is never touched, nor one too young to hold
    its lease yet (on a local disk its directory exists an instant before the lease object does).

    ``named`` gives the attempts the current record names *now*: a writer drops its lease only after its
    record exists, so what lost its lease while this listed may have just been published. It is asked once
    the leases are read, and what it names is kept too.
    """
    candidates = []
    for name in store.names(stage_dir):
        if name.startswith("." + ATTEMPT) and _age_s(name[1:]) >= DEFAULT_TTL_S:
            store.delete(stage_dir / name)  # a writer killed before its attempt appeared (Attempt._appear_leased)
            continue
        if not name.startswith(ATTEMPT) or name in keep:
            continue
        doc = read_lease(store, stage_dir / name / LEASE)
        if is_live(doc) or (doc is None and _age_s(name) < DEFAULT_TTL_S):
            continue
        candidates.append(name)
    if candidates and named is not None:
        keep = keep | named()
    removed = []
    for name in candidates:
        if name not in keep:
            store.delete(stage_dir / name)
            removed.append(stage_dir / name)
    return removed


def remove_abandoned_in(dv: DatasetVersion) -> list[StoreURI]:
    """:func:`remove_abandoned` for every stage of a published version (what retention sweeps), and the lapsed
    lease a writer killed between its record and its lease release left inside a published attempt."""
    removed = []
    store = dv.store
    for stage in current_records(store, dv.path):
        named = functools.partial(_named, store, dv.path, stage)
        removed += remove_abandoned(store, dv.stage_dir(stage), named(), named)
        for name in named():
            stale = dv.stage_dir(stage) / name / LEASE
            if store.exists(stale) and not is_live(read_lease(store, stale)):
                store.delete(stale)
    return removed


def _named(store: Store, version: StoreURI, stage: str) -> set[str]:
    """The attempt the stage's current record names (empty when it never published)."""
    cur = current_record(store, version, stage)
    return {str(cur[1]["path"]).rsplit("/", 1)[-1]} if cur else set()


def _publish_record(store: Store, version: StoreURI, rec: StageRecord) -> tuple[StageRecord, str | None]:
    """Create ``rec`` as the stage's next record; (the record now current, the attempt it superseded).

    When a concurrent run of the stage publishes first, ours goes after it, unless theirs has the same
    fingerprint: then theirs stands and ours is the one superseded.
    """
    doc = json.loads(json.dumps(rec.__dict__, default=json_default))
    cur = current_record(store, version, rec.name)
    for _ in range(COMMIT_TRIES):
        if create_record(store, version, rec.name, (cur[0] if cur else 0) + 1, doc):
            return rec, (str(cur[1]["path"]) if cur else None)
        cur = current_record(store, version, rec.name)
        if cur and cur[1].get("fingerprint") == rec.fingerprint:
            return StageRecord.from_dict(cur[1]), rec.path
    raise StageError(f"stage {rec.name}: {COMMIT_TRIES} concurrent publishers in a row; re-run it")


def claim_run(
    store: Store, uri: StoreURI, holder: str, fp: str, done: Callable[[], bool], poll_s: float = 1.0
) -> tuple[bool, LeaseKeeper | None]:
    """(whether to do the work, the claim held meanwhile) of a run with fingerprint ``fp`` whose claim is
    the lease ``uri``. An identical run holding it is waited for; when it has published (``done()``), there
    is nothing to do; when it died, the claim is taken over. A run with another fingerprint does not wait."""
    while True:
        keeper = LeaseKeeper(store, uri, holder, fingerprint=fp)
        if keeper.write(create=True):
            return True, keeper.start()
        doc = read_lease(store, uri)
        if not is_live(doc):
            store.delete(uri)  # its holder died: create_exclusive decides who claims it next
            continue
        assert doc is not None
        if doc.get("fingerprint") != fp:
            return True, None
        print(
            f"{holder}: an identical run is in progress ({doc.get('holder')} on {doc.get('host')}, pid "
            f"{doc.get('pid')}); waiting for it instead of doing the work twice",
            flush=True,
        )
        while is_live(read_lease(store, uri)):
            time.sleep(poll_s)
        if done():
            return False, None


def release_claim(keeper: LeaseKeeper) -> None:
    """Drop a claim taken by :func:`claim_run`, and its directory when that leaves it empty on a disk."""
    keeper.release()
    if keeper.uri.is_local:
        try:
            os.rmdir(keeper.uri.parent.local)
        except OSError:
            pass  # another claim is in it, or it is gone already


class StagePublisher:
    """Publish one stage of an existing dataset version.

    Usage::

        pub = StagePublisher(dv, "partition/adadne-p8", params, depends)
        if pub.is_current() and not force:
            return pub.record()
        with pub:                      # removes the attempt if the body raises
            write_outputs(pub.tmp)
            pub.commit(counts=..., metrics=..., timings=...)
    """

    def __init__(
        self,
        dv: DatasetVersion,
        stage: str,
        params: dict[str, Any],
        depends: list[str] | None = None,
        extra_inputs: Any = None,
    ) -> None:
        self.dv, self.stage, self.params = dv, stage, params
        manifest = read_manifest(dv)
        self.depends = {d: manifest.stage(d).fingerprint for d in (depends or [])}
        self.fingerprint = fingerprint(stage, params, self.depends, extra_inputs)
        self._attempt: Attempt | None = None
        self._claim: LeaseKeeper | None = None  # held from claim() until commit or abort
        self._t0 = time.perf_counter()

    def claim(self, poll_s: float = 1.0) -> bool:
        """Claim this run of the stage before doing its work: True when this process does it (the claim is
        held until commit or abort); False when an identical run (same fingerprint) held it and published
        while this one waited, so there is nothing to redo. A run of the stage with other parameters does
        not wait (it publishes a record of its own, as before)."""
        uri = self.dv.path / RUNNING / f"{self.stage.replace('/', '--')}.json"
        run, self._claim = claim_run(
            self.dv.store, uri, f"glisp {self.stage}", self.fingerprint, self.is_current, poll_s
        )
        return run

    def _release_claim(self) -> None:
        if self._claim is not None:
            release_claim(self._claim)
            self._claim = None

    def record(self) -> StageRecord | None:
        cur = current_record(self.dv.store, self.dv.path, self.stage)
        return StageRecord.from_dict(cur[1]) if cur else None

    def is_current(self) -> bool:
        """Published with this fingerprint, and the output the record names is there."""
        rec = self.record()
        return rec is not None and rec.fingerprint == self.fingerprint and self.dv.store.exists(self.dv.path / rec.path)

    @property
    def tmp(self) -> StoreURI:
        """This run's attempt prefix (created, and leased, on first use)."""
        if self._attempt is None:
            store, sdir = self.dv.store, self.dv.stage_dir(self.stage)
            rec = self.record()
            keep = {rec.path.rsplit("/", 1)[-1]} if rec else set()
            remove_abandoned(store, sdir, keep, named=lambda: _named(store, self.dv.path, self.stage))
            self._attempt = Attempt(store, sdir, f"{self.stage} of {self.dv.graph}/{self.dv.version}")
        return self._attempt.uri

    def __enter__(self) -> StagePublisher:
        _ = self.tmp
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        if et is not None:
            self.abort(e)

    def abort(self, failure: BaseException | None = None) -> None:
        """Remove the attempt and drop the claim; where ``failure`` is the store not answering, leave both (the
        next run removes them, their holder gone) rather than wait on the store again."""
        if self._attempt is not None:
            self._attempt.discard(up_to=self.dv.path, failure=failure)
            self._attempt = None
        if stalled(failure) and self._claim is not None:
            self._claim.stop(wait=False)
            self._claim = None
        self._release_claim()

    def commit(
        self,
        counts: dict[str, Any] | None = None,
        metrics: dict[str, Any] | None = None,
        timings: dict[str, float] | None = None,
    ) -> StageRecord:
        att = self._attempt
        if att is None:
            raise StageError(f"stage {self.stage}: commit without output")
        if not att.still_ours():
            self.abort()
            raise StageError(
                f"stage {self.stage}: its attempt {att.uri} was removed while the stage ran "
                "(by another process?); nothing was published, re-run the stage"
            )
        timings = dict(timings or {})
        timings.setdefault("total_s", round(time.perf_counter() - self._t0, 3))
        rec = StageRecord(
            name=self.stage,
            path=att.uri.relative_to(self.dv.path),
            fingerprint=self.fingerprint,
            params=self.params,
            depends=self.depends,
            counts=counts or {},
            metrics=metrics or {},
            timings=timings,
            completed_at=now_iso(),
        )
        now = _commit(self.dv, att, rec)[0]
        self._attempt = None  # published (or superseded and gone): nothing left for abort to remove
        self._release_claim()  # after the record: a waiting identical run finds it published
        return now


def _commit(
    dv: DatasetVersion, att: Attempt, rec: StageRecord, published: Callable[[], None] | None = None
) -> tuple[StageRecord, bool]:
    """Publish ``rec`` naming ``att``, call ``published``, drop the lease, remove what the record superseded.

    Returns (the current record, whether it is ours). The attempt stays leased until its record exists (see
    :meth:`Attempt.finish`). When a concurrent run published the same fingerprint first, ours is removed.
    """
    now, old = _publish_record(dv.store, dv.path, rec)
    if now.path != rec.path:
        att.discard()
        return now, False
    att.published = True
    try:
        if published is not None:
            published()
    finally:
        att.finish()
    if old is not None and old != now.path:
        dv.store.delete(dv.path / old)
    return now, True


class VersionPublisher:
    """Create a dataset version (the ingest stage): the version appears whole, with its ingest record.

    Ingest writes under ``<version>/ingest/@<attempt>/`` (``tmp_dv`` resolves the ingest outputs there), then
    :meth:`commit` creates the ingest record and ``_version.json``. Earlier versions are never touched.
    Forcing a re-ingest of an existing version id publishes a newer ingest record; the version's later
    stages then no longer match it and re-run.
    """

    def __init__(self, root: str | os.PathLike[str] | StoreURI, graph: str, version: str) -> None:
        self.dv = DatasetVersion(root, graph, version)
        store = self.dv.store
        if not store.exists(self.dv.manifest_path):
            remove_unpublished(store, self.dv.path)
        sdir = self.dv.stage_dir("ingest")
        keep = _named(store, self.dv.path, "ingest")
        remove_abandoned(store, sdir, keep, named=lambda: _named(store, self.dv.path, "ingest"))
        self._attempt: Attempt | None = Attempt(store, sdir, f"ingest of {graph}/{version}")
        self.tmp_dv = self.dv.pin("ingest", self._attempt.uri.relative_to(self.dv.path))
        self._done = False

    def __enter__(self) -> VersionPublisher:
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        if not self._done and self._attempt is not None:
            self._attempt.discard(up_to=self.dv.path.parent, failure=e)
            self._attempt = None

    def commit(self, manifest: Any) -> DatasetVersion:
        att = self._attempt
        if att is None or not att.still_ours():
            raise StageError(
                f"ingest of {self.dv.graph}/{self.dv.version}: its attempt was removed while it ran "
                "(by another process?); nothing was published, re-run it"
            )
        rec = manifest.stages["ingest"]
        rec.path = att.uri.relative_to(self.dv.path)
        rec.schema, rec.inputs = dict(manifest.schema), list(manifest.inputs)
        head = {
            "graph": self.dv.graph,
            "version": self.dv.version,
            "schema_version": SCHEMA_VERSION,
            "created_at": manifest.created_at or now_iso(),
            "created_ns": time.time_ns(),
        }

        def create_version() -> None:  # while the attempt is still leased: see remove_unpublished
            self.dv.store.create_exclusive(self.dv.manifest_path, json.dumps(head, indent=2).encode())

        _, ours = _commit(self.dv, att, rec, published=create_version)
        if not ours:  # the same ingest was published by a concurrent run; the version exists all the same
            create_version()
        self._done = True
        self._attempt = None
        return self.dv


def remove_unpublished(store: Store, vdir: StoreURI) -> bool:
    """A version prefix without ``_version.json`` is a crashed first ingest: remove it unless someone writes it.
    True when it was removed.

    The leases are read before ``_version.json`` is looked for: an ingest creates ``_version.json`` before it
    drops its lease, so one that finished meanwhile is seen either way.
    """
    if not store.exists(vdir):
        return False
    for stage_dir in [vdir / "ingest"]:
        for name in store.names(stage_dir):
            if name.startswith(ATTEMPT) and is_live(read_lease(store, stage_dir / name / LEASE)):
                return False
    if store.exists(vdir / VERSION_FILE):
        return False
    store.delete(vdir)
    return True
