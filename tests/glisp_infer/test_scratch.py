"""Where inference tasks keep their local files: memory when it has room (and the container's memory too), the
temp dir otherwise, decided once per host and run; a full filesystem is seen before a memory map dies on it."""

from __future__ import annotations

import os
import shutil
import uuid

import pytest

from glisp_infer import scratch as S


def test_cgroup_headroom_reads_v2_and_v1_limits(tmp_path) -> None:
    assert S.cgroup_headroom(tmp_path) is None  # no cgroup files: no limit known
    (tmp_path / "memory.max").write_text("max\n")
    (tmp_path / "memory.current").write_text("100\n")
    assert S.cgroup_headroom(tmp_path) is None
    (tmp_path / "memory.max").write_text("1000\n")
    assert S.cgroup_headroom(tmp_path) == 900
    v1 = tmp_path / "v1"
    (v1 / "memory").mkdir(parents=True)
    (v1 / "memory" / "memory.limit_in_bytes").write_text(str(1 << 62))
    (v1 / "memory" / "memory.usage_in_bytes").write_text("5")
    assert S.cgroup_headroom(v1) is None
    (v1 / "memory" / "memory.limit_in_bytes").write_text("50")
    assert S.cgroup_headroom(v1) == 45


def test_memory_is_chosen_only_with_room(tmp_path) -> None:
    assert S.memory_has_room(1, tmp_path)
    assert not S.memory_has_room(1 << 60, tmp_path)  # more than any filesystem here holds
    assert not S.memory_has_room(1, tmp_path / "absent")


def test_memory_is_chosen_only_where_the_host_has_twice_the_room(tmp_path) -> None:
    """A tmpfs's size is nominal (here the whole RAM): the host's available memory decides, with a margin."""
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24000000 kB\nMemFree:   100 kB\nMemAvailable:    4000000 kB\n")
    assert S.host_available(meminfo) == 4_000_000 * 1024
    assert S.memory_has_room(1_900_000 * 1024, tmp_path, meminfo)
    assert not S.memory_has_room(2_100_000 * 1024, tmp_path, meminfo)  # more than half of what is available
    assert S.host_available(tmp_path / "absent") is None
    assert S.memory_has_room(1, tmp_path, tmp_path / "absent")  # a kernel that does not say: tmpfs space decides


@pytest.mark.skipif(not S.SHM.is_dir(), reason="no /dev/shm on this host")
def test_the_first_choice_on_a_host_holds_for_the_run(tmp_path) -> None:
    token = f"test-{uuid.uuid4().hex[:8]}"
    try:
        first = S.host_scratch("", token, 1024)
        assert first.is_relative_to(S.SHM) and first.name == token
        assert S.host_scratch("", token, 1 << 60) == first  # a later task of the run finds the same place
        other = f"test-{uuid.uuid4().hex[:8]}"
        assert not S.host_scratch("", other, 1 << 60).is_relative_to(S.SHM)
        S.marker(other).unlink()
    finally:
        S.marker(token).unlink(missing_ok=True)
        shutil.rmtree(S.SHM / "glisp-infer" / token, ignore_errors=True)
    assert S.host_scratch(str(tmp_path), token, 1) == tmp_path / "glisp-infer" / token  # infer.scratch_dir wins


def test_allocate_reserves_the_bytes_or_says_there_is_no_room(tmp_path) -> None:
    f = tmp_path / "a.f32"
    assert S.allocate(f, 1 << 20) and os.stat(f).st_blocks * 512 >= 1 << 20  # reserved, not sparse
    g = tmp_path / "b.f32"
    assert not S.allocate(g, 1 << 60) and not g.exists()


def test_stale_scratch_of_killed_runs_is_swept(tmp_path) -> None:
    old, new = tmp_path / "run-old", tmp_path / "run-new"
    for d in (old, new):
        d.mkdir()
        (d / "static-x.f32").write_bytes(b"x")
    marker = tmp_path / "run-old.scratch"
    marker.write_text("/dev/shm")
    for p in (old, marker):
        os.utime(p, (0, 0))  # untouched since 1970
    assert S.sweep_stale([tmp_path, tmp_path / "absent"]) == 2
    assert not old.exists() and not marker.exists() and (new / "static-x.f32").exists()
