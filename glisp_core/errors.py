"""One error hierarchy, so callers can catch GLISP's own failures and messages read alike."""

from __future__ import annotations

from collections.abc import Sequence


class GlispError(ValueError):
    """Base of every error GLISP raises on purpose."""


class ConfigError(GlispError):
    """A config file, env override or CLI flag is wrong: names the source, the key and the expected type."""

    def __init__(self, source: str, key: str, message: str) -> None:
        self.source, self.key = source, key
        super().__init__(f"{source}, key {key}: {message}")


class BadInputError(GlispError):
    """Input data is wrong: names the file, the column, the count and examples, then a fix."""

    def __init__(
        self,
        file: str,
        column: str,
        count: int,
        total: int | None,
        problem: str,
        examples: Sequence[object] = (),
        hint: str = "",
    ) -> None:
        self.file, self.column, self.count, self.total = file, column, count, total
        of = f" of {total:,}" if total is not None else ""
        ex = ""
        if examples:
            ex = " (e.g. " + "; ".join(str(e) for e in list(examples)[:3]) + ")"
        tail = f"; {hint}" if hint else ""
        super().__init__(f"{file}, column '{column}': {count:,}{of} rows {problem}{ex}{tail}")


class FormatError(GlispError):
    """A published artifact (manifest, partition file) is missing, corrupt or of an unknown version."""


class StageError(GlispError):
    """A stage cannot run: a missing prerequisite stage or an inconsistent dataset."""


# ----------------------------------------------------------------------------------------------
# What a dying Spark job raises, as one line an operator can act on. A killed JVM surfaces as a Py4J
# network error, a killed Python worker or a full disk as a Java stack trace hundreds of lines long;
# commands print the stage that failed and this reason and exit non-zero. Published data is untouched,
# because every stage publishes atomically.
# ----------------------------------------------------------------------------------------------

_KNOWN = (
    ("No space left on device", "no space left on device"),
    ("Disk quota exceeded", "disk quota exceeded"),
    ("Python worker exited unexpectedly", "a Spark Python worker died"),
    ("Answer from Java side is empty", "the Spark JVM died"),
    ("Error while sending or receiving", "the Spark JVM died"),
    # py4j logs the socket error and raises this bare one when the JVM dies between two calls, to an object
    # ("calling o33.getLocalProperty") or to a static method ("calling z:org.apache..."); a Java exception is a
    # Py4JJavaError, which this does not match
    ("Py4JError: An error occurred while calling ", "the Spark JVM died or stopped answering"),
    # a store's client failing to connect (boto3/urllib3, pyarrow's S3 and GCS clients, the Azure SDK): the
    # store cannot be reached, not the JVM; before the JVM's own "Connection refused", which they also contain
    ("AWSHTTPConnection", "the S3 endpoint cannot be reached"),
    ("Could not connect to the endpoint URL", "the S3 endpoint cannot be reached"),
    ("AWS Error NETWORK_CONNECTION", "the S3 endpoint cannot be reached"),
    ("Couldn't connect to server", "the store's endpoint cannot be reached"),
    ("ServiceRequestError", "the Azure endpoint cannot be reached"),
    ("NoSuchBucket", "the bucket does not exist"),
    ("Connection refused", "the Spark JVM died or cannot be reached"),
    ("SparkContext was shut down", "the Spark context was shut down"),
    ("java.lang.OutOfMemoryError", "a Spark JVM ran out of memory"),
    ("Lost executor", "a Spark executor was lost"),
)


def failure_reason(e: BaseException, limit: int = 300) -> str:
    """A known cause when one is recognised, else the exception's last meaningful line."""
    text = f"{type(e).__name__}: {e}"
    cause, seen = e.__cause__ or e.__context__, 0
    while cause is not None and seen < 10:  # the whole chain: Py4J wraps a dead JVM's socket error twice
        text += f"\n{type(cause).__name__}: {cause}"
        cause, seen = cause.__cause__ or cause.__context__, seen + 1
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for own in ("BadInputError: ", "StoreUnavailable: "):
        # raised by a Spark task: the message names the file, row and column, or the store, URI and limits
        hit = next((ln for ln in lines if own in ln), None)
        if hit is not None:
            return hit.split(own, 1)[1]
    for needle, what in _KNOWN:
        hit = next((ln for ln in lines if needle in ln), None)
        if hit is not None:
            return f"{what} ({hit[:limit]})"
    first = lines[0] if lines else type(e).__name__
    return first[:limit]
