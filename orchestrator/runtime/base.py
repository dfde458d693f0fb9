"""The runtime protocol every backend implements, and what the backends share (launch spec, env)."""

from __future__ import annotations

import builtins
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

from orchestrator.spec import AgentSpec
from orchestrator.swarm_dir.provision import TOKEN_REL, SwarmLayout

# The only variables an agent gets besides the KSWARM_* ones we set and the spec's explicit env.
# Nothing else of the orchestrator's environment is copied: that is how operator secrets stay out.
ENV_ALLOW = {"LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1"}
SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
LABEL_SWARM = "kswarm.swarm"
LABEL_AGENT = "kswarm.agent"


@dataclass(frozen=True)
class AgentPaths:
    """An agent's dirs and gateway socket as the agent sees them (host paths, or container paths)."""

    home: Path
    work: Path
    memory: Path
    history: Path
    socket: Path


@dataclass(frozen=True)
class LaunchSpec:
    """Everything a backend needs to start one agent."""

    agent: AgentSpec
    swarm: str
    uid: int | None = field(default=None, metadata={"doc": "Run as this uid (None: the caller's)."})
    gateway_socket: Path | None = None
    gateway_url: str | None = None


@dataclass
class RuntimeStatus:
    """What a backend knows about one agent right now."""

    name: str
    running: bool
    ref: str = ""  # pid or container id
    started_at: float | None = None  # unix time
    exit_code: int | None = None  # None: unknown or still running
    detail: str = ""


@dataclass(frozen=True)
class ExecResult:
    returncode: int
    output: str


@runtime_checkable
class AgentRuntime(Protocol):
    """A place where agents run: one process, or one container, per agent."""

    backend: str

    def start(self, launch: LaunchSpec) -> RuntimeStatus:
        """Start the agent; an already running one is left alone and its status returned."""
        ...

    def stop(self, name: str, timeout: float = 10.0) -> None:
        """Stop the agent (TERM, then KILL after ``timeout``); its files and volumes stay."""
        ...

    def status(self, name: str) -> RuntimeStatus:
        """Is it running, since when, and how did it end."""
        ...

    def list(self) -> dict[str, RuntimeStatus]:
        """Every agent of this swarm the backend knows of, running or not (adoption lists these)."""
        ...

    def logs(self, name: str, follow: bool = False, tail: int | None = None) -> Iterator[str]:
        """The agent's output lines; with ``follow`` keeps yielding until the agent stops."""
        ...

    def exec(self, name: str, argv: builtins.list[str], timeout: float = 60.0) -> ExecResult:
        """Run a command as the agent, inside its isolation, while it runs."""
        ...

    def remove(self, name: str, purge: bool = False) -> None:
        """Stop and forget the agent; ``purge`` also deletes its volumes and files."""
        ...


def agent_command(launch: LaunchSpec, python: str | None = None) -> list[str]:
    return list(launch.agent.runtime.command or [python or sys.executable, "-m", "agents"])


def prompt_text(prompt: str) -> str:
    """The role template to hand over: a file's text (agents cannot see the spec's dir), or the text."""
    path = Path(prompt).expanduser()
    if "\n" not in prompt and len(prompt) < 4096 and path.is_file():
        return path.read_text()
    return prompt


def agent_environment(
    launch: LaunchSpec, paths: AgentPaths, gateway_url: str | None = None
) -> dict[str, str]:
    """The agent's whole environment, built from an allow-list (never a copy of ours)."""
    env = dict(ENV_ALLOW)
    env.update(launch.agent.runtime.env)
    env.update(
        PATH=SAFE_PATH,
        HOME=str(paths.home),
        TMPDIR="/tmp",
        KSWARM_AGENT=launch.agent.name,
        KSWARM_SWARM=launch.swarm,
        KSWARM_ROLE=launch.agent.role,
        KSWARM_MODEL=launch.agent.model,
        KSWARM_WORK=str(paths.work),
        KSWARM_MEMORY=str(paths.memory),
        KSWARM_HISTORY=str(paths.history),
        KSWARM_TOKEN_FILE=str(paths.home / TOKEN_REL),
        KSWARM_HEARTBEAT_S=repr(launch.agent.runtime.heartbeat_s),
        GIT_CONFIG_GLOBAL=str(paths.home / ".gitconfig"),
    )
    env["KSWARM_AGENT_RUNTIME"] = launch.agent.runtime.kind
    if launch.agent.prompt:
        env["KSWARM_AGENT_PROMPT"] = prompt_text(launch.agent.prompt)
    if gateway_url:
        env["KSWARM_GATEWAY_URL"] = gateway_url
    else:
        env["KSWARM_GATEWAY_SOCKET"] = str(paths.socket)
    return env


def host_paths(layout: SwarmLayout, name: str, socket: Path) -> AgentPaths:
    return AgentPaths(
        home=layout.agent_dir(name, "home"),
        work=layout.agent_dir(name, "work"),
        memory=layout.agent_dir(name, "memory"),
        history=layout.agent_dir(name, "history"),
        socket=socket,
    )


def project_root() -> Path:
    """The source tree holding the orchestrator and agents packages (host-shared mode mounts it)."""
    return Path(__file__).resolve().parents[2]


def python_paths() -> list[Path]:
    """What the host's Python needs: the interpreter's prefix and the virtual environment, if any."""
    out = [Path(sys.base_prefix).resolve()]
    if sys.prefix != sys.base_prefix:
        out.append(Path(sys.prefix).resolve())
    return out
