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


# ---- the root cause inside Spark's and Py4J's wrappers, from real failures of the shared local session ----
def _raised(fn) -> BaseException:
    with pytest.raises(Exception) as ei:
        fn()
    return ei.value


def test_a_python_worker_failure_names_what_the_task_raised_in_full(spark):
    long = "the cause, " + "x" * 1000

    def task(batches):
        raise ValueError(long)
        yield from batches

    e = _raised(lambda: spark.range(3).mapInArrow(task, "id long").collect())
    assert str(e).startswith("An exception was thrown from the Python worker")  # the wrapper, naming nothing
    reason = failure_reason(e)
    assert reason == f"ValueError: {long} (raised in a Spark Python worker)", reason[:300]

    e = _raised(lambda: spark.sparkContext.parallelize([1, 2], 2).map(lambda x: 1 // 0).collect())
    assert failure_reason(e).startswith("ZeroDivisionError: integer division or modulo by zero")


def test_a_jvm_call_failure_names_the_java_exception(spark):
    e = _raised(lambda: spark.sparkContext._jvm.java.io.FileInputStream("/nonexistent-glisp-file"))
    assert str(e).startswith("An error occurred while calling")  # Py4J's wrapper, naming nothing
    reason = failure_reason(e)
    assert reason.startswith("java.io.FileNotFoundException: /nonexistent-glisp-file"), reason


def test_a_stage_failure_trace_names_its_deepest_cause():
    trace = (
        "An error occurred while calling o703.collectToPython.\n"
        ": org.apache.spark.SparkException: Job aborted due to stage failure: Task 3 in stage 7.0 failed 4 times\n"
        "\tat org.apache.spark.scheduler.DAGScheduler.failJobAndIndependentStages(DAGScheduler.scala:2898)\n"
        "Caused by: org.apache.spark.shuffle.FetchFailedException: Failed to open /tmp/blockmgr-1/shuffle_0_1.data\n"
        "\tat org.apache.spark.storage.ShuffleBlockFetcherIterator.next(ShuffleBlockFetcherIterator.scala:1234)\n"
        "Caused by: java.io.FileNotFoundException: /tmp/blockmgr-1/shuffle_0_1.data (No such file or directory)\n"
    )
    want = "java.io.FileNotFoundException: /tmp/blockmgr-1/shuffle_0_1.data (No such file or directory)"
    assert failure_reason(RuntimeError(trace)) == f"{want} (raised in Spark)"  # the text of py4j's Py4JJavaError


def test_an_upload_that_timed_out_is_the_store_not_answering(monkeypatch):
    """An S3 endpoint that takes the connection and never answers: the part upload of an atomic write times out
    (pyarrow says "AWS Error NETWORK_CONNECTION ... Timeout was reached"). The store raises it as the store not
    answering within its limits, naming the URI, and the bare client error is not read as "cannot be reached"."""
    from glisp_core.storage.backend import StoreUnavailable
    from glisp_core.storage.store import Store

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)  # the kernel completes every connection; nothing ever reads or answers
    endpoint = f"http://127.0.0.1:{silent.getsockname()[1]}"
    for k, v in {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "y"}.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    for k, v in {"TIMEOUT_S": "1", "CONNECT_TIMEOUT_S": "1", "RETRIES": "1"}.items():
        monkeypatch.setenv(f"GLISP_DATASET__STORE_{k}", v)
    try:
        st = Store("s3://glisp-stalled/root")
        with pytest.raises(StoreUnavailable) as ei, st.open_atomic(st.root / "part.bin") as f:
            f.write(b"x" * 1000)
    finally:
        silent.close()
    msg = str(ei.value)
    assert "s3://glisp-stalled/root/part.bin" in msg and "did not answer within dataset.store_timeout_s=1" in msg, msg
    raw = ei.value.__cause__
    assert isinstance(raw, OSError) and "Timeout was reached" in str(raw), raw
    assert failure_reason(raw).startswith("the store's endpoint did not answer in time"), failure_reason(raw)
