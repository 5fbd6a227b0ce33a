"""The store conformance suite: what the publish protocol needs of a store, against a live server of each backend
on 127.0.0.1 (the local disk, moto's S3 API, fake-gcs-server, Azurite).

Two parts. The contract (below): the server itself enforces the precondition (asked through the store's own
SDK), a second conditional create of one name is refused, two writers racing on one record have exactly one
winner, and a deliberately broken conditional create makes that race test fail. Then the guarantees: every
test of the publish protocol, ``LATEST``, leases, locks and retention in ``tests/glisp_core/test_storage.py``,
``test_dataset.py`` and ``test_versions.py`` that takes a root (``any_root`` or ``dv``) is collected here again
with its root on the GCS emulator and on Azurite (those modules run them on the local disk and on S3), and so is
the writer killed at each of the five points of a publish.

Where a server does not enforce the precondition, every test that relies on it is skipped, saying that the
guarantee is untested on that store (docs/storage.md says which).
"""

from __future__ import annotations

import inspect
import json
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from glisp_core.dataset.layout import DatasetVersion
from glisp_core.dataset.records import create_record, current_record
from glisp_core.storage.store import Store
from glisp_core.storage.uri import StoreURI, parse_uri
from glisp_testing.emulators import enforces_precondition
from glisp_testing.graphs import write_dataset
from tests.glisp_core import test_dataset, test_storage, test_versions

KINDS = ["local", "s3", "gcs", "azure"]
EMULATED = ["gcs", "azure"]  # the guarantees on local and s3 run in their own modules
WRITERS, ROUNDS = 8, 4
_enforced: dict[str, bool] = {}


def _root(request: pytest.FixtureRequest, kind: str, tmp_path: Path) -> StoreURI:
    if kind == "local":
        return parse_uri(tmp_path / "root")
    root: StoreURI = request.getfixturevalue(f"{kind}_root")
    return root


def require_precondition(kind: str, root: StoreURI) -> None:
    """Skip, saying so, where the live server does not enforce the conditional create (asked once per kind)."""
    if kind == "local":
        return
    if kind not in _enforced:
        _enforced[kind] = enforces_precondition(kind, Store(root).backend.bucket_path() or "")
    if not _enforced[kind]:
        pytest.skip(f"untested on {kind}: its server here does not refuse a second conditional create")


@pytest.fixture(params=KINDS)
def root(request: pytest.FixtureRequest, tmp_path: Path, s3_server, gcs_server, azure_server) -> StoreURI:
    return _root(request, request.param, tmp_path)


@pytest.fixture(params=EMULATED)
def any_root(request: pytest.FixtureRequest, tmp_path: Path, gcs_server, azure_server) -> StoreURI:
    """What the re-collected guarantee tests take: a root on each emulated store."""
    r = _root(request, request.param, tmp_path)
    require_precondition(request.param, r)
    return r


# ---- the contract ----------------------------------------------------------------------------------------


def kind_of(root: StoreURI) -> str:
    return Store(root).backend.name


def test_the_server_enforces_the_precondition(root: StoreURI) -> None:
    """Asked through the store's own SDK, not GLISP's backend: what the emulator guarantees by itself."""
    require_precondition(kind_of(root), root)


def test_a_second_conditional_create_is_refused(root: StoreURI) -> None:
    require_precondition(kind_of(root), root)
    store = Store(root)
    assert store.create_exclusive(root / "r" / "1.json", b"first")
    assert not store.create_exclusive(root / "r" / "1.json", b"second")
    assert store.read_bytes(root / "r" / "1.json") == b"first"


def test_a_backend_deletes_one_object_and_names_a_missing_one(root: StoreURI) -> None:
    """The backend's own delete (Azure: one Delete Blob through the SDK, no lease): the object goes, its
    neighbour stays, and a second delete is FileNotFoundError (which ``Store.delete`` takes as done)."""
    store = Store(root)
    store.write_bytes(root / "d" / "a.json", b"a")
    store.write_bytes(root / "d" / "b.json", b"b")
    path = store.at(root / "d" / "a.json")
    store.backend.delete_file(path)
    assert not store.exists(root / "d" / "a.json") and store.read_bytes(root / "d" / "b.json") == b"b"
    with pytest.raises(FileNotFoundError):
        store.backend.delete_file(path)
    store.delete(root / "d" / "a.json")  # absent: nothing to do


def race_on_one_record(store: Store, version: StoreURI, rounds: int = ROUNDS) -> None:
    """``WRITERS`` threads create record ``seq`` of one stage at once, ``rounds`` times: exactly one wins each
    round, and the record is the winner's."""
    for seq in range(1, rounds + 1):
        won = _one_round(store, version, seq)
        assert len(won) == 1, f"round {seq}: {len(won)} writers believe they published record {seq}"
        cur = current_record(store, version, "partition/race")
        assert cur is not None and cur[0] == seq and cur[1] == {"writer": won[0]}


def _one_round(store: Store, version: StoreURI, seq: int) -> list[int]:
    """The writers that believe they created record ``seq``, all starting at once."""
    start = threading.Barrier(WRITERS)
    won: list[int] = []
    errors: list[BaseException] = []

    def write(i: int) -> None:
        try:
            start.wait()
            if create_record(store, version, "partition/race", seq, {"writer": i}):
                won.append(i)
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(WRITERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    return won


def test_two_writers_racing_on_one_record_have_one_winner(root: StoreURI) -> None:
    require_precondition(kind_of(root), root)
    race_on_one_record(Store(root), root / "g" / "v1")


def test_a_broken_conditional_create_fails_the_race_test(root: StoreURI, monkeypatch: pytest.MonkeyPatch) -> None:
    """The suite can fail: a backend whose conditional create always succeeds (a plain write) is caught."""
    store = Store(root)

    def always_wins(self: Any, u: StoreURI, data: bytes) -> bool:
        self.put(u, data)
        return True

    monkeypatch.setattr(type(store.backend), "create_exclusive", always_wins)
    with pytest.raises(AssertionError, match="writers believe they published"):
        race_on_one_record(store, root / "g" / "v1", rounds=2)


def test_a_version_published_on_the_store_reads_back_whole(root: StoreURI) -> None:
    require_precondition(kind_of(root), root)
    dv = write_dataset(root, "g", np.array([0, 1, 2]), np.array([1, 2, 0]), version="v1")
    again = DatasetVersion(root, "g", "v1")
    assert again.store.read_table(again.edges).num_rows == 3
    assert json.loads(dv.store.read_bytes(dv.manifest_path))["version"] == "v1"


@pytest.mark.parametrize("kill_at", ["writing", "before_record", "after_record", "random-1", "random-2"])
def test_sigkill_during_a_publish_leaves_every_version_intact(any_root: StoreURI, kill_at: str) -> None:
    test_dataset.test_sigkill_during_a_publish_to_s3_leaves_every_version_intact(any_root, kill_at)


# ---- the guarantees, collected again on the emulated stores -----------------------------------------------


def _guarantees() -> dict[str, Any]:
    """Every test of those modules that takes a root, and the ``dv`` fixture they build on it."""
    found: dict[str, Any] = {"dv": test_dataset.dv}
    for mod in (test_storage, test_dataset, test_versions):
        for name, fn in vars(mod).items():
            if name.startswith("test_") and {"any_root", "dv"} & set(inspect.signature(fn).parameters):
                assert name not in found, f"{name} is defined twice"
                found[name] = fn
    return found


globals().update(_guarantees())
