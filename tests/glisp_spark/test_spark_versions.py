"""pyspark and the cluster's Spark must agree in major.minor; GLISP says so at start-up, naming both."""

from __future__ import annotations

import pytest

from glisp_core.errors import GlispError
from glisp_spark.session import check_versions, version_mismatch


@pytest.mark.parametrize(
    ("py", "jvm", "ok"),
    [("4.0.1", "4.0.0", True), ("4.0.1", "4.0.1", True), ("4.1.0", "4.0.1", False), ("3.5.1", "4.0.0", False)],
)
def test_major_minor_must_agree(py, jvm, ok):
    why = version_mismatch(py, jvm)
    assert (why is None) == ok
    if not ok:
        assert f"pyspark {py}" in why and f"Spark {jvm}" in why and "spark.glisp.allowVersionMismatch" in why


def test_the_running_session_passes_and_a_mismatch_is_refused(spark, monkeypatch):
    import pyspark

    check_versions(spark)  # the test session's pyspark and JVM are one install
    monkeypatch.setattr(pyspark, "__version__", "9.9.0")
    with pytest.raises(GlispError, match=f"pyspark 9.9.0 .* with Spark {spark.version}"):
        check_versions(spark)
    spark.conf.set("spark.glisp.allowVersionMismatch", "true")
    try:
        check_versions(spark)
    finally:
        spark.conf.unset("spark.glisp.allowVersionMismatch")
