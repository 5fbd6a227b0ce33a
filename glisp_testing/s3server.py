"""A real S3 API on 127.0.0.1 (moto's server) for tests and benchmarks, and a byte-counting proxy in front of it.

The proxy is how ``bench/storage.py`` measures what a stage reads from and writes to the store: every process
of the run (driver, JVM, Python workers) is pointed at the proxy through ``AWS_ENDPOINT_URL``, which counts
the bytes of each connection in both directions (HTTP headers included).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import MutableMapping
from dataclasses import dataclass, field
from pathlib import Path

HOST = "127.0.0.1"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


# what could select other credentials or another endpoint than the local server's
FOREIGN = (
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "AWS_ROLE_ARN",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS",
)


def use_only(endpoint: str, env: MutableMapping[str, str]) -> None:
    """Point ``env`` (``os.environ`` before any client, JVM or subprocess exists) at ``endpoint`` with throw-away
    credentials, so a real store is never reached: profiles, tokens, roles and shared config files go away."""
    for k in FOREIGN:
        env.pop(k, None)
    env.update(
        {
            "AWS_ACCESS_KEY_ID": "glisp-test",
            "AWS_SECRET_ACCESS_KEY": "glisp-test",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_ENDPOINT_URL_S3": endpoint,  # read before AWS_ENDPOINT_URL: it must not point elsewhere
            "AWS_CONFIG_FILE": os.devnull,  # no profile in ~/.aws can add an endpoint or credentials
            "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
            "AWS_EC2_METADATA_DISABLED": "true",
        }
    )
    for k in ("NO_PROXY", "no_proxy"):  # an HTTP proxy must not carry the server's traffic elsewhere
        env[k] = ",".join(x for x in (env.get(k, ""), HOST) if x)


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1):
            return True
    except urllib.error.HTTPError:
        return True  # it answered, with an error status
    except OSError:
        return False


@dataclass
class ServerProcess:
    """A server subprocess on HOST:port (moto, the GCS and Azure emulators); ``start()`` waits until it
    answers, ``stop()`` ends it."""

    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    log: Path | None = None

    @property
    def endpoint(self) -> str:
        return f"http://{HOST}:{self.port}"

    def command(self) -> list[str]:
        raise NotImplementedError

    def start(self, timeout: float = 60.0) -> ServerProcess:
        fd, name = tempfile.mkstemp(prefix=f"glisp-{type(self).__name__.lower()}-", suffix=".log")
        self.log = Path(name)
        self.proc = subprocess.Popen(self.command(), stdout=fd, stderr=fd, cwd=tempfile.gettempdir())
        os.close(fd)
        deadline = time.monotonic() + timeout
        while not _answers(self.endpoint + "/"):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                tail = self._tail()
                self.stop()
                raise RuntimeError(f"{self.command()[0]} on {self.endpoint} did not start: {tail}")
            time.sleep(0.1)
        if self.proc.poll() is not None:  # another process answered on the port and ours could not bind it
            raise RuntimeError(f"{self.command()[0]} could not bind {self.endpoint}: {self._tail()}")
        return self

    def _tail(self) -> str:
        return self.log.read_text()[-2000:] if self.log and self.log.exists() else ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.log is not None:
            self.log.unlink(missing_ok=True)


class MotoServer(ServerProcess):
    """moto's S3 API in memory, with its conditional writes made atomic as S3's are
    (:mod:`glisp_testing.moto_atomic`)."""

    def command(self) -> list[str]:
        return [sys.executable, "-m", "glisp_testing.moto_atomic", "-H", HOST, "-p", str(self.port)]

    def create_bucket(self, bucket: str) -> None:
        import boto3

        boto3.client("s3", endpoint_url=self.endpoint).create_bucket(Bucket=bucket)


class CountingProxy:
    """A TCP proxy on HOST:port to ``target`` that counts bytes sent up (writes) and down (reads)."""

    def __init__(self, target_port: int) -> None:
        self.target = (HOST, target_port)
        self.up = self.down = 0
        self._lock = threading.Lock()
        self._sock = socket.create_server((HOST, 0))
        self.port = int(self._sock.getsockname()[1])
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"http://{HOST}:{self.port}"

    def counts(self) -> tuple[int, int]:
        """(bytes sent to the store, bytes received from it) so far."""
        with self._lock:
            return self.up, self.down

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._sock.accept()
            except OSError:
                return
            server = socket.create_connection(self.target)
            threading.Thread(target=self._pipe, args=(client, server, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(server, client, False), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, up: bool) -> None:
        try:
            while data := src.recv(1 << 16):
                dst.sendall(data)
                with self._lock:
                    if up:
                        self.up += len(data)
                    else:
                        self.down += len(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()

    def close(self) -> None:
        self._sock.close()
