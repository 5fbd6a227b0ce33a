"""The S3 server of the tests decides conditional creates atomically, as S3 does (moto alone checks, then
writes: two racing creates can both pass). A stand-in app with moto's check-then-write and a pause between
the two steps: bare, two racing creates both "win"; behind ``atomic_preconditions``, exactly one does."""

from __future__ import annotations

import threading
import time

from glisp_testing.moto_atomic import atomic_preconditions


def _check_then_write_app():
    objects: dict[str, bytes] = {}

    def app(environ, start_response):
        key = environ["PATH_INFO"]
        if environ.get("HTTP_IF_NONE_MATCH") == "*" and key in objects:
            start_response("412 Precondition Failed", [])
            return [b""]
        time.sleep(0.05)  # the window between moto's check and its write
        objects[key] = b"x"
        start_response("200 OK", [])
        return [b""]

    return app


def _race(app, writers: int = 8) -> int:
    wins, gate = [], threading.Barrier(writers)

    def put() -> None:
        status: list[str] = []
        gate.wait()
        list(app({"PATH_INFO": "/b/k", "HTTP_IF_NONE_MATCH": "*"}, lambda s, h: status.append(s)))
        if status[0].startswith("200"):
            wins.append(1)

    threads = [threading.Thread(target=put) for _ in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return len(wins)


def test_conditional_creates_are_atomic_behind_the_lock():
    assert _race(_check_then_write_app()) > 1  # what moto does by itself
    assert _race(atomic_preconditions(_check_then_write_app())) == 1
