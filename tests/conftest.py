"""One real local Spark session per test run, shared by every test that asks for it; one local S3 server.

The S3 server is moto's (a real S3 API over HTTP on 127.0.0.1, conditional puts included). Its address and
throw-away credentials go into the environment when this file is imported, before any Spark session, boto3
client or subprocess exists, so everything the tests start talks to it and nothing else: variables that
could route a request to a real store (a profile, a session token, shared config files, an S3-only
endpoint) are replaced or removed.
"""

from __future__ import annotations

import os
import re
import sys
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

pytest.register_assert_rewrite("tests.tiers")  # imported here for `needs`, and loaded as a plugin below
from glisp_testing import emulators  # noqa: E402
from glisp_testing.jvm_opts import archive_path, build_archive, use_driver_archive, use_test_jvm_options  # noqa: E402
from glisp_testing.s3server import MotoServer, free_port, use_only  # noqa: E402
from tests.tiers import needs  # noqa: E402

pytest_plugins = ["tests.tiers"]

# ---- the S3 server's environment, set at import time ---------------------------------------------


S3_HOST = "127.0.0.1"
S3_PORT = free_port()
S3_ENDPOINT = f"http://{S3_HOST}:{S3_PORT}"
S3_BUCKET = "glisp-test"

use_only(S3_ENDPOINT, os.environ)
GCS_EMULATOR = emulators.FakeGcs()  # GCS and Azure emulators: addresses fixed (and exported) now, started on demand
AZURITE = emulators.Azurite()
emulators.use_only(GCS_EMULATOR.endpoint, AZURITE.endpoint, os.environ)

use_test_jvm_options(os.environ)  # every JVM the tests start: see glisp_testing.jvm_opts
# one OpenMP thread per process (torch's intra-op pool): two pytest workers share two cores with their servers,
# trainers and JVMs, where a second thread per process costs more CPU than it saves (docs/testing.md);
# code that sets its own count (inference's tasks) keeps it
os.environ.setdefault("OMP_NUM_THREADS", "1")


def pytest_configure(config: pytest.Config) -> None:
    """Before any test, unless this run is the fast lane (which starts no JVM): the drivers' class archive,
    built by the controller before xdist starts its workers (once per machine and virtualenv, about 30 s; under
    ``make test`` already built beside the fast lane, or waited for) and mapped by every driver a test starts;
    a driver started without it runs as before."""
    if (config.option.markexpr or "").strip() == "fast":
        return
    archive = archive_path()
    if not hasattr(config, "workerinput"):
        build_archive(archive)
    use_driver_archive(os.environ, archive)


@pytest.fixture(scope="session")
@needs("s3")
def s3_server():
    """moto_server on 127.0.0.1:S3_PORT with the bucket S3_BUCKET; yields the endpoint URL."""
    server = MotoServer(port=S3_PORT)
    try:
        server.start()
        server.create_bucket(S3_BUCKET)
        yield server.endpoint
    finally:
        server.stop()


@pytest.fixture(scope="session")
def new_s3_root(s3_server):
    """``new_s3_root(name)``: ``s3://glisp-test-<uuid>/<name>`` in a bucket of its own: moto lists a prefix by
    walking every key of its bucket, so in one shared bucket a listing's cost would grow with every earlier
    test's files."""
    import boto3

    from glisp_core.storage.uri import parse_uri

    client = boto3.client("s3", endpoint_url=s3_server)

    def new(name: str):
        bucket = f"{S3_BUCKET}-{uuid.uuid4().hex[:12]}"
        client.create_bucket(Bucket=bucket)
        return parse_uri(f"s3://{bucket}/{name}")

    return new


@pytest.fixture
def s3_root(new_s3_root, request: pytest.FixtureRequest):
    """A root in a fresh bucket, ``s3://glisp-test-<uuid>/<test name>``, as a StoreURI."""
    return new_s3_root(re.sub(r"[^A-Za-z0-9_.-]+", "-", request.node.name).strip("-")[:80])


@pytest.fixture(scope="session")
@needs("gcs")
def gcs_server():
    """fake-gcs-server on 127.0.0.1 (STORAGE_EMULATOR_HOST names it); yields its endpoint."""
    try:
        yield GCS_EMULATOR.start().endpoint
    finally:
        GCS_EMULATOR.stop()


@pytest.fixture(scope="session")
@needs("azure")
def azure_server():
    """Azurite's blob service on 127.0.0.1 (AZURE_STORAGE_CONNECTION_STRING names it); yields its endpoint."""
    try:
        yield AZURITE.start().endpoint
    except FileNotFoundError as e:
        pytest.skip(str(e))
    finally:
        AZURITE.stop()


def _test_name(request: pytest.FixtureRequest) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", request.node.name).strip("-")[:80]


@pytest.fixture
def gcs_root(gcs_server, request: pytest.FixtureRequest):
    """A root in a fresh bucket of the GCS emulator, ``gs://glisp-test-<uuid>/<test name>``."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    from glisp_core.storage.uri import parse_uri

    bucket = f"{S3_BUCKET}-{uuid.uuid4().hex[:12]}"
    client = storage.Client("glisp", AnonymousCredentials(), client_options={"api_endpoint": gcs_server})
    client.create_bucket(bucket)
    return parse_uri(f"gs://{bucket}/{_test_name(request)}")


@pytest.fixture
def azure_root(azure_server, request: pytest.FixtureRequest):
    """A root in a fresh container of Azurite, ``abfs://glisp-test-<uuid>/<test name>``."""
    from azure.storage.blob import BlobServiceClient

    from glisp_core.storage.uri import parse_uri

    container = f"{S3_BUCKET}-{uuid.uuid4().hex[:12]}"
    BlobServiceClient.from_connection_string(os.environ["AZURE_STORAGE_CONNECTION_STRING"]).create_container(container)
    return parse_uri(f"abfs://{container}/{_test_name(request)}")


@pytest.fixture(params=["local", "s3"])
def any_root(request: pytest.FixtureRequest, tmp_path: Path):
    """A dataset root on the local disk and, in a second run of the test, on the S3 server."""
    from glisp_core.storage.uri import parse_uri

    if request.param == "local":
        return parse_uri(tmp_path / "root")
    return request.getfixturevalue("s3_root")


# ---- Spark and config ------------------------------------------------------------------------------


@pytest.fixture(scope="session")
@needs("spark")
def spark(tmp_path_factory: pytest.TempPathFactory):
    from glisp_core.config import SparkConfig
    from glisp_infer.cli import TASK_MODULES
    from glisp_spark.session import get_spark

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # adaptive execution off in this session only: on the tests' tiny tables its re-planning after every stage
    # costs more CPU than the work (51 Spark-tier tests: 131 CPU-s instead of 159); the CLI subprocesses (every
    # pipeline, fault, object-store and cluster test) keep the users' default, adaptive on. Two shuffle partitions,
    # one per core of local[2]: a shuffle still has more than one task, each stage half the tasks of four
    # (docs/results/testing-2026-12-02-fresh.md)
    conf = SparkConfig(
        master="local[2]",
        app_name="glisp-tests",
        driver_memory="3g",
        shuffle_partitions=2,
        adaptive=False,
        ui=False,
        log_level="ERROR",
    )
    # the session's Python workers start with torch and PyG imported (glisp_spark.daemon): its inference and
    # training tests' tasks load models, and a fresh worker would import them anew (about 4.5 CPU-s)
    s = get_spark(conf, str(tmp_path_factory.mktemp("checkpoints")), preload=TASK_MODULES)
    yield s
    s.stop()


@pytest.fixture
def cfg():
    """Defaults from conf/default.toml, with no environment overrides leaking in."""
    from glisp_core.config import load_config

    return load_config(env={})


# ---- subprocesses --------------------------------------------------------------------------------------------


@pytest.fixture
@needs("subprocess_jvm")
def jvm_processes() -> None:
    """Asked for by a test that runs a Spark stage in a CLI subprocess (its own JVM): that is its tier."""


@pytest.fixture
@needs("servers")
def server_processes() -> None:
    """Asked for by a test that starts sampling servers in subprocesses: that is its tier."""
