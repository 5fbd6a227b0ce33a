"""Subprocesses a test starts, reaped with their process groups when the test ends.

The test fixtures ``jvm_processes`` and ``server_processes`` hand one out; asking for either is also how a
test says it starts a Spark JVM or sampling servers in a subprocess (``tests/tiers.py`` derives its tiers
from that).
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Sequence
from typing import Any


class Processes:
    """``popen`` and ``run`` as in :mod:`subprocess`, each child in a session of its own; ``reap`` kills
    every group still alive (a JVM or server a failed test left behind)."""

    def __init__(self) -> None:
        self.started: list[subprocess.Popen[Any]] = []

    def popen(self, args: Sequence[str], **kw: Any) -> subprocess.Popen[Any]:
        kw.setdefault("start_new_session", True)
        p: subprocess.Popen[Any] = subprocess.Popen(args, **kw)
        self.started.append(p)
        return p

    def run(self, args: Sequence[str], timeout: float | None = None, **kw: Any) -> subprocess.CompletedProcess[Any]:
        kw.setdefault("start_new_session", True)
        kw.setdefault("capture_output", True)
        kw.setdefault("text", True)
        with self.popen(args, **{k: v for k, v in kw.items() if k != "capture_output"} | _pipes(kw)) as p:
            try:
                out, err = p.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                _kill_group(p)
                out, err = p.communicate()
                raise subprocess.TimeoutExpired(p.args, timeout or 0, out, err) from None
        return subprocess.CompletedProcess(p.args, p.returncode, out, err)

    def reap(self) -> None:
        for p in self.started:
            _kill_group(p)
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass


def _pipes(kw: dict[str, Any]) -> dict[str, Any]:
    return {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE} if kw.get("capture_output") else {}


def _kill_group(p: subprocess.Popen[Any]) -> None:
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
