"""The CPU a test is charged in the per-tier summary: its own and its subprocesses', alive or ended."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from tests.tiers import tree_cpu

BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.6: pass\nprint('done', flush=True)\n"
SLEEP = "import time\ntime.sleep(30)\n"


@contextmanager
def running(code: str, line: str) -> Iterator[None]:
    """A Python child running ``code``, from the moment it prints ``line`` until it is killed and reaped."""
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == line
        yield
    finally:
        child.kill()
        child.wait()


def test_a_live_child_and_then_a_reaped_one_count_in_the_tree() -> None:
    before = tree_cpu()
    with running(BURN + SLEEP, "done"):  # burns 0.6 s, then waits
        live = tree_cpu() - before
        assert live >= 0.55, f"a live child's CPU is not counted: {live:.2f} s"
    reaped = tree_cpu() - before
    assert reaped >= 0.55, f"a reaped child's CPU is not counted: {reaped:.2f} s"
    assert reaped < live + 0.5, f"a child counted twice: {reaped:.2f} s against {live:.2f} s alive"


def test_a_grandchild_counts_while_its_parent_lives() -> None:
    before = tree_cpu()
    code = (
        "import subprocess, sys\n"
        f"subprocess.run([sys.executable, '-c', {BURN!r}], check=True, stdout=subprocess.DEVNULL)\n"
        f"print('reaped', flush=True)\n{SLEEP}"
    )
    with running(code, "reaped"):
        got = tree_cpu() - before
        assert got >= 0.55, f"a grandchild its living parent reaped is not counted: {got:.2f} s"
