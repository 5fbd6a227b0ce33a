"""The backend seam: one registry resolves a URI to its backend, nothing else branches on a scheme, and a store
without a conditional create refuses to publish unless the user opted in by name."""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import pyarrow.fs as pafs
import pytest

from glisp_core.config import load_config
from glisp_core.storage import backend as backend_mod
from glisp_core.storage.backend import Capabilities, set_unsafe_publish, unsafe_publish
from glisp_core.storage.backends.azure import account
from glisp_core.storage.backends.hdfs import HdfsBackend
from glisp_core.storage.backends.local import LocalBackend
from glisp_core.storage.registry import BACKENDS, backend_class
from glisp_core.storage.schemes import TABLE
from glisp_core.storage.store import Store
from glisp_core.storage.uri import StoreError, parse_uri
from glisp_testing.graphs import write_dataset

REPO = Path(__file__).resolve().parents[3]
# the backend modules and the tables that map schemes to them: the only places a scheme's name decides anything
SEAM = ("glisp_core/storage/backends/", "glisp_core/storage/registry.py", "glisp_core/storage/schemes.py")
BRANCH = re.compile(r"\bscheme\s*(==|!=)|\bscheme\s+(not\s+)?in\b")


@pytest.fixture(autouse=True)
def _no_opt_in(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(backend_mod, "_unsafe", None)
    monkeypatch.delenv(backend_mod.UNSAFE_ENV, raising=False)


def test_every_scheme_resolves_to_a_backend_that_declares_its_capabilities() -> None:
    for name, kind in TABLE.items():
        cls = backend_class(parse_uri(f"{name}://bucket/x" if kind.object_store else f"{name}://host/x"))
        assert cls is BACKENDS[kind.backend] and cls.name == kind.backend
        assert isinstance(cls.capabilities, Capabilities) and cls.credentials
    assert {c.name for c in BACKENDS.values()} == {"local", "s3", "gcs", "azure", "hdfs"}
    assert not BACKENDS["hdfs"].capabilities.conditional_create  # untested here: it must refuse, not pretend


def test_no_code_outside_the_backend_seam_branches_on_a_scheme() -> None:
    hits = []
    for f in _sources():
        rel = f.relative_to(REPO).as_posix()
        if rel.startswith(SEAM):
            continue
        for n, line in enumerate(f.read_text().splitlines(), 1):
            if BRANCH.search(line):
                hits.append(f"{rel}:{n}: {line.strip()}")
    assert not hits, "branch on a scheme outside the backend modules:\n" + "\n".join(hits)


def _sources() -> list[Path]:
    """The project's Python files (hidden directories, such as .venv and .tools, and build outputs skipped)."""
    out = []
    for d, dirs, files in os.walk(REPO):
        dirs[:] = sorted(x for x in dirs if not x.startswith(".") and x not in ("build", "data", "node_modules"))
        out += [Path(d) / f for f in sorted(files) if f.endswith(".py")]
    return out


def test_a_store_without_conditional_create_refuses_to_publish_naming_the_uri(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(LocalBackend, "capabilities", Capabilities(False, True, True))
    root = parse_uri(tmp_path / "root")
    with pytest.raises(StoreError) as e:
        write_dataset(root, "g", np.array([0, 1]), np.array([1, 0]))
    assert str(root) in str(e.value) and 'dataset.unsafe_publish = "check-then-write"' in str(e.value)
    assert not list((tmp_path / "root").rglob("*.bin")), "refused before any output was written"
    with pytest.raises(StoreError, match="no conditional create"):
        Store(root).create_exclusive(root / "r.json", b"{}")


@pytest.mark.parametrize("how", ["config", "environment"])
def test_opting_in_by_name_allows_check_then_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    monkeypatch.setattr(LocalBackend, "capabilities", Capabilities(False, True, True))
    if how == "config":
        set_unsafe_publish(load_config(overrides=['dataset.unsafe_publish="check-then-write"']).dataset.unsafe_publish)
    else:
        monkeypatch.setenv(backend_mod.UNSAFE_ENV, "check-then-write")
    assert unsafe_publish()
    root = parse_uri(tmp_path / "root")
    dv = write_dataset(root, "g", np.array([0, 1]), np.array([1, 0]))
    assert dv.store.exists(dv.manifest_path)
    store = Store(root)
    assert store.create_exclusive(root / "r.json", b"1") and not store.create_exclusive(root / "r.json", b"2")


def test_an_unknown_opt_in_is_refused() -> None:
    with pytest.raises(StoreError, match="check-then-write"):
        set_unsafe_publish("yolo")


def test_hdfs_refuses_to_publish(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(HdfsBackend, "filesystem", lambda self: pafs.LocalFileSystem())  # no namenode here
    uri = parse_uri(f"hdfs://namenode:8020{tmp_path}/root")
    store = Store(uri)
    assert store.at(uri / "a") == f"{tmp_path}/root/a"
    with pytest.raises(StoreError) as e:
        store.check_publishable(uri / "g")
    assert f"hdfs://namenode:8020{tmp_path}/root/g" in str(e.value) and "hdfs store" in str(e.value)


def test_azure_account_from_the_uri_and_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for k in ("AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_ACCOUNT_NAME", "AZURE_STORAGE_ACCOUNT"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_KEY", "k")
    a = account(parse_uri("abfss://data@acct.dfs.core.windows.net/x"))
    assert (a.name, a.key, a.url) == ("acct", "k", "https://acct.blob.core.windows.net")
    conn = "DefaultEndpointsProtocol=http;AccountName=dev;AccountKey=a2V5;BlobEndpoint=http://127.0.0.1:10000/dev;"
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", conn)
    a = account(parse_uri("az://data/x"))
    assert (a.name, a.key, a.url) == ("dev", "a2V5", "http://127.0.0.1:10000/dev")
