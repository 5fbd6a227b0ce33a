"""S3 and S3-compatible stores: pyarrow's S3 filesystem, and boto3 for what it lacks (``PutObject`` with
``If-None-Match: *``, a GET of a small object in one request). Both read the standard AWS chain: the
``AWS_*`` variables, ``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL``, ``~/.aws`` and instance or pod roles."""

from __future__ import annotations

import os
from typing import Any

import pyarrow.fs as pafs

from glisp_core.storage.backend import Backend, Capabilities
from glisp_core.storage.limits import limits
from glisp_core.storage.uri import StoreURI

_CLIENT: Any = None


def _endpoint() -> dict[str, str]:
    """``AWS_ENDPOINT_URL_S3`` or ``AWS_ENDPOINT_URL`` (an S3-compatible store), as the AWS CLI reads them."""
    url = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if not url:
        return {}
    scheme, _, host = url.partition("://")
    return {"endpoint_override": host.rstrip("/"), "scheme": scheme} if host else {"endpoint_override": url}


def _client() -> Any:
    """One boto3 client per process (it reads the same chain as pyarrow)."""
    global _CLIENT
    if _CLIENT is None:
        import boto3
        from botocore.config import Config

        lim = limits()
        conf = Config(
            connect_timeout=lim.connect_s,
            read_timeout=lim.read_s,
            retries={"total_max_attempts": lim.retries, "mode": "standard"},
        )
        _CLIENT = boto3.client("s3", config=conf)
    return _CLIENT


class S3Backend(Backend):
    name = "s3"
    capabilities = Capabilities(conditional_create=True, consistent_listing=True, server_side_copy=True)
    endpoint = "AWS_ENDPOINT_URL (or the store's address)"
    credentials = (
        "set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY (or AWS_PROFILE, or an instance role), and AWS_ENDPOINT_URL "
        "for an S3-compatible store"
    )

    def filesystem(self) -> pafs.FileSystem:
        lim = limits()
        return pafs.S3FileSystem(
            **_endpoint(),
            connect_timeout=lim.connect_s,
            request_timeout=lim.read_s,
            retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=lim.retries),
        )

    def create_exclusive(self, u: StoreURI, data: bytes) -> bool:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            _client().put_object(Bucket=u.authority, Key=u.path.lstrip("/"), Body=data, IfNoneMatch="*")
            return True
        except ClientError as e:
            code = str(e.response.get("Error", {}).get("Code", ""))
            if code in ("PreconditionFailed", "412", "ConditionalRequestConflict"):
                return False
            raise OSError(f"{u.qualified}: conditional create failed ({code}: {e})") from None
        except BotoCoreError as e:  # no connection, no answer in time: the Store names the store and limits
            raise OSError(f"{u.qualified}: conditional create failed ({e})") from None

    def get(self, u: StoreURI) -> bytes:
        """One GET: pyarrow's stream reads an object in ranges, which a concurrent replacement (LATEST, a
        lease) can interleave; its size comes from a HEAD before."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            body: bytes = _client().get_object(Bucket=u.authority, Key=u.path.lstrip("/"))["Body"].read()
            return body
        except ClientError as e:
            code = str(e.response.get("Error", {}).get("Code", ""))
            if code in ("NoSuchKey", "404", "NotFound"):
                raise FileNotFoundError(f"{u.qualified}: no such object") from None
            raise OSError(f"{u.qualified}: read failed ({code}: {e})") from None
        except BotoCoreError as e:
            raise OSError(f"{u.qualified}: read failed ({e})") from None
