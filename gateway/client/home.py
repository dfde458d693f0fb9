"""Where a kswarm installation keeps its state, and how clients find the running gateway.

``$KSWARM_HOME`` (default ``~/.kswarm``) holds: ``redis/`` (embedded Redis), ``run/gateway.sock``,
``gateway.json`` (url, socket, pid of the running gateway) and ``operator.token`` (mode 600).
Clients use ``KSWARM_URL``/``KSWARM_TOKEN`` when set, else those files.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path


class ConnectError(RuntimeError):
    """No gateway to talk to; the message says what to do."""


def kswarm_home(explicit: Path | None = None) -> Path:
    home = explicit or Path(os.environ.get("KSWARM_HOME") or Path.home() / ".kswarm")
    return home.expanduser().resolve()


def ensure_home(home: Path) -> Path:
    home.mkdir(parents=True, exist_ok=True)
    os.chmod(home, 0o700)
    return home


def write_secret(path: Path, value: str) -> None:
    """Write a secret readable by its owner only (created 600, never world-readable in between)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(value + "\n")
    os.chmod(path, 0o600)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass
class GatewayInfo:
    url: str
    socket: str
    pid: int

    @classmethod
    def read(cls, home: Path) -> GatewayInfo | None:
        path = home / "gateway.json"
        try:
            data = json.loads(path.read_text())
            return cls(url=data["url"], socket=data["socket"], pid=int(data["pid"]))
        except (OSError, ValueError, KeyError):
            return None

    def write(self, home: Path) -> None:
        (home / "gateway.json").write_text(json.dumps(self.__dict__) + "\n")

    def alive(self) -> bool:
        return pid_alive(self.pid)


@dataclass
class Connection:
    url: str
    token: str


def connection(home: Path | None = None) -> Connection:
    """The gateway URL and token a CLI command should use."""
    home = kswarm_home(home)
    url = os.environ.get("KSWARM_URL")
    if url is None:
        info = GatewayInfo.read(home)
        if info is None or not info.alive():
            raise ConnectError(
                f"no running gateway under {home}: start one with `kswarm up` or set KSWARM_URL"
            )
        url = info.url
    token = os.environ.get("KSWARM_TOKEN")
    if token is None:
        try:
            token = (home / "operator.token").read_text().strip()
        except OSError as exc:
            raise ConnectError(
                f"no token: set KSWARM_TOKEN or run `kswarm up` (reads {home}/operator.token)"
            ) from exc
    return Connection(url=url.rstrip("/"), token=token)
