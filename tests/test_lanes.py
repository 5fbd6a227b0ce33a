"""``make test``'s pytest runs, read from the Makefile: together they run every collected test, each once.

The rest lane is two runs side by side, split by a marker expression (docs/testing.md); a test that matched
neither expression would silently never run, and one that matched both would run twice.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from _pytest.mark.expression import Expression

from tests.tiers import COLLECTED, FAST, TIERS

MAKEFILE = Path(__file__).resolve().parents[1] / "Makefile"


def recipe(target: str) -> str:
    """The recipe lines of ``target`` (continuations included)."""
    lines = MAKEFILE.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"{target}:"))
    body = []
    for line in lines[start + 1 :]:
        if not line.startswith("\t"):
            break
        body.append(line)
    return "\n".join(body)


def reached(target: str) -> set[str]:
    """The targets ``make <target>`` runs: its prerequisites and those its recipe runs with ``$(MAKE)``, and
    theirs."""
    text, seen, todo = MAKEFILE.read_text(), set(), [target]
    while todo:
        t = todo.pop()
        deps = re.search(rf"^{re.escape(t)}:(.*)$", text, re.M)
        if t in seen or not deps:
            continue
        seen.add(t)
        todo += deps.group(1).split() + re.findall(r"\$\(MAKE\)(?: -\S+)* ([a-z][\w-]*)", recipe(t))
    return seen


def lanes() -> list[str]:
    """The ``-m`` expression of every pytest command ``make test`` runs."""
    assert {"check", "test-fast", "test-rest"} <= reached("test"), reached("test")
    pattern = r'\$\(PYTEST\) -q -m (?:"([^"]+)"|(\S+))'
    found = [a or b for t in ("test-fast", "test-rest") for a, b in re.findall(pattern, recipe(t))]
    assert found, "no pytest command with -m in test-fast or test-rest"
    return found


def runs(expression: str, markers: frozenset[str]) -> bool:
    return Expression.compile(expression).evaluate(lambda name, **_: name in markers)


def test_make_test_runs_every_collected_test_exactly_once() -> None:
    exprs = lanes()
    assert len(exprs) == 3, exprs  # the fast lane, and the rest lane's two runs
    assert len(COLLECTED) > 1 and __name__.replace(".", "/") in " ".join(COLLECTED)  # this run's collection
    for nodeid, markers in COLLECTED.items():
        assert markers & {*TIERS, FAST}, f"{nodeid} has no tier"
        hits = [e for e in exprs if runs(e, markers)]
        assert len(hits) == 1, f"{nodeid} ({sorted(markers)}) runs in {len(hits)} of make test's runs: {hits}"


def test_an_expression_that_leaves_a_tier_out_is_caught() -> None:
    """The check itself: the two rest runs without the one beside the Spark workers miss its tests."""
    some = {"spark", "s3"}, {"standalone", "slow"}, {FAST}
    exprs = ["fast", "not fast and spark"]
    missed = [m for m in map(frozenset, some) if not any(runs(e, m) for e in exprs)]
    assert missed == [frozenset({"standalone", "slow"})]


SLEEPER = """
import os, time, pytest
from pathlib import Path

@pytest.fixture
def held():
    Path(os.environ["STARTED"]).write_text("")
    yield
    Path(os.environ["DONE"]).write_text("torn down")

def test_sleeps(held):
    time.sleep(120)
"""


def test_sigterm_stops_a_run_as_ctrl_c_does_with_its_fixtures_torn_down(tmp_path: Path) -> None:
    """``make test-rest`` stops the run beside the workers with SIGTERM when it is interrupted (a shell starts
    that run with SIGINT ignored): its fixtures' teardown, which stops servers and JVMs, still runs."""
    (tmp_path / "test_sleeps.py").write_text(SLEEPER)
    started, done = tmp_path / "started", tmp_path / "done"
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "tests.tiers", "-p", "no:cacheprovider", str(tmp_path)]
    env = {**os.environ, "PYTHONPATH": str(MAKEFILE.parent), "STARTED": str(started), "DONE": str(done)}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 60
    while not started.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert started.exists(), out
    assert proc.returncode == 2 and "KeyboardInterrupt" in out, out  # pytest's exit code when interrupted
    assert done.read_text() == "torn down", out


JAVA_SEEN = """
import os, shutil

def test_java_is_the_stub():
    java = shutil.which("java")
    with open(os.environ["SEEN"], "a") as f:
        f.write(java + "\\n")
    assert os.path.basename(os.path.dirname(java)).startswith("glisp-fast-lane-")
"""


def test_the_fast_lane_removes_its_java_stubs_when_it_ends(tmp_path: Path) -> None:
    """Each process of a fast-lane run (the controller and every xdist worker) puts a failing ``java`` in a
    temporary directory on its PATH; the run leaves none of them behind."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_java.py").write_text(JAVA_SEEN)
    tmp, seen = tmp_path / "tmp", tmp_path / "seen"
    tmp.mkdir()
    cmd = [sys.executable, "-m", "pytest", "-q", "-m", FAST, "-n", "2", "-p", "tests.tiers", "-p", "no:cacheprovider"]
    env = {**os.environ, "PYTHONPATH": str(MAKEFILE.parent), "TMPDIR": str(tmp), "SEEN": str(seen)}
    done = subprocess.run([*cmd, str(tmp_path / "tests")], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    stubs = [Path(line) for line in seen.read_text().splitlines()]
    assert stubs and all(p.parent.parent == tmp for p in stubs), stubs
    assert not list(tmp.glob("glisp-fast-lane-*")), list(tmp.iterdir())


STUB = """#!/bin/sh
# a stand-in for the virtualenv's {name}: logs how it was called, exits with $RC_{key} (0 when unset)
echo "{name} $*" >> "$STUB_LOG"
exit "${{RC_{key}:-0}}"
"""


def _stub_make(tmp_path: Path, **rc: int) -> tuple[int, str, list[str]]:
    """``make test`` with every tool of the virtualenv a stub that logs its call (the rest of the Makefile as it
    is; ``java-check`` taken as done, since the fast lane puts a failing ``java`` on the PATH): the exit code,
    the output, and the calls in the order they came."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True, exist_ok=True)
    for name, key in (("python", "PYTHON"), ("ruff", "RUFF"), ("mypy", "MYPY"), ("mkdocs", "MKDOCS")):
        (venv / "bin" / name).write_text(STUB.format(name=name, key=key))
        (venv / "bin" / name).chmod(0o755)
    (venv / ".glisp-installed").touch()  # newer than pyproject.toml: nothing to install
    azurite = tmp_path / "azurite-blob"
    azurite.touch()
    log = tmp_path / "calls.log"
    log.unlink(missing_ok=True)
    env = {**os.environ, "STUB_LOG": str(log), "TMPDIR": str(tmp_path), **{f"RC_{k}": str(v) for k, v in rc.items()}}
    env.pop("MAKEFLAGS", None)
    cmd = ["make", "--no-print-directory", "-C", str(MAKEFILE.parent), "-o", "java-check", "test"]
    cmd += [f"VENV={venv}", f"AZURITE={azurite}"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    calls = log.read_text().splitlines() if log.exists() else []
    return done.returncode, done.stdout + done.stderr, calls


def test_a_failing_gate_or_fast_lane_fails_make_test_before_the_slow_tiers(tmp_path: Path) -> None:
    """CI fails fast (issue 41): the gate and the fast lane both run, the gate's report follows the lane's, and
    a failure of either ends ``make test`` before the rest lane starts; with both passing the rest lane runs."""
    rest = ("not fast and spark", "not fast and not spark")

    code, out, calls = _stub_make(tmp_path)
    assert code == 0, out
    assert any("-m fast" in c for c in calls) and any("ruff check" in c for c in calls), calls
    assert all(any(e in c for c in calls) for e in rest), calls
    assert "python -m glisp_testing.jvm_opts" in calls, calls  # the drivers' archive, built beside the fast lane
    # the gate's captured report comes after the fast lane's
    assert out.index("-m fast") < out.index("== beside it: the static gate") < out.index("bin/mypy"), out
    # nothing left in the temporary folder: the docs site the gate builds, the reports captured beside the lanes
    assert not list(tmp_path.glob("tmp.*")), list(tmp_path.iterdir())

    for failing in ({"RUFF": 1}, {"PYTHON": 1}):
        code, out, calls = _stub_make(tmp_path, **failing)
        assert code != 0, (failing, out)
        assert any("-m fast" in c for c in calls) and any("ruff check" in c for c in calls), (failing, calls)
        assert not any(e in c for c in calls for e in rest), (failing, calls)
