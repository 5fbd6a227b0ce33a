"""``moto_server`` whose conditional writes are atomic, as S3's are: ``python -m glisp_testing.moto_atomic -H
HOST -p PORT``.

Why: moto checks ``If-None-Match: *`` (and ``If-Match``) and then writes, in two steps, on a threaded server;
two conditional creates of one key that arrive together can both pass the check (seen under load: two of
eight racing writers "won" a record). S3 itself decides them atomically. Here every request that carries a
precondition runs under one lock, start to end, so two of them never interleave; other requests run as moto
runs them.

Moto's dispatcher also finds each request's backend from its host by listing moto's package directory (a
``stat`` of each of some 200 entries) and trying every service's URL patterns, under a lock that every request
takes: a fifth of the server's CPU in the tests. The answer for a host never changes, so it is kept per host
(:func:`memoized_backends`).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterable
from typing import Any

_LOCK = threading.Lock()


def atomic_preconditions(app: Callable[..., Iterable[bytes]]) -> Callable[..., Iterable[bytes]]:
    """The WSGI ``app`` with every request that has ``If-None-Match`` or ``If-Match`` run under one lock."""

    def wrapped(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("HTTP_IF_NONE_MATCH") or environ.get("HTTP_IF_MATCH"):
            with _LOCK:
                return list(app(environ, start_response))  # the whole answer, before the next one starts
        return app(environ, start_response)

    return wrapped


def memoized_backends(app: Any) -> Any:
    """``app`` (moto's ``DomainDispatcherApplication``) with its host-to-backend lookup kept per host: moto's
    own answer, found once."""
    find = app.get_backend_for_host
    known: dict[str | None, Any] = {}

    def backend_for_host(host: str | None) -> Any:
        if host not in known:
            known[host] = find(host)
        return known[host]

    app.get_backend_for_host = backend_for_host
    return app


def main(argv: list[str] | None = None) -> None:
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
    from werkzeug.serving import run_simple

    p = argparse.ArgumentParser()
    p.add_argument("-H", "--host", default="127.0.0.1")
    p.add_argument("-p", "--port", type=int, required=True)
    args = p.parse_args(argv)
    os.environ.setdefault("MOTO_PORT", str(args.port))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    app = memoized_backends(DomainDispatcherApplication(create_backend_app))
    run_simple(args.host, args.port, atomic_preconditions(app), threaded=True)


if __name__ == "__main__":
    main()
