"""A TCP proxy on 127.0.0.1 in front of a store emulator that can stop answering: a store endpoint that hangs
mid-stage (connections accepted, requests read, nothing sent back), for the timeout tests.

``stall_after(n)``: the proxy forwards the first ``n`` client reads (about one per request), then holds every
connection open without answering; ``resume()`` makes it a plain proxy again, for the re-run.
"""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass, field

from glisp_testing.s3server import HOST


@dataclass
class StallingProxy:
    upstream: tuple[str, int]
    port: int = 0
    forwarded: int = 0  # client reads passed upstream so far
    stalled: threading.Event = field(default_factory=threading.Event)
    _after: int | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _sock: socket.socket | None = None
    _open: list[socket.socket] = field(default_factory=list)

    @property
    def endpoint(self) -> str:
        return f"http://{HOST}:{self.port}"

    def start(self) -> StallingProxy:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((HOST, 0))
        s.listen(64)
        self._sock, self.port = s, s.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def stall_after(self, n: int) -> None:
        with self._lock:
            self._after = self.forwarded + n

    def resume(self) -> None:
        """Answer again; the connections held during the stall are reset (as when a partition heals), so the
        server drops the requests it got only part of (Azurite holds a blob while one of its writes is open)."""
        with self._lock:
            self._after = None
            held, self._open = self._open, []
        for c in held:
            try:
                c.close()
            except OSError:
                pass
        self.stalled.clear()

    def stop(self) -> None:
        if self._sock is not None:
            self._sock.close()
        for c in list(self._open):
            try:
                c.close()
            except OSError:
                pass

    def _accept(self) -> None:
        assert self._sock is not None
        while True:
            try:
                client, _ = self._sock.accept()
            except OSError:
                return
            with self._lock:
                self._open.append(client)
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        try:
            up = socket.create_connection(self.upstream, timeout=10)
        except OSError:
            client.close()
            return
        up.settimeout(None)
        with self._lock:
            self._open.append(up)
        threading.Thread(target=self._pump, args=(up, client, False), daemon=True).start()
        self._pump(client, up, True)

    def _pump(self, src: socket.socket, dst: socket.socket, from_client: bool) -> None:
        """Copy ``src`` to ``dst``; once stalled, keep reading (the peer sees its bytes taken) and send nothing."""
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if from_client:
                    with self._lock:
                        self.forwarded += 1
                        if self._after is not None and self.forwarded > self._after:
                            self.stalled.set()
                if self.stalled.is_set():
                    continue
                dst.sendall(data)
        except OSError:
            pass
        finally:
            if not self.stalled.is_set():
                for s in (src, dst):
                    try:
                        s.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
