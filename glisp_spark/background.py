"""``Background``: one driver-side step in a thread while the caller runs another, under the same job group.

Why: a small graph's Spark jobs leave a core idle, so ingest reads the vertex tables while the edge job
runs, and writes the vertex-side tables while the edges are mapped.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar, cast

T = TypeVar("T")


class Background(Generic[T]):
    """``fn()`` in a thread that keeps the caller's Spark job group (``InheritableThread``), so two small
    jobs can use both cores. ``result()`` joins and re-raises the thread's error; ``wait()`` only joins."""

    def __init__(self, fn: Callable[[], T]) -> None:
        from pyspark import InheritableThread

        self._res: T | None = None
        self._err: BaseException | None = None

        def run() -> None:
            try:
                self._res = fn()
            except BaseException as e:  # noqa: BLE001 - handed to the caller by result()
                self._err = e

        self._thread = InheritableThread(target=run)
        self._thread.start()

    def wait(self) -> None:
        self._thread.join()

    def result(self) -> T:
        self._thread.join()
        if self._err is not None:
            raise self._err
        return cast(T, self._res)  # set by run(), which raised nothing
