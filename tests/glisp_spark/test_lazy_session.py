"""A lazy session starts on first use, or in the background when a stage already knows it has work."""

from __future__ import annotations

import threading

import pytest

import glisp_spark.session as S
from glisp_core.errors import GlispError


def test_a_failed_background_start_is_raised_by_the_first_use_and_the_next_use_starts_again(monkeypatch):
    """An injected start failure (no Java, a bad setting) stays in the starting thread until the session is
    used; the user sees it in the thread that used the session, and a later use tries again."""
    calls: list[str] = []
    allow = threading.Event()

    def failing(conf, checkpoint_dir, preload):
        calls.append(threading.current_thread().name)
        allow.wait(10)  # still starting when the first use comes
        raise GlispError("Java not found (injected)")

    monkeypatch.setattr(S, "get_spark", failing)
    lazy = S.LazySpark()
    assert not S.started(lazy)
    S.prestart(lazy)
    S.prestart(lazy)  # a second call starts nothing more
    assert S.started(lazy)  # starting counts: a stage's progress may read its context
    allow.set()
    with pytest.raises(GlispError, match="injected"):
        lazy.session()
    assert calls == ["glisp-spark-start"]  # started once, in the background thread
    with pytest.raises(GlispError, match="injected"):
        lazy.session()  # the failure is not kept: the next use starts (and here fails) again, in this thread
    assert calls == ["glisp-spark-start", threading.current_thread().name]


def test_prestart_gives_the_running_session_and_leaves_a_session_alone(spark):
    lazy = S.LazySpark()
    S.prestart(lazy)
    assert lazy.session() is spark  # getOrCreate in the background thread: the process's one session
    assert lazy.sparkContext is spark.sparkContext
    S.prestart(spark)  # a session, not a LazySpark: nothing to do
