"""One error hierarchy, so callers can catch GLISP's own failures and messages read alike."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence


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
    # curl's "Timeout was reached" (code 28) comes wrapped in NETWORK_CONNECTION too: an endpoint that stopped
    # answering, not one that cannot be reached
    ("Timeout was reached", "the store's endpoint did not answer in time"),
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


# The messages Spark and Py4J wrap a failure in: they name no cause themselves.
_WRAPPERS = (
    "An exception was thrown from the Python worker",
    "An error occurred while calling",
    "Job aborted due to stage failure",
    "PythonException",
    "Py4JJavaError",
    "CapturedException",
    "SparkException",
    "org.apache.spark.SparkException",
    "org.apache.spark.api.python.PythonException",
)
_EXC_LINE = re.compile(
    r"^(?:Caused by: )?(?:[A-Za-z_][\w.$]*\.)?[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Failure)\b:?"
)


def root_cause(lines: list[str]) -> str | None:
    """The innermost exception line that is not one of Spark's or Py4J's wrappers: the last one of a Python
    worker's traceback (what the task raised), else the deepest ``Caused by:`` of a JVM trace."""
    lines = [ln.removeprefix(": ") for ln in lines]  # Py4J writes the Java exception as ": java.lang.X: ..."
    causes = [ln for ln in lines if _EXC_LINE.match(ln) and not any(w in ln.split(":", 2)[0] for w in _WRAPPERS)]
    if not causes:
        return None
    py = [ln for ln in causes if not ln.startswith("Caused by: ") and "." not in ln.split(":", 1)[0]]
    best = py[-1] if py else causes[-1]
    return best.removeprefix("Caused by: ")


def chain(e: BaseException | None, limit: int = 11) -> Iterator[BaseException]:
    """``e`` and what caused it (``__cause__``, else ``__context__``), at most ``limit`` of them: Py4J wraps a
    dead JVM's socket error twice, and a Spark failure wraps a task's error in its own."""
    seen = 0
    while e is not None and seen < limit:
        yield e
        e, seen = e.__cause__ or e.__context__, seen + 1


def failure_reason(e: BaseException, limit: int = 4000) -> str:
    """A known cause when one is recognised, else the root cause inside Spark's and Py4J's wrappers (in
    full), else the exception's first line."""
    text = "\n".join(f"{type(c).__name__}: {c}" for c in chain(e))
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
    if any(w in first for w in _WRAPPERS):
        root = root_cause(lines[1:])
        if root is not None:
            where = "a Spark Python worker" if "Python worker" in text or "PythonException" in first else "Spark"
            return f"{root[:limit]} (raised in {where})"
    return first[:limit]
