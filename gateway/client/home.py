"""Where a kswarm installation keeps its state, and how clients find the running gateway.

``$KSWARM_HOME`` (default ``~/.kswarm``; ``--home`` on every command) holds: ``redis/`` (embedded
Redis), ``run/gateway.sock``, ``gateway.json`` (url, socket, pid of the running gateway) and
``operator.token`` (mode 600). ``find_gateway`` is the one place that turns that (or ``KSWARM_URL`` /
``KSWARM_TOKEN``, which win when set and non-empty) into a ``GatewayTarget``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from gateway.client.errors import NoGateway
from gateway.client.target import GatewayTarget

URL_ENV = "KSWARM_URL"
TOKEN_ENV = "KSWARM_TOKEN"
HOME_ENV = "KSWARM_HOME"


def kswarm_home(explicit: Path | None = None, environ: Mapping[str, str] | None = None) -> Path:
    """``explicit`` (``--home``), else ``$KSWARM_HOME``, else ``~/.kswarm``; absolute."""
    env = os.environ if environ is None else environ
    home = explicit or Path(env.get(HOME_ENV) or Path.home() / ".kswarm")
    return home.expanduser().resolve()


def embedded_redis_socket(home: Path) -> Path:
    """Where a home's embedded Redis listens (``kswarm up`` without ``REDIS_URL``)."""
    return Path(os.path.abspath(home)) / "redis" / "redis.sock"


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
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def write(self, home: Path) -> None:
        (home / "gateway.json").write_text(json.dumps(self.__dict__) + "\n")

    def alive(self) -> bool:
        return pid_alive(self.pid)


def operator_token(home: Path) -> str | None:
    try:
        return (home / "operator.token").read_text().strip() or None
    except OSError:
        return None


def find_gateway(
    home: Path | None = None, environ: Mapping[str, str] | None = None, strict: bool = True
) -> GatewayTarget:
    """The gateway and token a client on this machine should use.

    URL: ``$KSWARM_URL``, else the home's ``gateway.json`` while its gateway process lives (its URL,
    else its socket). Token: ``$KSWARM_TOKEN``, else the home's ``operator.token``. ``strict`` (what
    every CLI command uses) raises ``NoGateway`` saying what to do when either is missing; otherwise
    the missing parts are left ``None`` (a daemon that waits for the gateway, or reports it itself).
    """
    env = os.environ if environ is None else environ
    home = kswarm_home(home, env)
    url: str | None = env.get(URL_ENV) or None
    socket: Path | None = None
    if url is None:
        info = GatewayInfo.read(home)
        if info is not None and (info.alive() or not strict):
            url = info.url or None
            socket = Path(info.socket) if not url and info.socket else None
        elif strict:
            raise NoGateway(
                f"none is running for {home} (start one with `kswarm up --home {home}`, or set {URL_ENV})"
            )
    token = env.get(TOKEN_ENV) or operator_token(home)
    if strict and token is None:
        raise NoGateway(
            f"no token for {url}: set {TOKEN_ENV}, or use the home whose `kswarm up` wrote operator.token"
            f" (none in {home})"
        )
    return GatewayTarget(token=token, url=url.rstrip("/") if url else None, socket=socket)


def target_from_env(home: Path | None = None) -> GatewayTarget:
    """``find_gateway`` without the checks: whatever is known (for daemons started next to a gateway)."""
    return find_gateway(home, strict=False)
