"""Drive the real ``kswarm`` CLI as a user would: subprocesses with their own environment."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

KSWARM = str(Path(sys.executable).parent / "kswarm")


def cli_env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KSWARM_") and k != "REDIS_URL"}
    env.update(KSWARM_HOME=str(home), COLUMNS="200", NO_COLOR="1", **extra)
    return env


def kswarm(
    home: Path, *args: str, token: str | None = None, timeout: float = 60
) -> subprocess.CompletedProcess:
    extra = {"KSWARM_TOKEN": token} if token else {}
    return subprocess.run(
        [KSWARM, *args], env=cli_env(home, **extra), capture_output=True, text=True, timeout=timeout
    )


class Up:
    """``kswarm up`` running in the background, stopped with SIGTERM like a Ctrl-C."""

    def __init__(self, home: Path, port: int, *extra_args: str, env: dict[str, str] | None = None) -> None:
        self.home = home
        self.port = port
        self.log = home.parent / f"up-{port}.log"
        home.mkdir(parents=True, exist_ok=True)
        out = open(self.log, "w")
        self.proc = subprocess.Popen(
            [KSWARM, "up", "--home", str(home), "--port", str(port), *extra_args],
            env=cli_env(home, **(env or {})),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        out.close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"kswarm up exited {self.proc.returncode}:\n{self.output()}")
            if (self.home / "gateway.json").exists():
                try:
                    if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                        return
                except httpx.TransportError:
                    pass
            time.sleep(0.1)
        raise RuntimeError(f"kswarm up did not become ready:\n{self.output()}")

    def output(self) -> str:
        return self.log.read_text() if self.log.exists() else ""

    def wait_output(self, *needles: str, timeout: float = 60) -> str:
        """The output once it holds every one of ``needles`` (the gateway answers before the banner
        is printed: a test reading the banner waits for it)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            out = self.output()
            if all(n in out for n in needles):
                return out
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        raise AssertionError(f"kswarm up never printed {needles!r}:\n{self.output()}")

    def stop(self, timeout: float = 60) -> int:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
                # Killed, ``up`` could not stop its embedded Redis (kept on purpose for the next ``up``):
                # the test started it, so the test stops it, by its pid.
                stop_embedded_redis(self.home)
        return self.proc.returncode


def stop_embedded_redis(home: Path) -> None:
    """SIGKILL the embedded Redis of ``home`` if one runs: its pid from ``redis.pid``, checked against
    the process's command line (its socket lies in ``home``), so no other process is touched."""
    try:
        pid = int((home / "redis" / "redis.pid").read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return
    if b"redis-server" in cmdline and str(home).encode() in cmdline:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
