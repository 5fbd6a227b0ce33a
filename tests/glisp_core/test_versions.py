"""Versions over time, on a local root and on a real S3-API server: LATEST, readers' leases, retention and
the one-run-per-graph lock (no Spark)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from glisp_core.dataset.layout import DatasetVersion, list_versions, resolve_dataset
from glisp_core.dataset.records import VERSION_FILE
from glisp_core.dataset.versions import (
    LEASES,
    LOCKS,
    GraphLock,
    VersionLease,
    active_leases,
    apply_retention,
    read_latest,
    set_latest,
)
from glisp_core.errors import StageError
from glisp_core.storage.lease import lease_doc
from glisp_core.storage.store import Store
from glisp_core.storage.uri import StoreURI
from glisp_testing.graphs import write_dataset

REPO = str(Path(__file__).resolve().parents[2])


def _versions(root: StoreURI, n: int) -> list[DatasetVersion]:
    """v0 .. v<n-1>, published in that order (v0 the oldest)."""
    return [write_dataset(root, "g", np.array([0, i]), np.array([1, 2]), version=f"v{i}") for i in range(n)]


def _holder(code: str) -> subprocess.Popen:
    """A process running ``code`` (which prints 'ready' once it holds what it holds), started and waited for."""
    proc = subprocess.Popen(
        [sys.executable, "-c", f"import sys, time\nsys.path.insert(0, {REPO!r})\n{code}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    assert line == "ready", (line, proc.stderr.read() if proc.stderr else "")
    return proc


def _sigkill(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    for f in (proc.stdout, proc.stderr):
        if f is not None:
            f.close()


def _dead_pid() -> int:
    p = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(p.stdout)


# ---- LATEST -------------------------------------------------------------------------------------


def test_latest_moves_whole_and_graph_names_resolve_to_it(any_root: StoreURI) -> None:
    v0, v1, v2 = _versions(any_root, 3)
    gdir = any_root / "g"
    store = v0.store
    assert read_latest(gdir) is None and resolve_dataset("g", any_root) == v2  # no LATEST yet: the newest
    set_latest(v1)
    assert read_latest(gdir) == "v1" and store.read_bytes(gdir / "LATEST") == b"v1\n"
    for spec in ("g", "g/latest", gdir.qualified, (gdir / "latest").qualified):
        assert resolve_dataset(spec, any_root) == v1, spec
    # flipped back and forth while readers look: each read sees one name whole
    seen: list[bytes] = []
    done = threading.Event()

    def reader() -> None:
        while not done.is_set():
            seen.append(store.read_bytes(gdir / "LATEST"))
            seen.append((read_latest(gdir) or "").encode() + b"\n")

    t = threading.Thread(target=reader)
    t.start()
    try:
        for i in range(30):
            set_latest(v0 if i % 2 == 0 else v2)
    finally:
        done.set()
        t.join()
    assert seen and set(seen) <= {b"v0\n", b"v2\n", b"v1\n"}, set(seen)
    assert read_latest(gdir) == "v2"
    assert sorted(store.names(gdir)) == ["LATEST", "v0", "v1", "v2"]  # no temporary object beside it
    with pytest.raises(StageError, match="not a published version"):
        set_latest(DatasetVersion(any_root, "g", "v9"))
    assert read_latest(gdir) == "v2"
    store.write_bytes(gdir / "LATEST", b"gone\n")  # names a version that no longer exists
    assert read_latest(gdir) is None and resolve_dataset("g", any_root) == v2


# ---- leases -------------------------------------------------------------------------------------


def test_leases_lapse_when_the_holder_stops_renewing(any_root: StoreURI) -> None:
    (v0,) = _versions(any_root, 1)
    lease = VersionLease(v0, "trainer", ttl_s=1.0).acquire()
    try:
        time.sleep(1.6)  # past the time to live: renewal (every third of it) keeps it
        assert [r["holder"] for r in active_leases(v0)] == ["trainer"]
        lease.stop()  # a holder that hangs: the object stays, its expiry passes
        time.sleep(1.2)
        assert active_leases(v0) == [] and len(v0.store.names(v0.path / LEASES)) == 1
    finally:
        lease.release()
    assert v0.store.names(v0.path / LEASES) == []
    with VersionLease(v0, "server", ttl_s=60):
        assert [r["holder"] for r in active_leases(v0)] == ["server"]
    assert active_leases(v0) == []  # released on exit


def test_leases_lapse_when_the_holder_dies(any_root: StoreURI) -> None:
    (v0,) = _versions(any_root, 1)
    code = (
        "from glisp_core.dataset.layout import DatasetVersion\n"
        "from glisp_core.dataset.versions import VersionLease\n"
        f"with VersionLease(DatasetVersion({any_root.qualified!r}, 'g', 'v0'), 'crashed trainer', ttl_s=600):\n"
        "    print('ready', flush=True); time.sleep(600)\n"
    )
    proc = _holder(code)
    try:
        (doc,) = active_leases(v0)
        assert doc["holder"] == "crashed trainer" and doc["pid"] == proc.pid
    finally:
        _sigkill(proc)
    assert len(v0.store.names(v0.path / LEASES)) == 1  # its object is still there, unexpired for 10 minutes
    assert active_leases(v0) == []  # but its process on this host is gone
    # written by hand: on another host (alive as far as we know) until it expires
    leases = v0.path / LEASES
    v0.store.write_bytes(leases / "a.json", json.dumps({**lease_doc("old server", -1), "host": "elsewhere"}).encode())
    v0.store.write_bytes(leases / "b.json", json.dumps({**lease_doc("far server", 600), "host": "elsewhere"}).encode())
    v0.store.write_bytes(leases / "c.json", b"{half writ")
    assert [r["holder"] for r in active_leases(v0)] == ["far server"]


# ---- retention ----------------------------------------------------------------------------------


def test_retention_keeps_latest_and_leased_versions(any_root: StoreURI) -> None:
    v0, v1, v2, v3, v4 = _versions(any_root, 5)
    set_latest(v1)  # an operator pinned latest back to v1
    dead = {**lease_doc("killed server", 600), "pid": _dead_pid()}
    v3.store.write_bytes(v3.path / LEASES / "dead.json", json.dumps(dead).encode())  # v3 is kept for its age
    v2.store.write_bytes(v2.path / LEASES / "dead.json", json.dumps(dead).encode())  # this one protects nothing
    lines: list[str] = []
    with VersionLease(v0, "serve partition 0"):
        removed = apply_retention(any_root, "g", keep=2, log=lines.append)
    assert removed == ["v2"]
    assert list_versions(any_root, "g") == ["v0", "v1", "v3", "v4"]
    assert list(v2.store.files(v2.path)) == []  # all of it, not just its _version.json
    assert any("keeping g/v0, leased by serve partition 0" in x for x in lines)
    assert any("removed g/v2" in x for x in lines)
    assert resolve_dataset("g", any_root) == v1
    assert apply_retention(any_root, "g", keep=2) == ["v0"]  # the lease is gone
    assert apply_retention(any_root, "g", keep=2) == []  # v1 is LATEST's, v3 and v4 the newest
    assert apply_retention(any_root, "g", keep=0) == []  # 0 keeps everything
    assert list_versions(any_root, "g") == ["v1", "v3", "v4"]
    for v in (v1, v3, v4):
        assert v.store.read_table(v.edges).num_rows == 2


def test_retention_hides_a_version_before_removing_it(any_root: StoreURI, monkeypatch: pytest.MonkeyPatch) -> None:
    """``_version.json`` goes first: a retention killed half way leaves no half version to resolve."""
    v0, v1, v2 = _versions(any_root, 3)
    real_delete = Store.delete
    deleted: list[str] = []

    def delete_then_die(self: Store, uri: StoreURI | str) -> None:
        deleted.append(str(uri))
        if str(uri) == str(v0.path):
            raise OSError("killed while removing the version's data")
        real_delete(self, uri)

    monkeypatch.setattr(Store, "delete", delete_then_die)
    with pytest.raises(OSError, match="killed"):
        apply_retention(any_root, "g", keep=2)
    monkeypatch.setattr(Store, "delete", real_delete)
    assert deleted == [str(v0.path / VERSION_FILE), str(v0.path)]
    assert v0.store.exists(v0.path / "_records")  # its data is still there ...
    assert list_versions(any_root, "g") == ["v1", "v2"]  # ... but it is no version any more
    with pytest.raises(StageError, match="no published version"):
        resolve_dataset("g/v0", any_root)


# ---- the refresh lock ---------------------------------------------------------------------------


def _lock_holder(root: StoreURI, graph: str = "g") -> subprocess.Popen:
    code = (
        "from glisp_core.dataset.versions import GraphLock\n"
        f"with GraphLock({root.qualified!r}, {graph!r}):\n"
        "    print('ready', flush=True); time.sleep(600)\n"
    )
    return _holder(code)


def test_one_pipeline_run_per_graph(any_root: StoreURI) -> None:
    holder = _lock_holder(any_root)
    try:
        host = os.uname().nodename
        t0 = time.monotonic()
        with pytest.raises(StageError, match=rf"another pipeline run holds .*\(pid {holder.pid} on {re.escape(host)}"):
            with GraphLock(any_root, "g"):
                pass
        assert time.monotonic() - t0 < 30  # at once: not after the lock's lease lapsed (a loaded store is slow)
        with GraphLock(any_root, "other"):  # other graphs are independent
            pass
    finally:
        _sigkill(holder)
    t0 = time.monotonic()
    with GraphLock(any_root, "g"):  # its holder died on this host: taken over at once
        assert time.monotonic() - t0 < 30  # not after its lease lapsed (6.8 s seen on Azurite under load)
        with pytest.raises(StageError, match=rf"\(pid {os.getpid()} on"):
            with GraphLock(any_root, "g"):  # ... and held by us now
                pass
    with GraphLock(any_root, "g"):  # released on exit
        pass
    store = Store(any_root)
    assert len(store.names(any_root / "g" / LOCKS)) <= 1  # older generations are removed


def test_a_lock_from_another_host_counts_until_it_expires(any_root: StoreURI) -> None:
    store = Store(any_root)
    locks = any_root / "g" / LOCKS
    far = {**lease_doc("glisp pipeline", 600, since=time.time()), "host": "build-7", "pid": 4242}
    store.write_bytes(locks / "000000000005.json", json.dumps(far).encode())
    with pytest.raises(StageError, match=r"pid 4242 on build-7"):
        with GraphLock(any_root, "g"):
            pass
    expired = {**far, "expires_at": time.time() - 1}
    store.write_bytes(locks / "000000000005.json", json.dumps(expired).encode())
    with GraphLock(any_root, "g"):
        names = store.names(locks)
        assert names == ["000000000006.json"], names  # the next generation; the lapsed one is gone
        assert json.loads(store.read_bytes(locks / names[0]))["pid"] == os.getpid()


def test_lock_takers_racing_have_one_winner(any_root: StoreURI) -> None:
    start = threading.Barrier(4)
    won: list[int] = []
    refused: list[str] = []
    release = threading.Event()

    def take(i: int) -> None:
        start.wait()
        try:
            with GraphLock(any_root, "g"):
                won.append(i)
                release.wait(30)
        except StageError as e:
            refused.append(str(e))

    threads = [threading.Thread(target=take, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 30
    while len(won) + len(refused) < 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    release.set()
    for t in threads:
        t.join()
    assert len(won) == 1 and len(refused) == 3, (won, refused)


def test_a_holder_that_lost_its_lock_is_told_before_it_moves_latest(any_root: StoreURI) -> None:
    store = Store(any_root)
    locks = any_root / "g" / LOCKS
    with GraphLock(any_root, "g") as lock:
        lock.check()  # still ours
        ours = store.names(locks)[-1]
        stalled = {**json.loads(store.read_bytes(locks / ours)), "expires_at": time.time() - 1, "pid": _dead_pid()}
        store.write_bytes(locks / ours, json.dumps(stalled).encode())  # as if this run had stalled past expiry
        with GraphLock(any_root, "g"):  # another run takes the lapsed lock
            with pytest.raises(StageError, match="lost its lock"):
                lock.check()


def test_retention_sweeps_what_killed_writers_left_in_the_versions_it_keeps(any_root: StoreURI) -> None:
    from glisp_core.dataset.publish import ATTEMPT, LEASE

    dv = _versions(any_root, 1)[0]
    store = dv.store
    live = dv.stage_dir("partition/x") / f"{ATTEMPT}20260101T000000-aaaaaaaaaaaa"
    dead = dv.stage_dir("partition/x") / f"{ATTEMPT}20260101T000000-bbbbbbbbbbbb"
    store.write_bytes(live / LEASE, json.dumps(lease_doc("a live writer", 600)).encode())
    store.write_bytes(dead / LEASE, json.dumps({**lease_doc("a killed writer", 600), "pid": _dead_pid()}).encode())
    store.write_bytes(dead / "data.bin", b"half")
    from glisp_core.dataset.records import create_record

    published = dv.stage_dir("partition/x") / f"{ATTEMPT}20260101T000000-cccccccccccc"
    store.write_bytes(published / "data.bin", b"whole")
    assert create_record(
        store,
        dv.path,
        "partition/x",
        1,
        {"name": "partition/x", "path": published.relative_to(dv.path), "fingerprint": "f"},
    )
    apply_retention(any_root, "g", keep=5)
    assert store.exists(live / LEASE) and store.exists(published / "data.bin")
    assert not store.exists(dead / "data.bin")


def test_retention_removes_first_ingests_that_never_published_under_other_names(any_root: StoreURI) -> None:
    """A first ingest killed, or failed on a store that stopped answering, leaves a version prefix without
    ``_version.json`` under a name nobody ingests again: retention removes it once no live ingest writes there.
    A live ingest's prefix and anything under the graph that is not a version's are left alone."""
    from glisp_core.dataset.publish import ATTEMPT, LEASE

    dv = _versions(any_root, 1)[0]
    store, gdir = dv.store, dv.path.parent
    failed = gdir / "20260101T000000-deadbeef" / "ingest" / f"{ATTEMPT}20260101T000000-aaaaaaaaaaaa"
    store.write_bytes(failed / LEASE, json.dumps({**lease_doc("a failed ingest", 600), "pid": _dead_pid()}).encode())
    store.write_bytes(failed / "edges" / "part-0.parquet", b"half")
    live = gdir / "20260101T000001-cafecafe" / "ingest" / f"{ATTEMPT}20260101T000001-bbbbbbbbbbbb"
    store.write_bytes(live / LEASE, json.dumps(lease_doc("an ingest writing now", 600)).encode())
    other = gdir / "notes" / "readme.txt"  # not a version's: no ingest directory
    store.write_bytes(other, b"kept")
    said: list[str] = []
    apply_retention(any_root, "g", keep=5, log=said.append)
    assert not store.exists(failed / "edges" / "part-0.parquet") and not store.exists(failed.parent.parent)
    assert store.exists(live / LEASE) and store.exists(other) and list_versions(any_root, "g") == [dv.version]
    assert said == ["retention: removed g/20260101T000000-deadbeef, a first ingest that never published"], said
