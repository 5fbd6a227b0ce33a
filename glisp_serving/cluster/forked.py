"""serve-cluster's servers forked from a warm process instead of started as new interpreters.

A new ``glisp serve`` interpreter spends about 2 CPU-seconds before it opens its partition: the imports
(numba, pyarrow, gRPC) and numba's first dispatch, which loads its typing registries. serve-cluster pays that
once: it starts a fork server (``multiprocessing``'s ``forkserver``) that imports the server and runs every
kernel on a synthetic partition (:mod:`glisp_serving.server.preload`), and each server, and each restart of
one, is a fork of it. The fork server is a fresh interpreter started before the supervisor runs any thread or
gRPC channel, so nothing is forked mid-call. A forked server's command line is the fork server's; its name
(``/proc/PID/comm``, what ``ps -o comm`` and ``psutil.Process.name()`` show) says its partition and replica.
"""

from __future__ import annotations

import importlib
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from multiprocessing.connection import wait as wait_for
from typing import Any

PRELOAD = ["glisp_serving.server.preload"]
CLI = "glisp_app.cli"  # the module a server runs as ``__main__``, forked or started


def fork_context() -> Any | None:
    """The fork server context, preloading the server (None where the platform has no fork server)."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return None
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    return ctx


def process_name(part: int, replica: int) -> str:
    """A forked server's name: at most 15 bytes, the kernel's limit for ``comm``."""
    return f"glisp p{part} r{replica}"[:15]


def _run(argv: list[str], name: str) -> None:
    """In the forked child: name the process, then run ``glisp serve`` as its own interpreter would."""
    try:
        with open("/proc/self/comm", "w") as f:
            f.write(name)
    except OSError:
        pass  # not Linux: the name is only for ps
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.argv = [CLI, *argv]
    sys.exit(importlib.import_module(CLI).main(argv))  # what ``python -m glisp_app.cli ARGV`` runs


class ForkedServer:
    """One forked server, with what serve-cluster uses of ``subprocess.Popen``: ``pid``, ``poll()``,
    ``returncode``, ``send_signal()``, ``kill()`` and ``wait()``. Safe to use from several threads."""

    def __init__(self, ctx: Any, argv: Sequence[str], name: str) -> None:
        self.args = list(argv)
        self._lock = threading.Lock()
        self._proc = ctx.Process(target=_run, args=(self.args, name), name=name, daemon=False)
        self._proc.start()
        self.pid: int = self._proc.pid

    def poll(self) -> int | None:
        with self._lock:
            return self._proc.exitcode

    @property
    def returncode(self) -> int | None:
        return self.poll()

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass  # it ended between the check and the signal

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def wait(self, timeout: float | None = None) -> int:
        if self.poll() is None:
            wait_for([self._proc.sentinel], timeout)  # readable once it ended; poll() reads its code
        code = self.poll()
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        return code


def start_server(ctx: Any | None, argv: Sequence[str], part: int, replica: int) -> Any:
    """``glisp serve`` with ``argv``: forked from ``ctx``'s fork server, or a new interpreter without one."""
    if ctx is None:
        return subprocess.Popen([sys.executable, "-m", CLI, *argv])
    return ForkedServer(ctx, argv, process_name(part, replica))
