"""The server-wide memory budget of requests in progress (glisp_sampling.budget)."""

from __future__ import annotations

import threading
import time

import pytest

from glisp_sampling.budget import OverBudget, WorkBudget


def test_a_reservation_waits_for_others_and_is_released_when_the_request_ends() -> None:
    b = WorkBudget(100)
    held, got = threading.Event(), []

    def first() -> None:
        with b.request():
            b.reserve(80, "first")
            held.set()
            time.sleep(0.3)

    t = threading.Thread(target=first)
    t.start()
    held.wait()
    t0 = time.monotonic()
    with b.request(wait_s=5.0):
        b.reserve(50, "second")  # waits until the first request ended
        got.append(time.monotonic() - t0)
        assert b.used == 50
    t.join()
    assert got[0] > 0.1 and b.used == 0 and b.peak == 80


def test_a_reservation_that_cannot_be_had_by_the_deadline_or_at_all_is_refused() -> None:
    b = WorkBudget(100)
    with b.request():
        b.reserve(90, "first")
        with pytest.raises(OverBudget, match="serve.max_inflight_mb"):
            b.reserve(200, "too big")  # more than the whole budget: refused at once
    with b.request():
        b.reserve(90, "holder")
        out: list[BaseException] = []

        def other() -> None:
            with b.request(wait_s=0.2):
                try:
                    b.reserve(20, "late")
                except OverBudget as e:
                    out.append(e)

        t = threading.Thread(target=other)
        t.start()
        t.join()
        assert out and str(out[0]).startswith("late needs") and "deadline" in str(out[0])
    assert b.used == 0  # a refused request keeps nothing
    unlimited = WorkBudget(0)
    with unlimited.request():
        unlimited.reserve(1 << 40, "anything")
    assert unlimited.used == 0
