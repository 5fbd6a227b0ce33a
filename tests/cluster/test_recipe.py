"""The standalone recipe of docs/cluster.md, run from the page's own text on the test's standalone cluster.

The commands are read from the "## Standalone" section's bash block; only what names the site is replaced
(the master's address, the config file, the memory and cores the two small test workers have) and the test
cluster's own networking settings are added. The executors run the workers' system ``python3.11``, which has
no numpy or anything else: every package comes from the archive ``glisp pack-env`` built.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np

from glisp_testing.standalone import EXECUTOR_CONF, NUMBA_CACHE, ROOT, Standalone, driver_env
from tests.tiers import needs

GUIDE = ROOT / "docs" / "cluster.md"
NETWORK = {k: v for k, v in EXECUTOR_CONF.items() if k.startswith(("spark.driver.", "spark.scheduler."))}
NETWORK |= {"spark.executor.cores": "1", "spark.shuffle.readHostLocalDisk": "false"}  # the guide's note on one host


def recipe(section: str) -> list[list[str]]:
    """The commands of the first bash block under ``## <section>`` (continuation lines joined)."""
    text = GUIDE.read_text()
    body = text.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", body, re.S)
    assert block, f"no bash block under '## {section}' in {GUIDE}"
    return [shlex.split(c) for c in block.group(1).replace("\\\n", " ").splitlines() if c.strip()]


def site_values(cmd: list[str], cluster: Standalone, config: Path) -> list[str]:
    """The recipe's command with the site's values (host, config path, resources) for the test cluster's."""
    values = {
        "spark://spark-master:7077": cluster.url,
        "/shared/glisp/ingest.toml": str(config),
        "spark.executor.memory=8g": "spark.executor.memory=1g",
        "spark.cores.max=32": "spark.cores.max=2",
    }
    out = [values.get(a, a) for a in cmd]
    if out[0] == "glisp":
        out = [sys.executable, "-m", "glisp_app.cli", *out[1:]]
    if out[0] == "submit/glisp-submit":
        i = out.index("--")
        out[i:i] = [x for k, v in NETWORK.items() for x in ("--conf", f"{k}={v}")]
        out = [sys.executable, *out]
    return out


@needs("subprocess_jvm")
def test_the_standalone_recipe_runs_as_the_guide_prints_it(standalone: Standalone, shared_dir: Path):
    commands = recipe("Standalone")
    assert [c[0] for c in commands] == ["glisp", "submit/glisp-submit"] and "--lean-env" in commands[1]
    # the kernel cache on the host's disk, where each test worker mounts its persistent one: not one per application
    assert f"spark.executorEnv.NUMBA_CACHE_DIR={NUMBA_CACHE}" in commands[1]
    rng = np.random.default_rng(0)  # the user's edge table: 3,000 edges over 600 vertices, skewed degrees
    edges = np.stack([rng.zipf(1.6, 3000) % 600, rng.integers(0, 600, 3000)], 1)
    raw = shared_dir / "recipe-raw"
    raw.mkdir()
    (raw / "edges.csv").write_text("src,dst\n" + "\n".join(f"{s},{d}" for s, d in edges) + "\n")
    config = raw / "ingest.toml"
    config.write_text(
        f'[dataset]\nroot = "{shared_dir / "recipe-root"}"\n\n[ingest]\ngraph = "mine"\n\n'
        f'[[ingest.edges]]\npath = "{raw / "edges.csv"}"\n'
    )
    log = []
    for cmd in commands:
        r = subprocess.run(
            site_values(cmd, standalone, config),
            capture_output=True,
            text=True,
            env=driver_env(),
            cwd=ROOT,
            timeout=900,
        )
        log.append(f"$ {shlex.join(cmd)} -> {r.returncode}\n{r.stdout[-2500:]}\n{r.stderr[-2500:]}")
        assert r.returncode == 0, "\n".join(log) + "\n" + standalone.executor_logs()[-4000:]
    shipped = commands[1][commands[1].index("--lean-env") + 1]
    assert f"archive:  {ROOT / shipped}" in log[0]  # what the second command ships, the first one built
    assert "stage=reorder status=done" in log[1], log[1]
