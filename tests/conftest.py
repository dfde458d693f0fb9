"""Fixtures shared by every suite: a real redis-server and real gateway processes."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis as redis_sync

from kstest.gateway import GatewayThread
from orchestrator.local.embedded_redis import EmbeddedRedis


def pytest_configure(config: pytest.Config) -> None:
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # A pytest-xdist worker starts with COLUMNS=80 in its environment, and the CLI's rich consoles
        # (module globals) fix their width from COLUMNS when created: every CLI test that sets COLUMNS
        # for its own invocation would then render 80 columns wide. Without it they read it per print.
        os.environ.pop("COLUMNS", None)
        os.environ.pop("LINES", None)


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """One private redis-server (unix socket, AOF) for the whole run; tests flush it."""
    home = Path(tempfile.mkdtemp(prefix="ksr"))  # short: unix socket paths are limited to ~107 bytes
    _SESSION_REDIS.append(str(home))
    server = EmbeddedRedis(home)
    url = server.ensure_running()
    try:
        yield url
    finally:
        server.release()
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture
def clean_redis(redis_url: str) -> str:
    client = redis_sync.Redis.from_url(redis_url)
    client.flushall()
    client.close()
    return redis_url


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A short temporary dir (for unix sockets), removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="kst"))
    yield path
    _unmount_under(path)
    shutil.rmtree(path, ignore_errors=True)


def _unmount_under(path: Path) -> None:
    """A test that failed before its swarm's ``down`` leaves agents' disk images mounted in its tmp dir
    (orchestrator/swarm_dir/disk.py): unmounted here, deepest first, so that no loop device outlives
    the test."""
    if os.geteuid() != 0:
        return
    from orchestrator.sandbox.mounts import mount_points_under
    from orchestrator.swarm_dir.disk import detach

    for point in reversed(mount_points_under(str(path.resolve()))):
        detach(Path(point))


@pytest.fixture
def gateway(clean_redis: str, short_tmp: Path) -> Iterator[GatewayThread]:
    """A fresh gateway (real uvicorn in a thread) on an empty Redis, with an operator token.

    Tests that kill or restart the gateway process use ``kstest.gateway.GatewayProcess`` instead."""
    gw = GatewayThread(short_tmp / "home", clean_redis)
    gw.start()
    try:
        yield gw
    finally:
        gw.stop()


# -- two lanes ----------------------------------------------------------------------------------------
# ./run-tests runs the suite in two pytest-xdist workers (`-n 2`; KSWARM_TEST_WORKERS sets another
# number). Tests that use what the whole machine shares (the Docker daemon, Slurm, the uid registry, agents
# supervised by a real orchestrator, kswarm's CLI end to end, sandboxes and cgroups) form one lane that
# one worker runs one test at a time, as a serial run would; the rest (each test its own gateway, each
# worker its own Redis, the harness its own processes) go to either worker, a file at a time. About half
# of a serial run's time is waiting on processes, so two lanes on two cores cut the wall time without
# more CPU.
# The lanes are a scheduler of ours (``pytest_xdist_make_scheduler``), not xdist's ``loadgroup``: that one
# renames each item's ``_nodeid``, which pytest 9 no longer reads, so it silently spread the machine-wide
# tests over every worker.
MACHINE_WIDE = (
    "tests/orchestrator/",
    "tests/e2e/",
    "tests/agents/",
    "tests/gateway/jobs/",
    "tests/gateway/swarm/",
    "tests/gateway/dataset/",
    "tests/gateway/ui/test_ui_panels.py",
    "tests/gateway/ui/test_ui_swarm.py",
    "tests/gateway/ui/test_ui_attention_agents.py",
    "tests/gateway/llm/test_llm_budget_spec.py",
    "tests/gateway/monitor/test_agent_reports_timeline.py",
)
EITHER_LANE = (
    "tests/orchestrator/verify/",  # the harness: only processes of its own
    "tests/orchestrator/cli/test_cli_errors.py",  # the CLI in-process against a gateway of its own
    "tests/orchestrator/cli/test_cli_untrusted_text.py",
)
MACHINE_LANE = "machine"


def lane_of(nodeid: str) -> str:
    """The machine lane for a test that uses machine-wide things, else its file's: a module runs whole,
    in order, on one worker (its module-scoped fixtures are made once and its tests may build on each
    other's state)."""
    path = nodeid.split("::", 1)[0]
    return MACHINE_LANE if path.startswith(MACHINE_WIDE) and not path.startswith(EITHER_LANE) else path


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # The scheduler sees node ids only: Docker and Slurm tests must sit in the lane's paths.
    for item in items:
        needs_machine = item.get_closest_marker("docker") or item.get_closest_marker("slurm")
        if needs_machine and lane_of(item.nodeid) != MACHINE_LANE:
            raise pytest.UsageError(f"{item.nodeid} uses Docker or Slurm: put it under one of MACHINE_WIDE")


@pytest.hookimpl(optionalhook=True)  # known only where pytest-xdist is loaded
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """The two lanes (see above) for ``-n N`` with ``--dist load`` (the default) or ``loadgroup``."""
    if config.getvalue("dist") not in ("load", "loadgroup"):
        return None
    from xdist.scheduler import LoadScopeScheduling

    class Lanes(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return lane_of(nodeid)

    return Lanes(config, log)


# -- left-behind agents --------------------------------------------------------------------------------
# A test that starts agents (or a Redis server) must stop them (by pid). One that does not leaves a
# process holding a uid block or a socket that a later test trips over, far from the cause; so the agents
# and Redis servers still running when the run ends are named with the test they appeared in (a report,
# not a failure: the later test's own failure is the symptom; this says where to look).
_SESSION_REDIS: list[str] = []  # the home of the run's own redis-server (redis_url), which is not a leak


def _is_redis(command: str) -> bool:
    return command.split(" ", 1)[0].endswith("redis-server")


def _watched_processes() -> dict[int, str]:
    """pid -> "agent <name>" or "redis-server <argv>" for the agents and test Redis servers running."""
    found: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            # redis-server retitles itself "redis-server unixsocket:<path>" (one argv entry)
            line = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            if _is_redis(line):
                if not any(home in line for home in _SESSION_REDIS):
                    found[int(entry.name)] = line
                continue
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        for item in environ.split(b"\0"):
            if item.startswith(b"KSWARM_AGENT="):
                found[int(entry.name)] = "agent " + item.split(b"=", 1)[1].decode(errors="replace")
                break
    return found


_APPEARED: dict[int, tuple[str, str]] = {}  # pid -> (the test it appeared in, what it is)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    yield
    for pid, name in _watched_processes().items():
        _APPEARED.setdefault(pid, (item.nodeid, name))


def _live_elsewhere(what: str) -> bool:
    """A Redis server whose socket's dir still exists: another pytest run's (the scan sees the whole
    machine), not one a test of this run left behind when its tmp dir was removed."""
    if not _is_redis(what):
        return False
    socket = what.partition("unixsocket:")[2].split(" ", 1)[0]
    return bool(socket) and Path(socket).parent.exists()


def _handover_dir(controller_pid: int) -> Path:
    return Path(tempfile.gettempdir()) / f"kswarm-test-leftovers-{controller_pid}"


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Under pytest-xdist a worker hands what it saw to the controller, which reports at the very end
    (the scan sees the whole machine: what one worker saw may be the other's, still running)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:
        from kstest.gateway import UNSTOPPED

        folder = _handover_dir(os.getppid())
        folder.mkdir(exist_ok=True)
        seen = [[pid, test, name] for pid, (test, name) in _APPEARED.items()]
        (folder / f"{worker}.json").write_text(json.dumps({"appeared": seen, "unstopped": UNSTOPPED}))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    from kstest.gateway import UNSTOPPED

    appeared = [(pid, test, name) for pid, (test, name) in _APPEARED.items()]
    unstopped = list(UNSTOPPED)
    folder = _handover_dir(os.getpid())
    for handed in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        data = json.loads(handed.read_text())
        appeared += [(pid, test, name) for pid, test, name in data["appeared"]]
        unstopped += data["unstopped"]
    shutil.rmtree(folder, ignore_errors=True)
    if unstopped:
        terminalreporter.section("gateways that did not stop (their loops were stopped outright)")
        for line in unstopped:
            terminalreporter.line(line)
    now = _watched_processes()
    left = sorted(
        {
            (test, name, pid)
            for pid, test, name in appeared
            if now.get(pid) == name and not _live_elsewhere(name)
        }
    )
    if left:
        terminalreporter.section("agents and Redis servers still running at the end (tests they appeared in)")
        for test, name, pid in left:
            terminalreporter.line(f"{test}: {name} (pid {pid})")
