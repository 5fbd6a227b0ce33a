"""The one event loop every :class:`SamplingClient` of a process runs its gRPC calls on.

gRPC's asyncio layer has one completion-queue poller per process and binds it to every loop that ever
made a call; an event for one loop's call may be handed over by another loop's reader. A client that
closed its own loop while another client's loop was still bound left such an event nowhere to go
(``RuntimeError: Event loop is closed`` from ``PollerCompletionQueue._handle_events`` on stderr, seen
with two clients under load). So clients share one loop, started on first use, never closed; a client's
close ends its own calls and tasks only. A forked child gets a loop of its own (the parent's thread is
not there).
"""

from __future__ import annotations

import asyncio
import os
import threading

_LOCK = threading.Lock()
_SHARED: tuple[int, asyncio.AbstractEventLoop, threading.Thread] | None = None


def client_loop() -> asyncio.AbstractEventLoop:
    """The process's running client loop (started on first use, on a daemon thread)."""
    global _SHARED
    with _LOCK:
        if _SHARED is None or _SHARED[0] != os.getpid() or not _SHARED[2].is_alive():
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name="glisp-client-loop", daemon=True)
            thread.start()
            _SHARED = (os.getpid(), loop, thread)
        return _SHARED[1]
