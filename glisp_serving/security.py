"""Transport security of the sampling service: TLS, mutual TLS and a bearer token, for servers and clients.

Every server and every channel to one goes through this module (``bind`` on the server side,
``open_channel`` on the client side), so one configuration secures all of them:

- ``[serve] tls_cert``/``tls_key``: the server speaks TLS; ``tls_client_ca`` set: mutual TLS (clients
  must present a certificate signed by that CA).
- ``[serve] token_file`` or the environment variable ``GLISP_TOKEN``: every Sampling RPC must carry
  ``authorization: Bearer <token>`` (UNAUTHENTICATED otherwise). grpc.health.v1 stays open so that
  load balancers and Kubernetes probes need no secret.
- ``[client] tls``/``tls_ca``/``tls_cert``/``tls_key``/``token_file`` (or ``GLISP_TOKEN``): the same on
  the client side.

Secrets come from files or the environment, never from command-line arguments (which every user of
the machine sees in the process list), and never from the cluster file, which holds only addresses.
A server bound to anything but loopback without TLS or a token warns: anyone who reaches its port
reads every feature and label of its partition.
"""

from __future__ import annotations

import collections
import hmac
import ipaddress
import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import grpc

from glisp_core.config import ClientConfig, ServeConfig
from glisp_core.errors import ConfigError

log = logging.getLogger("glisp.security")
TOKEN_ENV = "GLISP_TOKEN"
OPEN_SERVICES = ("/grpc.health.v1.Health/",)  # no token needed: probes carry no secrets
_HELP = f"set serve.token_file / client.token_file to a file holding the token, or the environment variable {TOKEN_ENV}"


# ---------------------------------------------------------------------------------------------- secrets
def read_secret(path: str, key: str) -> bytes:
    """The bytes of the file that config ``key`` names; ConfigError naming the key and the file."""
    try:
        data = Path(path).expanduser().read_bytes()
    except OSError as e:
        raise ConfigError("config", key, f"cannot read {path!r} ({e.strerror or e})") from None
    if not data.strip():
        raise ConfigError("config", key, f"{path!r} is empty")
    return data


def read_token(token_file: str, key: str, env: dict[str, str] | None = None) -> str | None:
    """The bearer token: ``token_file`` when set (surrounding whitespace stripped), else ``$GLISP_TOKEN``."""
    if token_file:
        token = read_secret(token_file, key).decode("utf-8", "replace").strip()
    else:
        token = (os.environ if env is None else env).get(TOKEN_ENV, "").strip()
    if not token:
        return None
    if any(c.isspace() or not c.isprintable() for c in token):
        raise ConfigError(
            "config",
            key if token_file else TOKEN_ENV,
            "the token must be one printable word (no spaces or control characters)",
        )
    return token


def _pair(cert: str, key: str, section: str) -> tuple[bytes, bytes] | None:
    """(private key, certificate chain) from ``section.tls_key``/``tls_cert``; None when both are empty."""
    if not cert and not key:
        return None
    if not (cert and key):
        missing = "tls_key" if cert else "tls_cert"
        raise ConfigError(
            "config",
            f"{section}.{missing}",
            "tls_cert and tls_key must be set together "
            '(e.g. tls_cert = "/etc/glisp/tls/tls.crt", tls_key = "/etc/glisp/tls/tls.key")',
        )
    return read_secret(key, f"{section}.tls_key"), read_secret(cert, f"{section}.tls_cert")


# ---------------------------------------------------------------------------------------------- server side
def is_loopback(host: str) -> bool:
    """True for localhost, 127.0.0.0/8 and ::1 (brackets allowed); False for 0.0.0.0, :: and other hosts."""
    h = host.strip().strip("[]").lower()
    if h == "localhost":
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        return False


def exposure_warning(host: str, tls: bool, token: bool) -> str | None:
    """What is wrong with serving on ``host`` with this security, or None when nothing is."""
    if is_loopback(host) or tls:
        return None
    if token:
        return (
            f"serving on {host} without TLS: the bearer token travels in clear text "
            "(set serve.tls_cert and serve.tls_key)"
        )
    return (
        f"serving on {host} without TLS or a token: anyone who reaches this port reads every feature "
        f"and label of the partition (set serve.tls_cert/serve.tls_key, serve.tls_client_ca, "
        f"serve.token_file or {TOKEN_ENV}; see docs/serving.md#security)"
    )


def warn_if_exposed(host: str, tls: bool, token: bool) -> str | None:
    """Log (and print to stderr) :func:`exposure_warning`; returns it."""
    msg = exposure_warning(host, tls, token)
    if msg is not None:
        log.warning(msg)
        if log.hasHandlers():  # else logging's last-resort handler has already written it to stderr
            print(f"glisp serve: WARNING: {msg}", file=sys.stderr, flush=True)
    return msg


def _refuse(kind: grpc.RpcMethodHandler | None, details: str) -> grpc.RpcMethodHandler:
    """A handler of the same streaming kind as ``kind`` that answers UNAUTHENTICATED."""

    def abort(request: Any, context: grpc.ServicerContext) -> Any:
        context.abort(grpc.StatusCode.UNAUTHENTICATED, details)

    req = kind is not None and kind.request_streaming
    resp = kind is not None and kind.response_streaming
    make = {
        (False, False): grpc.unary_unary_rpc_method_handler,
        (False, True): grpc.unary_stream_rpc_method_handler,
        (True, False): grpc.stream_unary_rpc_method_handler,
        (True, True): grpc.stream_stream_rpc_method_handler,
    }
    return make[(req, resp)](abort)


class BearerTokenInterceptor(grpc.ServerInterceptor):
    """Every RPC but grpc.health.v1 must carry ``authorization: Bearer <token>`` (else UNAUTHENTICATED)."""

    def __init__(self, token: str) -> None:
        self._expected = f"Bearer {token}".encode()

    def intercept_service(self, continuation: Callable, details: grpc.HandlerCallDetails) -> Any:
        if details.method.startswith(OPEN_SERVICES):
            return continuation(details)
        got = next((v for k, v in details.invocation_metadata or () if k == "authorization"), None)
        if got is not None and hmac.compare_digest(got.encode() if isinstance(got, str) else got, self._expected):
            return continuation(details)
        why = "no bearer token" if got is None else "wrong bearer token"
        return _refuse(continuation(details), f"{why} for {details.method} ({_HELP})")


def server_interceptors(cfg: ServeConfig) -> list[grpc.ServerInterceptor]:
    """The token check when a token is configured (``serve.token_file`` or ``$GLISP_TOKEN``), else none."""
    token = read_token(cfg.token_file, "serve.token_file")
    return [BearerTokenInterceptor(token)] if token else []


def server_credentials(cfg: ServeConfig) -> grpc.ServerCredentials | None:
    """TLS credentials from ``serve.tls_*`` (client certificates required when tls_client_ca is set)."""
    pair = _pair(cfg.tls_cert, cfg.tls_key, "serve")
    if pair is None:
        if cfg.tls_client_ca:
            raise ConfigError("config", "serve.tls_client_ca", "mutual TLS needs serve.tls_cert and serve.tls_key too")
        return None
    ca = read_secret(cfg.tls_client_ca, "serve.tls_client_ca") if cfg.tls_client_ca else None
    return grpc.ssl_server_credentials([pair], root_certificates=ca, require_client_auth=ca is not None)


def bind(server: grpc.Server, host: str, port: int, cfg: ServeConfig, token: bool) -> int:
    """Add the listening port (TLS when configured; warns when it is exposed); the bound port, 0 on failure."""
    creds = server_credentials(cfg)
    warn_if_exposed(host, creds is not None, token)
    address = f"{host}:{port}"
    return server.add_insecure_port(address) if creds is None else server.add_secure_port(address, creds)


def health_only_server(health_servicer: Any, host: str, port: int) -> tuple[grpc.Server | None, int]:
    """A plaintext server of grpc.health.v1 alone (``serve.health_port``; -1: none) and its bound port.

    For probes that cannot speak TLS (Kubernetes' gRPC probes): it tells SERVING or not, nothing else."""
    if port < 0:
        return None, -1
    from concurrent.futures import ThreadPoolExecutor

    from grpc_health.v1 import health_pb2_grpc

    server = grpc.server(ThreadPoolExecutor(max_workers=2, thread_name_prefix="glisp-health"))
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    bound = server.add_insecure_port(f"{host}:{port}")
    if bound == 0:
        raise OSError(f"serve: cannot bind the health port {host}:{port} (serve.health_port)")
    server.start()
    return server, bound


def check_own_client(serve: ServeConfig, client: ClientConfig) -> None:
    """serve-cluster checks its servers' health as a client: with TLS on, ``[client]`` must be able to connect."""
    if not (serve.tls_cert or serve.tls_key):
        return
    if not (client.tls or client.tls_ca or client.tls_cert):
        raise ConfigError(
            "config",
            "client.tls_ca",
            "serve.tls_cert is set, so serve-cluster checks its servers' "
            "health over TLS: set client.tls_ca to the CA that signed serve.tls_cert",
        )
    if serve.tls_client_ca and not client.tls_cert:
        raise ConfigError(
            "config",
            "client.tls_cert",
            "serve.tls_client_ca is set (mutual TLS), so serve-cluster "
            "needs a client certificate for its health checks: set client.tls_cert and client.tls_key",
        )


# ---------------------------------------------------------------------------------------------- client side
def channel_credentials(cfg: ClientConfig) -> grpc.ChannelCredentials | None:
    """TLS channel credentials from ``client.tls*`` (None: plaintext)."""
    pair = _pair(cfg.tls_cert, cfg.tls_key, "client")
    if not (cfg.tls or cfg.tls_ca or pair):
        return None
    ca = read_secret(cfg.tls_ca, "client.tls_ca") if cfg.tls_ca else None  # None: the system's trust store
    key, chain = pair if pair else (None, None)
    return grpc.ssl_channel_credentials(root_certificates=ca, private_key=key, certificate_chain=chain)


class _Details(
    collections.namedtuple(
        "_Details", ("method", "timeout", "metadata", "credentials", "wait_for_ready", "compression")
    ),
    grpc.ClientCallDetails,
):
    pass


def _with_token(metadata: Any, token: str) -> list[tuple[str, str]]:
    return [*(metadata or ()), ("authorization", f"Bearer {token}")]


class _TokenMetadata(
    grpc.UnaryUnaryClientInterceptor,
    grpc.UnaryStreamClientInterceptor,
    grpc.StreamUnaryClientInterceptor,
    grpc.StreamStreamClientInterceptor,
):
    """Adds the bearer token to every call of a plaintext (sync) channel."""

    def __init__(self, token: str) -> None:
        self.token = token

    def _call(self, continuation: Callable, d: grpc.ClientCallDetails, request: Any) -> Any:
        md = _with_token(d.metadata, self.token)
        return continuation(
            _Details(d.method, d.timeout, md, d.credentials, d.wait_for_ready, getattr(d, "compression", None)), request
        )

    intercept_unary_unary = intercept_unary_stream = _call
    intercept_stream_unary = intercept_stream_stream = _call


def _aio_interceptors(token: str) -> list[Any]:
    """One token interceptor per call kind (grpc.aio files each interceptor under one kind only)."""
    from grpc import aio

    async def call(self: Any, continuation: Callable, d: aio.ClientCallDetails, request: Any) -> Any:
        md = aio.Metadata(*_with_token(d.metadata, token))
        return await continuation(
            aio.ClientCallDetails(d.method, d.timeout, md, d.credentials, d.wait_for_ready), request
        )

    kinds = {
        aio.UnaryUnaryClientInterceptor: "intercept_unary_unary",
        aio.UnaryStreamClientInterceptor: "intercept_unary_stream",
        aio.StreamUnaryClientInterceptor: "intercept_stream_unary",
        aio.StreamStreamClientInterceptor: "intercept_stream_stream",
    }
    return [type(f"_Aio{base.__name__}", (base,), {name: call})() for base, name in kinds.items()]


def open_channel(
    address: str, cfg: ClientConfig | None = None, options: Sequence[tuple[str, Any]] = (), aio: bool = False
) -> Any:
    """A channel to one of our servers (grpc.aio when ``aio``), secured as ``client.*`` says.

    Over TLS the token travels as call credentials (gRPC sends them only on secure channels); over
    plaintext (a token on loopback) an interceptor adds the same ``authorization`` header.
    """
    cfg = cfg or ClientConfig()
    opts = list(options)
    if cfg.tls_server_name:
        opts.append(("grpc.ssl_target_name_override", cfg.tls_server_name))
    creds = channel_credentials(cfg)
    token = read_token(cfg.token_file, "client.token_file")
    mod = grpc.aio if aio else grpc
    if creds is not None:
        if token:
            creds = grpc.composite_channel_credentials(creds, grpc.access_token_call_credentials(token))
        return mod.secure_channel(address, creds, options=opts)
    if token and not is_loopback(address.rsplit(":", 1)[0]):
        log.warning("sending the bearer token to %s in clear text (set client.tls or client.tls_ca)", address)
    if aio:
        return grpc.aio.insecure_channel(
            address, options=opts, interceptors=_aio_interceptors(token) if token else None
        )
    ch = grpc.insecure_channel(address, options=opts)
    return grpc.intercept_channel(ch, _TokenMetadata(token)) if token else ch
