"""How ``kswarm up`` runs (foreground or ``--detach``) and how ``kswarm down`` stops it, by pid.

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

import fcntl
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

import httpx

from gateway.client import GatewayInfo
from gateway.client.home import pid_alive

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
