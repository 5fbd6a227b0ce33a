"""Per-stage CPU timers for the sampling path: where a batch's CPU goes, server and client.

Off unless the environment sets ``GLISP_PROFILE=1``: then every ``with stage("name")`` adds the
calling thread's CPU time (``time.thread_time``) to a per-process total. A server reports its totals
and its process CPU in the ``Stats`` RPC (``stage_cpu_seconds``, ``process_cpu_seconds``); a client
process reads :func:`snapshot`. ``bench/sampling_profile.py`` diffs two snapshots around a window; CPU
the stages do not cover (gRPC's C-core threads, asyncio, the interpreter between stages) is the
process total minus the stages. When off, ``stage`` returns one shared no-op object.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

ENABLED = os.environ.get("GLISP_PROFILE", "") not in ("", "0")
_totals: dict[str, float] = {}
_calls: dict[str, int] = {}
_lock = threading.Lock()


class _Stage:
    __slots__ = ("name", "t0")

    def __init__(self, name: str) -> None:
        self.name = name

    def __enter__(self) -> _Stage:
        self.t0 = time.thread_time()
        return self

    def __exit__(self, *exc: object) -> None:
        dt = time.thread_time() - self.t0
        with _lock:
            _totals[self.name] = _totals.get(self.name, 0.0) + dt
            _calls[self.name] = _calls.get(self.name, 0) + 1


class _Off:
    __slots__ = ()

    def __enter__(self) -> _Off:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


_OFF = _Off()


def stage(name: str) -> Any:
    """A context manager timing the calling thread's CPU under ``name`` (a no-op when profiling is off)."""
    return _Stage(name) if ENABLED else _OFF


def process_cpu_s() -> float:
    """CPU seconds of this whole process (every thread, user + system)."""
    t = os.times()
    return t.user + t.system


def snapshot() -> dict[str, Any]:
    """Stage totals (CPU seconds), call counts and the process's CPU seconds, now."""
    with _lock:
        return {"stages_s": dict(_totals), "calls": dict(_calls), "process_cpu_s": process_cpu_s()}
