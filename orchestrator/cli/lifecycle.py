"""How ``kswarm up`` runs (foreground or ``--detach``) and how ``kswarm down`` stops it, by pid; and
what they print (the banner, ``up -d --json``, ``down``'s account of what it stopped).

- foreground: ``Launcher.run`` in this process until Ctrl-C (``orchestrator/local/launcher.py``);
- ``--detach``: the same command without ``--detach`` as a daemon (its own session, output in
  ``$KSWARM_HOME/logs/up.log``); this process waits until its gateway answers ``/healthz``, prints the
  banner and exits;
- ``kswarm down``: SIGTERM to the pid in ``gateway.json`` (the foreground or detached ``up``), which
  stops agents, workers, gateway and Redis in that order; then whatever is left (agents of a ``up``
  that was killed, an embedded Redis nobody uses any more) is stopped here.

One ``up`` per home: the ``up`` that runs (foreground, or the detached one) holds ``UpLock`` from its
first moment, before ``gateway.json`` exists, so that a second ``up`` or ``up -d`` refuses at once also
while the first is still starting (its port is not the second's to find in use).
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

import httpx
from rich.markup import escape
from rich.panel import Panel

from gateway.client import GatewayInfo
from gateway.client.home import pid_alive
from orchestrator.cli.output import console, warn
from orchestrator.spec import SwarmSpec

READY_TIMEOUT_S = 120.0
DOWN_TIMEOUT_S = 90.0


class UpLock:
    """An ``flock`` on ``HOME/up.lock``, held by the running ``kswarm up`` of that home for its lifetime
    (the kernel drops it when the process ends, however it ends)."""

    def __init__(self, home: Path) -> None:
        self.path = home / "up.lock"
        self.held: IO[str] | None = None

    def acquire(self) -> bool:
        """Take the lock (non-blocking); False when another process holds it."""
        handle = open(self.path, "a+")  # kept open: the lock lives as long as the file
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            return False
        self.held = handle
        return True

    def held_elsewhere(self) -> bool:
        """Whether another process holds it (checked by taking and dropping it)."""
        if not self.acquire():
            return True
        assert self.held is not None
        self.held.close()  # closing the file drops the lock
        self.held = None
        return False


def already_up(home: Path) -> str | None:
    """Why a new ``kswarm up`` for ``home`` must not start: one is up (its URL and pid) or still
    starting; None when none runs."""
    info = GatewayInfo.read(home)
    if info is not None and info.alive():
        return f"kswarm is already up for {home} at {info.url} (pid {info.pid}); stop it with: kswarm down"
    if UpLock(home).held_elsewhere():
        return f"kswarm up is already starting for {home}; wait for it, or stop it with: kswarm down"
    return None


def up_log(home: Path) -> Path:
    return home / "logs" / "up.log"


def detach(home: Path, argv: list[str]) -> tuple[int, GatewayInfo]:
    """Start ``kswarm up ARGV`` in the background and wait until its gateway is healthy; returns its
    pid and gateway. Raises RuntimeError with the end of its log if it does not come up."""
    log_path = up_log(home)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "orchestrator.cli", "up", *argv],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # not the terminal's: its Ctrl-C and hang-up do not reach it
            cwd=os.getcwd(),
        )
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"kswarm up exited with status {proc.returncode}: {tail(log_path)}")
        info = GatewayInfo.read(home)
        if info is not None and info.pid == proc.pid and healthy(info.url):
            return proc.pid, info
        time.sleep(0.1)
    raise RuntimeError(f"kswarm up did not come up within {READY_TIMEOUT_S:g} s: {tail(log_path)}")


def healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False


def tail(path: Path, lines: int = 5) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "(no log)"
    return " | ".join(text[-lines:]) + f" (log: {path})"


def stop_launcher(home: Path, timeout: float = DOWN_TIMEOUT_S) -> int | None:
    """SIGTERM the running ``kswarm up`` of this home and wait until it exits; its pid, or None when
    none runs. Raises TimeoutError if it is still there after ``timeout``."""
    info = GatewayInfo.read(home)
    if info is None or not info.alive() or info.pid == os.getpid():
        return None
    try:
        os.kill(info.pid, signal.SIGTERM)
    except ProcessLookupError:
        return None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not pid_alive(info.pid) or _zombie(info.pid):
            return info.pid
        time.sleep(0.1)
    raise TimeoutError(f"kswarm up (pid {info.pid}) did not stop within {timeout:g} s")


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False


# -- what `up` and `down` print ------------------------------------------------------------------


def health_line(url: str) -> str | None:
    """None when the gateway is healthy; else what ``/healthz`` names (``redis: ...``, disk full)."""
    try:
        reply = httpx.get(f"{url}/healthz", timeout=2.0)
        body = reply.json()
    except (httpx.HTTPError, ValueError) as exc:
        return f"gateway: {exc}"
    if reply.status_code == 200:
        return None
    return str(body.get("detail") or body.get("failing") or f"HTTP {reply.status_code}")


def protections() -> list[str]:
    """What the one sandbox gives agents and jobs on this host (``orchestrator/sandbox/report.py``)."""
    from orchestrator.sandbox.report import protection_lines

    try:
        return [escape(line) for line in protection_lines(65534)]
    except Exception as exc:  # a banner must not stop `up`: say what is unknown, and why
        return [escape(f"sandbox: unknown ({type(exc).__name__}: {exc})")]


def print_banner(
    info: GatewayInfo, token: str, warnings: list[str], spec: SwarmSpec | None, degraded: str | None
) -> None:
    swarm = ""
    if spec is not None:
        agents = spec.expand()
        workers = sum(p.workers for p in spec.pools)
        pools = ", ".join(f"{p.name} ({p.executor.kind}, {p.workers} worker(s))" for p in spec.pools)
        repos = ", ".join(
            f"{spec.swarm}/{r.name}" + (f" ({r.description})" if r.description else "") for r in spec.repos
        )
        swarm = (
            f"swarm     {spec.swarm}: {len(agents)} agent(s), {workers} job worker(s)\n"
            f"pools     {pools or '-'}\nrepos     {repos or '-'}\n"
            + "".join(f"{'protects' if i == 0 else '':<10}{line}\n" for i, line in enumerate(protections()))
        )
    body = (
        f"gateway   [bold]{info.url}[/bold]"
        + (f"  [red]degraded: {degraded}[/red]" if degraded else "")
        + "\n"
        f"socket    {info.socket}\n{swarm}"
        f"operator  {token}\n"
        f"          (also in {Path(info.socket).parent.parent / 'operator.token'}, mode 600)\n\n"
        "In another terminal:  kswarm ps   ·   kswarm chat tail general -f   ·   kswarm down"
    )
    console.print(Panel(body, title="kswarm is up", subtitle="Ctrl-C stops it all, in order", expand=False))
    for warning in warnings:
        warn(warning)


def up_result(home: Path, pid: int, info: GatewayInfo, token: str, warnings: list[str]) -> dict[str, Any]:
    """What ``kswarm up -d --json`` prints: the background ``up`` and how to reach it."""
    from orchestrator.cli.ui import new_link

    try:
        login_link: str | None = asyncio.run(new_link(info.url, token)).url
    except (httpx.HTTPError, KeyError, ValueError):
        login_link = None  # `kswarm ui` makes one
    return {
        "home": str(home),
        "pid": pid,
        "url": info.url,
        "socket": info.socket,
        "ui": f"{info.url.rstrip('/')}/ui",
        "login_link": login_link,
        "operator_token_file": str(home / "operator.token"),
        "log": str(up_log(home)),
        "degraded": health_line(info.url),
        "warnings": warnings,
    }


def down_lines(result: dict[str, Any]) -> list[str]:
    """What ``kswarm down`` stopped, in words: only what was running."""
    lines: list[str] = []
    if result["up_pid"] is not None:
        lines.append(
            f"stopped kswarm up (pid {result['up_pid']}): {len(result['agents_stopped_by_up'])} agent(s), "
            "its job workers, gateway and Redis"
        )
    if result["agents_stopped"]:
        left = result["agents_stopped"]
        lines.append(f"stopped {len(left)} agent(s): {', '.join(left)}")
    if not lines:
        lines.append(
            f"nothing was running for {result['home']}: kswarm up and its agents were already stopped"
        )
    if result["purged"]:
        lines.append(f"purged the files and volumes of {len(result['purged'])} agent(s)")
    return lines
