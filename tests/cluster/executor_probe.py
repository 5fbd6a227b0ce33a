"""Run in a subprocess by test_standalone: ``python executor_probe.py MASTER_URL 'CONF_JSON' PATH...``.

Starts GLISP's session (``glisp_spark.session.get_spark``, as every stage does) on MASTER_URL and prints, as
one JSON line, what each of four tasks sees on its executor: its Python, whether each PATH exists there,
where GLISP's code comes from, its mount namespace and its HOME.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator


def probe(paths: list[str]) -> Iterator[dict[str, object]]:
    import os

    import glisp_core

    yield {
        "python": sys.executable,
        "exists": {p: os.path.exists(p) for p in paths},
        "glisp_core": glisp_core.__file__,
        "mnt_ns": os.readlink("/proc/self/ns/mnt"),
        "home": os.environ.get("HOME", ""),
    }


def main(argv: list[str]) -> int:
    from glisp_core.config import SparkConfig
    from glisp_spark.session import get_spark

    url, conf, paths = argv[0], json.loads(argv[1]), argv[2:]
    spark = get_spark(SparkConfig(master=url, app_name="glisp-probe", ui=False, log_level="ERROR", conf=conf))
    try:
        rdd = spark.sparkContext.parallelize(range(4), 4)
        rows = rdd.mapPartitions(lambda _: probe(paths)).collect()
    finally:
        spark.stop()
    print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
