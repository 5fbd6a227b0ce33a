"""``failure_reason`` tells a store that cannot be reached from a dead Spark JVM: both say "Connection refused"."""

from __future__ import annotations

import socket

import pytest

from glisp_core.errors import failure_reason


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed once the with-block ends: nothing listens there


def test_an_unreachable_s3_endpoint_is_named_as_the_store_not_the_jvm():
    import boto3
    from botocore.config import Config

    port = _closed_port()
    client = boto3.client(
        "s3",
        endpoint_url=f"http://127.0.0.1:{port}",
        aws_access_key_id="x",
        aws_secret_access_key="y",
        region_name="us-east-1",
        config=Config(retries={"max_attempts": 1}, connect_timeout=2),
    )
    with pytest.raises(Exception) as ei:  # the real error boto3 raises for a closed port
        client.head_bucket(Bucket="b")
    reason = failure_reason(ei.value)
    assert reason.startswith("the S3 endpoint cannot be reached") and f"port={port}" in reason, reason


def test_pyarrow_s3_and_a_dead_jvm_keep_their_names():
    import pyarrow.fs as pafs

    port = _closed_port()
    fs = pafs.S3FileSystem(
        endpoint_override=f"127.0.0.1:{port}", scheme="http", access_key="x", secret_key="y", connect_timeout=2
    )
    with pytest.raises(OSError) as ei:
        fs.get_file_info("b/k")
    assert "cannot be reached" in failure_reason(ei.value) and "JVM" not in failure_reason(ei.value)
    jvm = ConnectionRefusedError("[Errno 111] Connection refused")  # what py4j's socket raises
    assert failure_reason(jvm).startswith("the Spark JVM died or cannot be reached")
