"""Admin calls (``Reload``): who may make them, and the local admin socket they travel over.

A reload changes what every client reads, so it is not an ordinary request: a server answers
``Reload`` only from its admin socket (a Unix socket in a directory only its user can open:
``serve-cluster`` gives each server one and keeps its own for ``glisp serve-reload``), or over the
network when a bearer token is configured (the token interceptor has then checked the caller).
Anything else is PERMISSION_DENIED, and costs the server nothing.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import grpc

from glisp_core.config import ClientConfig
from glisp_serving.security import _TokenMetadata, open_channel, read_token

UNIX = "unix:"
ADMIN_HELP = (
    "Reload is an admin call: use 'glisp serve-reload' (it goes through serve-cluster's admin socket), "
    "send SIGHUP, or configure serve.token_file so that callers over the network prove who they are"
)


def admin_address(path: str | os.PathLike[str]) -> str:
    """The gRPC address of the admin socket at ``path``."""
    return f"{UNIX}{Path(path).resolve()}"


def bind_admin_socket(server: grpc.Server, path: str | os.PathLike[str]) -> str:
    """Listen on the Unix socket ``path`` too (its directory made private to this user); the address."""
    p = Path(path).resolve()
    p.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    mode = stat.S_IMODE(p.parent.stat().st_mode)
    if mode & 0o077:
        raise PermissionError(
            f"{p.parent}: the admin socket's directory is open to other users (mode {mode:o}); use a directory "
            "with mode 700, so that only this user can reload the server"
        )
    p.unlink(missing_ok=True)  # a socket left by a killed server of the same slot
    address = admin_address(p)
    if server.add_insecure_port(address) == 0:
        raise OSError(f"serve: cannot listen on the admin socket {p}")
    return address


def is_local_admin(context: grpc.ServicerContext) -> bool:
    """The caller came through the admin socket (only this user can open it)."""
    return str(context.peer()).startswith(UNIX)


def admin_channel(address: str, cfg: ClientConfig | None = None) -> Any:
    """A channel for admin calls: plaintext on an admin socket (with the token when one is configured, since
    the server's token check covers every port), else as ``client.*`` says."""
    if not address.startswith(UNIX):
        return open_channel(address, cfg)
    ch = grpc.insecure_channel(address)
    token = read_token((cfg or ClientConfig()).token_file, "client.token_file")
    return grpc.intercept_channel(ch, _TokenMetadata(token)) if token else ch
