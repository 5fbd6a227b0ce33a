"""Test tiers, derived from the fixtures a test uses: nobody marks a test by hand.

A fixture that starts something heavy says so with :func:`needs`; a test carries the tiers of every fixture
in its closure, as pytest markers (registered in ``pyproject.toml``, so ``--strict-markers`` checks them). A
test with none of them is ``fast``: it needs no JVM and no server subprocess, and ``make test-fast`` runs
exactly those.

In the fast lane (``-m fast``) the tiers are also enforced: ``java`` on the PATH is a stub that fails, and a
server or a JVM-starting CLI started by ``subprocess`` fails the test, naming the fixture it should ask for.
At the end of a run the time spent per tier is printed (a test counts in its heaviest tier), with the CPU its
tests used, their subprocesses included: the lane is bound by the machine's CPU, not by any one test's wait.
"""

from __future__ import annotations

import functools
import os
import shutil
import signal
import stat
import subprocess
import tempfile
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pytest

F = TypeVar("F", bound=Callable[..., Any])

# heaviest first: a test's time counts in the first of these it carries
TIERS: dict[str, str] = {
    "standalone": "a Spark standalone cluster (a master and two workers in their own mount namespaces)",
    "subprocess_jvm": "a CLI subprocess that starts a Spark JVM of its own",
    "servers": "sampling servers in subprocesses (glisp serve / serve-cluster)",
    "s3": "the S3-API server (moto) on 127.0.0.1",
    "gcs": "the GCS emulator (fake-gcs-server) on 127.0.0.1",
    "azure": "the Azure Blob emulator (Azurite) on 127.0.0.1",
    "spark": "the test session's local Spark JVM",
}
IMPLIES = {"standalone": "slow", "subprocess_jvm": "slow"}  # a tier whose tests are slow by nature
FAST = "fast"
# glisp commands that start a Spark JVM, and those that start servers
JVM_COMMANDS = {"generate", "ingest", "partition", "serialize", "reorder", "link-split", "infer", "pipeline"}
SERVER_COMMANDS = {"serve", "serve-cluster"}


def needs(*tiers: str) -> Callable[[F], F]:
    """Declare what a fixture starts: ``@pytest.fixture`` above ``@needs("servers")``."""
    unknown = set(tiers) - set(TIERS)
    if unknown:
        raise ValueError(f"unknown test tier(s) {sorted(unknown)}; known: {sorted(TIERS)}")

    def mark(fn: F) -> F:
        fn.glisp_tiers = frozenset(tiers)  # type: ignore[attr-defined]
        return fn

    return mark


def tiers_of(item: pytest.Item) -> set[str]:
    """The tiers of every fixture in the item's closure."""
    info = getattr(item, "_fixtureinfo", None)
    found: set[str] = set()
    for defs in info.name2fixturedefs.values() if info else ():
        for d in defs:
            found |= set(getattr(d.func, "glisp_tiers", ()))
    return found


def primary(item: pytest.Item) -> str:
    names = {m.name for m in item.iter_markers()}
    return next((t for t in TIERS if t in names), FAST)


# every collected test's marker names, before ``-m`` deselects any: what tests/test_lanes.py checks the
# Makefile's lanes against
COLLECTED: dict[str, frozenset[str]] = {}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        tiers = tiers_of(item)
        tiers |= {IMPLIES[t] for t in tiers if t in IMPLIES}
        for t in sorted(tiers) or [FAST]:
            item.add_marker(getattr(pytest.mark, t))
        COLLECTED[item.nodeid] = frozenset(m.name for m in item.iter_markers())


def _load_groups(config: pytest.Config) -> bool:
    """xdist's --dist loadgroup is on (its workers see it as the 'loadgroup' option, not as 'dist')."""
    return bool(getattr(config.option, "loadgroup", False)) or config.getoption("dist", "no") == "loadgroup"


# ---- the split across xdist's workers (make test runs -n 2 --dist loadgroup) -----------------------------------

# rough seconds per test of each tier, to send the heaviest groups out first (the last group decides the end)
WEIGHT = {
    "standalone": 100.0,
    "subprocess_jvm": 40.0,
    "servers": 4.0,
    "s3": 3.0,
    "gcs": 3.0,
    "azure": 3.0,
    "spark": 2.0,
}
WEIGHT[FAST] = 0.2


def group_of(nodeid: str, root: Path) -> str:
    """The unit one worker runs whole: the test directory whose conftest defines session fixtures (built once
    per worker: the tests of that directory stay together), else the module. Told by the node id alone, since
    xdist's controller sees nothing else."""
    path = nodeid.split("::")[0].split("@")[0]
    return next((h for h in _session_homes(root) if path.startswith(h + "/")), path)


@functools.cache
def _session_homes(root: Path) -> tuple[str, ...]:
    """Test directories (below the top one) whose conftest.py defines a session-scoped fixture, deepest first."""
    top = Path(__file__).resolve().parent
    homes = [
        c.parent.relative_to(root).as_posix()
        for c in top.rglob("conftest.py")
        if c.parent != top and 'scope="session"' in c.read_text()
    ]
    return tuple(sorted(homes, key=len, reverse=True))


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadgroup``: whole groups (:func:`group_of`) per worker. xdist's own loadgroup reads a suffix
    its workers add to node ids, which pytest 9 no longer lets it set; this scheduler needs no suffix."""
    if not _load_groups(config):
        return None
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid, config.rootpath)

    return GroupScheduling(config, log)


class HeaviestFirst:
    """After pytest grouped the items by their fixtures: whole groups (each in its own order) by their
    estimated time, heaviest first, since xdist hands groups out in the order it collects them."""

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        groups = [group_of(item.nodeid, item.config.rootpath) for item in items]
        weight: dict[str, float] = defaultdict(float)
        for item, g in zip(items, groups, strict=True):
            weight[g] += WEIGHT[primary(item)]
        rank = {g: i for i, g in enumerate(sorted(weight, key=lambda g: -weight[g]))}
        order = sorted(range(len(items)), key=lambda i: rank[groups[i]])  # stable within a group
        items[:] = [items[i] for i in order]


# ---- the fast lane's guard ---------------------------------------------------------------------------------


def _fast_lane(config: pytest.Config) -> bool:
    return (config.getoption("markexpr", "") or "").strip() == FAST


def glisp_command(args: Sequence[str]) -> str | None:
    """The glisp subcommand a command line runs (``python -m glisp_app.cli X`` or ``.../bin/glisp X``)."""
    words = [str(a) for a in args]
    for i, w in enumerate(words[:-1]):
        if w == "glisp_app.cli" or w.endswith("/glisp") or w == "glisp":
            return words[i + 1]
    return None


def refusal(args: Any) -> str | None:
    """Why a fast test may not start ``args`` (None when it may)."""
    words = [args] if isinstance(args, str | os.PathLike) else list(args)
    cmd = glisp_command(words)
    text = " ".join(map(str, words))
    if cmd in SERVER_COMMANDS or "glisp_testing.client_load" in text:
        return "starts sampling servers: ask for the 'server_processes' fixture (tier 'servers')"
    if "pyspark-shell" in text:  # PySpark launching its gateway: a session in this process
        return "starts a Spark JVM in the test process: ask for the 'spark' fixture (tier 'spark')"
    if cmd in JVM_COMMANDS or "spark-submit" in text or "spark-class" in text:
        return "starts a Spark JVM: ask for the 'jvm_processes' fixture (tier 'subprocess_jvm')"
    return None


def _java_stub(dir_: Path) -> Path:
    stub = dir_ / "java"
    stub.write_text(
        "#!/bin/sh\necho 'glisp test tiers: a test in the fast lane started a JVM; it needs the spark fixture "
        "or jvm_processes' >&2\nexit 97\n"
    )
    stub.chmod(stub.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return dir_


def _stop(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):
        # SIGTERM stops a run as Ctrl-C does, its fixtures torn down (servers and JVMs stopped): make test-rest
        # sends it to the run beside the workers when it is interrupted, and a shell starts that run with
        # SIGINT ignored. (xdist's workers are stopped by their controller.)
        signal.signal(signal.SIGTERM, _stop)
    if _load_groups(config):
        config.pluginmanager.register(HeaviestFirst(), "glisp-heaviest-first")
    if not _fast_lane(config):
        return
    stub_dir = _java_stub(Path(tempfile.mkdtemp(prefix="glisp-fast-lane-")))
    config.add_cleanup(functools.partial(shutil.rmtree, stub_dir, ignore_errors=True))  # each process made its own
    os.environ.pop("JAVA_HOME", None)
    os.environ["PATH"] = f"{stub_dir}{os.pathsep}{os.environ.get('PATH', '')}"


@pytest.fixture(autouse=True)
def _tier_guard(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """In the fast lane, a subprocess that starts servers or a Spark JVM fails the test at once."""
    if not _fast_lane(request.config):
        return
    real = subprocess.Popen.__init__

    def guarded(self: subprocess.Popen[Any], args: Any, *a: Any, **kw: Any) -> None:
        why = refusal(args)
        if why:
            raise RuntimeError(f"{request.node.nodeid} {why}")
        real(self, args, *a, **kw)

    monkeypatch.setattr(subprocess.Popen, "__init__", guarded)


# ---- time per tier -----------------------------------------------------------------------------------------

_times: dict[str, float] = defaultdict(float)
_cpu: dict[str, float] = defaultdict(float)
_test_cpu: dict[str, float] = defaultdict(float)
_counts: dict[str, set[str]] = defaultdict(set)
_last_cpu = 0.0  # this worker's tree CPU when its last test phase ended (or its current test started)


def tree_cpu() -> float:
    """CPU seconds of this process, of its children it reaped, and of every live descendant with what they
    reaped: a test's JVMs, servers and Python workers count in the test that drove them. A descendant that
    another process adopted (a daemon) counts only while it is alive."""
    import psutil

    t = os.times()
    total = t.user + t.system + t.children_user + t.children_system
    for child in psutil.Process().children(recursive=True):
        try:
            c = child.cpu_times()
        except psutil.Error:  # it ended between the listing and the read: its parent's reaped times hold it
            continue
        total += c.user + c.system + c.children_user + c.children_system
    return total


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Where the test runs (an xdist worker, not the controller, which only relays reports): its CPU starts here."""
    global _last_cpu
    _last_cpu = tree_cpu()


_timeline: list[dict[str, Any]] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    props = dict(report.user_properties)  # user_properties cross from xdist's workers
    tier = props.get("glisp_tier")
    if tier:
        cpu = float(props.get("glisp_cpu", 0.0))  # type: ignore[arg-type]
        _times[tier] += report.duration
        _cpu[tier] += cpu
        _test_cpu[report.nodeid] += cpu
        _counts[tier].add(report.nodeid)
        worker = getattr(getattr(report, "node", None), "gateway", None)
        _timeline.append(
            {
                "test": report.nodeid,
                "when": report.when,
                "tier": tier,
                "s": round(report.duration, 3),
                "cpu_s": cpu,
                "worker": getattr(worker, "id", "main"),
                "stop": round(report.stop, 3),
            }
        )


def pytest_sessionfinish(session: pytest.Session) -> None:
    """GLISP_TEST_TIMELINE=FILE: every phase of every test as JSON lines (worker, tier, seconds, CPU, end time),
    to see how the workers' time was spent. Appended: ``make test``'s pytest runs all land in one file."""
    path = os.environ.get("GLISP_TEST_TIMELINE")
    worker = hasattr(session.config, "workerinput")  # an xdist worker: its controller writes its rows
    if path and _timeline and not worker:
        import json

        with open(path, "a") as f:
            f.write("".join(json.dumps(row) + "\n" for row in _timeline))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    global _last_cpu
    report = yield
    if not any(k == "glisp_tier" for k, _ in report.user_properties):
        report.user_properties.append(("glisp_tier", primary(item)))
    now = tree_cpu()
    report.user_properties.append(
        ("glisp_cpu", round(now - _last_cpu, 3))
    )  # this phase's: each report has its own list
    _last_cpu = now
    return report


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _times:
        return
    tr = terminalreporter
    tr.write_sep("=", "time per tier (a test counts in its heaviest tier; CPU with its subprocesses)")
    for tier in [*TIERS, FAST]:
        if tier in _times:
            tr.write_line(f"{tier:>15}  {len(_counts[tier]):4d} tests  {_times[tier]:8.1f} s  {_cpu[tier]:8.1f} CPU-s")
    n, s, cpu = sum(map(len, _counts.values())), sum(_times.values()), sum(_cpu.values())
    tr.write_line(f"{'all':>15}  {n:4d} tests  {s:8.1f} s  {cpu:8.1f} CPU-s")
    tr.write_sep("=", "most CPU (seconds, the test's subprocesses included)")
    for nodeid, used in sorted(_test_cpu.items(), key=lambda kv: -kv[1])[:15]:
        tr.write_line(f"{used:8.1f}  {nodeid}")
