"""Fixtures of the cluster tests: a real standalone cluster (glisp_testing.standalone) and a directory that
the driver and its workers both see."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from glisp_testing.standalone import Standalone, unavailable
from tests.tiers import needs


@pytest.fixture(scope="session")
@needs("standalone")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    """A master and two isolated workers for the whole session, stopped at its end even after a failure; their
    hosts' environment carries the test S3 server's address and credentials (as an instance role would)."""
    reason = unavailable()
    if reason:
        pytest.skip(reason)
    import pyspark

    aws = {k: v for k, v in os.environ.items() if k.startswith("AWS_") or k in ("NO_PROXY", "no_proxy")}
    aws["SPARK_DAEMON_JAVA_OPTS"] = os.environ.get("SPARK_DAEMON_JAVA_OPTS", "")  # the tests' JVM options
    cluster = Standalone(tmp_path_factory.mktemp("standalone-logs"), str(Path(pyspark.__file__).parent), worker_env=aws)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def shared_dir() -> Iterator[Path]:
    """A directory the driver and the workers both see (not under /tmp, which each worker has its own of)."""
    d = Path(tempfile.mkdtemp(prefix="glisp-cluster-", dir="/var/tmp"))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)
