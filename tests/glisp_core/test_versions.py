"""Versions over time: LATEST, leases, retention and the one-run-per-graph lock (no Spark)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from glisp_core.dataset.layout import DatasetVersion, list_versions, resolve_dataset
from glisp_core.dataset.versions import (
    GraphLock,
    VersionLease,
    active_leases,
    apply_retention,
    read_latest,
    set_latest,
)
from glisp_core.errors import StageError
from glisp_testing.graphs import write_dataset


def _versions(root: Path, n: int) -> list[DatasetVersion]:
    out = []
    for i in range(n):
        dv = write_dataset(root, "g", np.array([0, i]), np.array([1, 2]), version=f"v{i}")
        os.utime(dv.manifest_path, ns=(10**9 * (i + 1),) * 2)  # v0 oldest
        out.append(dv)
    return out


def test_latest_moves_atomically_and_graph_names_resolve_to_it(tmp_path: Path) -> None:
    v0, v1, v2 = _versions(tmp_path, 3)
    assert resolve_dataset("g", tmp_path) == v2  # no LATEST yet: the newest
    set_latest(v1)
    assert read_latest(tmp_path / "g") == "v1"
    for spec in ("g", "g/latest", str(tmp_path / "g"), str(tmp_path / "g" / "latest")):
        assert resolve_dataset(spec, tmp_path) == v1, spec
    assert resolve_dataset("g/v2", tmp_path) == v2  # an explicit version still wins
    assert not [p for p in (tmp_path / "g").iterdir() if p.name.startswith(".LATEST")]
    with pytest.raises(StageError, match="not a published version"):
        set_latest(DatasetVersion(tmp_path, "g", "v9"))
    (tmp_path / "g" / "LATEST").write_text("gone\n")  # names a version that no longer exists
    assert read_latest(tmp_path / "g") is None and resolve_dataset("g", tmp_path) == v2


def test_leases_lapse_when_the_holder_dies_or_stops_renewing(tmp_path: Path) -> None:
    (v0,) = _versions(tmp_path, 1)
    with VersionLease(v0, "trainer", ttl_s=0.3):
        time.sleep(0.5)  # longer than the ttl: renewal keeps it alive
        assert [r["holder"] for r in active_leases(v0)] == ["trainer"]
    assert active_leases(v0) == []  # released on exit
    leases = v0.path / ".leases"
    stale = {"holder": "old server", "host": "elsewhere", "pid": 1, "expires_at": time.time() - 1}
    (leases / "a.json").write_text(json.dumps(stale))
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    crashed = {
        "holder": "crashed trainer",
        "host": os.uname().nodename,
        "pid": int(dead.stdout),
        "expires_at": time.time() + 3600,
    }
    (leases / "b.json").write_text(json.dumps(crashed))
    assert active_leases(v0) == []  # one expired, one whose process on this host is gone


def test_retention_keeps_latest_and_leased_versions(tmp_path: Path) -> None:
    v0, v1, v2, v3, v4 = _versions(tmp_path, 5)
    set_latest(v1)  # an operator pinned latest back to v1
    lines: list[str] = []
    with VersionLease(v0, "serve partition 0"):
        removed = apply_retention(tmp_path, "g", keep=2, log=lines.append)
    assert removed == ["v2"]
    assert list_versions(tmp_path, "g") == ["v0", "v1", "v3", "v4"]
    assert any("keeping g/v0, leased by serve partition 0" in x for x in lines)
    assert apply_retention(tmp_path, "g", keep=2) == ["v0"]  # the lease is gone
    assert apply_retention(tmp_path, "g", keep=0) == []  # 0 keeps everything
    assert not [p for p in (tmp_path / "g").iterdir() if p.name.startswith(".deleting")]


def test_one_pipeline_run_per_graph(tmp_path: Path) -> None:
    code = (
        f"import sys, time; sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})\n"
        "from glisp_core.dataset.versions import GraphLock\n"
        f"with GraphLock({str(tmp_path)!r}, 'g'):\n    print('locked', flush=True); time.sleep(60)\n"
    )
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        with pytest.raises(StageError, match=rf"another pipeline run holds .*\(pid {holder.pid} on"):
            with GraphLock(tmp_path, "g"):
                pass
        with GraphLock(tmp_path, "other"):  # other graphs are independent
            pass
    finally:
        holder.kill()
        holder.wait()
    with GraphLock(tmp_path, "g"):  # released by the kernel when its holder died
        pass
