"""How long a store call may take, and how often it is tried, in every process of a run.

Why here and in the environment: a store is called by the driver, by Spark's Python workers (on other hosts),
by sampling servers and by trainers. The CLI sets the limits from ``dataset.store_connect_timeout_s``,
``dataset.store_timeout_s`` and ``dataset.store_retries`` into its environment before any of them starts, as the
``GLISP_DATASET__...`` variables the configuration itself reads, so every child process inherits them; the Spark
session forwards them to executors on a cluster (``spark.executorEnv``). A backend reads :func:`limits` when it
opens its clients.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

ENV = {
    "connect_s": "GLISP_DATASET__STORE_CONNECT_TIMEOUT_S",
    "read_s": "GLISP_DATASET__STORE_TIMEOUT_S",
    "retries": "GLISP_DATASET__STORE_RETRIES",
}


@dataclass(frozen=True)
class StoreLimits:
    """``connect_s``: to open a connection; ``read_s``: for an answer to arrive (between bytes); ``retries``: the
    attempts of one call in all (at least 1). A call fails after about ``retries * (connect_s + read_s)``."""

    connect_s: float = 5.0
    read_s: float = 30.0
    retries: int = 3

    @property
    def total_s(self) -> float:
        """The longest one call can take, its retries included (their back-off is under a second each)."""
        return self.retries * (self.connect_s + self.read_s + 1.0)

    def describe(self) -> str:
        return (
            f"dataset.store_timeout_s={self.read_s:g}, store_connect_timeout_s={self.connect_s:g}, "
            f"store_retries={self.retries}"
        )


def limits() -> StoreLimits:
    """The limits of this process: from the environment the CLI (or its parent) set, else the defaults."""
    d = StoreLimits()

    def num(key: str, default: float) -> float:
        raw = os.environ.get(ENV[key], "").strip().strip("\"'")
        try:
            return float(raw) if raw else default
        except ValueError:
            return default

    return StoreLimits(
        connect_s=max(0.1, num("connect_s", d.connect_s)),
        read_s=max(0.1, num("read_s", d.read_s)),
        retries=max(1, int(num("retries", d.retries))),
    )


_BEFORE: dict[str, str | None] = {}  # the variables as the process found them, before set_limits exported its own


def set_limits(connect_s: float, read_s: float, retries: int) -> None:
    """This process's limits, and its children's (the CLI calls it with the configuration's values)."""
    if not _BEFORE:
        _BEFORE.update({v: os.environ.get(v) for v in ENV.values()})
    os.environ[ENV["connect_s"]] = f"{float(connect_s):g}"
    os.environ[ENV["read_s"]] = f"{float(read_s):g}"
    os.environ[ENV["retries"]] = str(int(retries))


def limits_env() -> dict[str, str]:
    """The variables that carry this process's limits to another process (Spark's executors)."""
    return {v: os.environ[v] for v in ENV.values() if os.environ.get(v)}


def inherited_environment() -> dict[str, str]:
    """The environment as this process received it: without what :func:`set_limits` exported (so that
    ``glisp config show`` does not take the CLI's own export for the user's variable)."""
    env = dict(os.environ)
    for k, v in _BEFORE.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    return env
