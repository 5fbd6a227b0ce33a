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
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


# ---- the S3 server's environment, set at import time ---------------------------------------------


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


S3_HOST = "127.0.0.1"
S3_PORT = _free_port()
S3_ENDPOINT = f"http://{S3_HOST}:{S3_PORT}"
S3_BUCKET = "glisp-test"

# a real store must never be reached: drop what could select other credentials or another endpoint
for _k in (
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "AWS_ROLE_ARN",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS",
):
    os.environ.pop(_k, None)
os.environ.update(
    {
        "AWS_ACCESS_KEY_ID": "glisp-test",
        "AWS_SECRET_ACCESS_KEY": "glisp-test",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": S3_ENDPOINT,
        "AWS_ENDPOINT_URL_S3": S3_ENDPOINT,  # read before AWS_ENDPOINT_URL: it must not point elsewhere
        "AWS_CONFIG_FILE": os.devnull,  # no profile in ~/.aws can add an endpoint or credentials
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        "AWS_EC2_METADATA_DISABLED": "true",
    }
)
for _k in ("NO_PROXY", "no_proxy"):  # a proxy must not carry the server's traffic elsewhere
    os.environ[_k] = ",".join(x for x in (os.environ.get(_k, ""), S3_HOST) if x)


def _moto_command() -> list[str]:
    script = Path(sys.executable).with_name("moto_server")
    head = [str(script)] if script.exists() else [sys.executable, "-m", "moto.server"]
    return [*head, "-H", S3_HOST, "-p", str(S3_PORT)]


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1):
            return True
    except urllib.error.HTTPError:
        return True  # it answered, with an error status
    except OSError:
        return False


@pytest.fixture(scope="session")
def s3_server():
    """moto_server on 127.0.0.1:S3_PORT with the bucket S3_BUCKET; yields the endpoint URL."""
    import boto3

    log = tempfile.NamedTemporaryFile(prefix="glisp-moto-", suffix=".log", delete=False)
    proc = subprocess.Popen(_moto_command(), stdout=subprocess.DEVNULL, stderr=log, env=os.environ.copy())
    try:
        deadline = time.monotonic() + 60
        while not _answers(S3_ENDPOINT + "/"):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"moto_server on {S3_ENDPOINT} did not start (exit {proc.poll()}): "
                    + Path(log.name).read_text()[-2000:]
                )
            time.sleep(0.1)
        if proc.poll() is not None:  # another process answered on the port and ours could not bind it
            raise RuntimeError(f"moto_server could not bind {S3_ENDPOINT}: " + Path(log.name).read_text()[-2000:])
        boto3.client("s3", endpoint_url=S3_ENDPOINT).create_bucket(Bucket=S3_BUCKET)
        yield S3_ENDPOINT
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        os.unlink(log.name)


@pytest.fixture
def s3_root(s3_server, request: pytest.FixtureRequest):
    """A fresh prefix of the test bucket, ``s3://glisp-test/<test name>-<uuid>``, as a StoreURI."""
    from glisp_core.storage.uri import parse_uri

    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", request.node.name).strip("-")[:80]
    return parse_uri(f"s3://{S3_BUCKET}/{name}-{uuid.uuid4().hex[:8]}")


@pytest.fixture(params=["local", "s3"])
def any_root(request: pytest.FixtureRequest, tmp_path: Path):
    """A dataset root on the local disk and, in a second run of the test, on the S3 server."""
    from glisp_core.storage.uri import parse_uri

    if request.param == "local":
        return parse_uri(tmp_path / "root")
    return request.getfixturevalue("s3_root")


# ---- Spark and config ------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory):
    from glisp_core.config import SparkConfig
    from glisp_spark.session import get_spark

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    conf = SparkConfig(
        master="local[2]",
        app_name="glisp-tests",
        driver_memory="3g",
        shuffle_partitions=4,
        ui=False,
        log_level="ERROR",
    )
    s = get_spark(conf, checkpoint_dir=str(tmp_path_factory.mktemp("checkpoints")))
    yield s
    s.stop()


@pytest.fixture
def cfg():
    """Defaults from conf/default.toml, with no environment overrides leaking in."""
    from glisp_core.config import load_config

    return load_config(env={})
