"""The S3 server of the tests decides conditional creates atomically, as S3 does (moto alone checks, then
writes: two racing creates can both pass). A stand-in app with moto's check-then-write and a pause between
the two steps: bare, two racing creates both "win"; behind ``atomic_preconditions``, exactly one does. Its
dispatcher finds each host's backend once (``memoized_backends``), with moto's own answer."""

from __future__ import annotations

import threading
import time

from glisp_testing.moto_atomic import atomic_preconditions, memoized_backends


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


HOSTS = [
    None,
    "moto_api",
    "s3",
    "s3.amazonaws.com",
    "s3.us-east-1.amazonaws.com",
    "bucket.s3.amazonaws.com",
    "sqs.us-east-1.amazonaws.com",
    "nothing.example",
]


def test_each_hosts_backend_is_motos_own_answer_found_once():
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

    plain = DomainDispatcherApplication(create_backend_app)
    app = DomainDispatcherApplication(create_backend_app)
    asked: list[str | None] = []
    find = app.get_backend_for_host
    app.get_backend_for_host = lambda host: asked.append(host) or find(host)
    memoized_backends(app)
    want = [plain.get_backend_for_host(h) for h in HOSTS]
    assert "s3" in want and want[0] is None
    assert [app.get_backend_for_host(h) for h in HOSTS] == want
    assert [app.get_backend_for_host(h) for h in HOSTS] == want
    assert asked == HOSTS  # each host looked up once
