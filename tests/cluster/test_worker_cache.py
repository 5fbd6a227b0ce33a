"""The standalone workers' persistent numba cache: one directory per worker, bounded to the code versions
compiled last."""

from __future__ import annotations

import os
from pathlib import Path

from glisp_testing.standalone import NUMBA_CACHE, NUMBA_CACHE_KEEP, worker_numba_cache, worker_script


def test_a_worker_keeps_the_code_versions_compiled_last(tmp_path):
    host = tmp_path / "host"
    versions = [f"glisp-zip-{i:020d}" for i in range(NUMBA_CACHE_KEEP + 2)]
    for age, name in enumerate(reversed(versions)):  # versions[0] written first, the last one most recently
        kernel = host / "worker-1" / name / "spark_jobs_ingest" / "kernels.f-1.py311.1.nbc"
        kernel.parent.mkdir(parents=True)
        kernel.write_bytes(b"x")
        os.utime(kernel, (1e9 - age * 3600, 1e9 - age * 3600))
    d = worker_numba_cache(1, host)
    assert d == host / "worker-1"
    assert sorted(p.name for p in d.iterdir()) == versions[2:]  # the two compiled first are gone
    assert worker_numba_cache(0, host).is_dir() and not any((host / "worker-0").iterdir())


def test_the_worker_mounts_its_own_cache_where_the_executors_look(tmp_path):
    import pyspark

    home = str(Path(pyspark.__file__).parent)
    script = worker_script(home, "spark://127.0.0.1:1", 1, 2, tmp_path / "worker-0")
    mounts = [line for line in script.splitlines() if line.startswith("mount --bind")]
    assert f"mount --bind {tmp_path / 'worker-0'} {NUMBA_CACHE}" in mounts
    assert script.index(f"mount --bind {tmp_path / 'worker-0'}") > script.index("glisp-worker-tmp /tmp")


def test_a_worker_offers_the_memory_and_private_tmp_it_is_given(tmp_path):
    import pyspark

    home = str(Path(pyspark.__file__).parent)
    default = worker_script(home, "spark://127.0.0.1:1", 1, 2, tmp_path / "worker-0")
    assert "size=4g glisp-worker-tmp /tmp" in default and "--memory 2g " in default
    big = worker_script(home, "spark://127.0.0.1:1", 1, 2, tmp_path / "worker-0", memory="6g", tmp_size="9g")
    assert "size=9g glisp-worker-tmp /tmp" in big and "--memory 6g " in big
