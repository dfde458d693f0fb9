"""Whether each agent's runtime can start on this host, checked before anything starts (``kswarm
validate``, ``kswarm up -f``): an agent whose runtime is not installed would otherwise crash-loop, its
reason buried in a log. Agents of the docker backend without ``host_shared`` run the image's code, which
is checked where it runs (the image), not here.

Each problem is one line naming the agents, what is missing and the command that installs it.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path

from orchestrator.runtime.base import SAFE_PATH
from orchestrator.spec import AgentSpec, SwarmSpec

# What kswarm's own agent loop imports beyond the base install (pyproject.toml: the `agent` extra).
LOOP_MODULES = ("anthropic", "mcp")
INSTALL_HINT = "install it: .venv/bin/pip install -e '.[server,{extra}]' (in this checkout)"


def runs_host_code(spec: SwarmSpec, backend: str | None = None) -> bool:
    """Whether the agents run this host's Python and code (the process backend, or docker's host-shared
    mode), so that what is installed here is what they run."""
    return (backend or spec.backend) != "docker" or spec.docker.host_shared


def installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def claude_cli_bundled() -> bool:
    """The Claude Code binary that the ``claude-agent-sdk`` wheel ships (agents/claude_code.py finds it
    the same way), without importing the SDK."""
    found = importlib.util.find_spec("claude_agent_sdk") if installed("claude_agent_sdk") else None
    if found is None or found.origin is None:
        return False
    binary = Path(found.origin).parent / "_bundled" / "claude"
    return binary.is_file() and os.access(binary, os.X_OK)


def command_problem(argv: list[str]) -> str | None:
    """Why ``argv`` cannot start here, resolved as the process backend resolves it; None if it can."""
    exe = argv[0]
    if exe in ("python", "python3"):
        if len(argv) >= 3 and argv[1] == "-m" and not installed(argv[2]):
            return f"runtime.command runs python -m {argv[2]}, a module this host's Python does not have"
        return None
    if "/" in exe:
        ok = Path(exe).is_file() and os.access(exe, os.X_OK)
        return None if ok else f"runtime.command {exe} is not an executable file on this host"
    if shutil.which(exe, path=SAFE_PATH) is None:
        return f"runtime.command {exe!r} is not found on this host (agents' PATH: {SAFE_PATH})"
    return None


def agent_problem(agent: AgentSpec) -> str | None:
    runtime = agent.runtime
    if runtime.command:
        return command_problem(runtime.command)
    if runtime.kind == "claude-code":
        if claude_cli_bundled():
            return None
        return (
            "runtime claude-code needs the Claude Code CLI, which the claude-agent-sdk package bundles, "
            f"and it is not installed for {sys.executable}: {INSTALL_HINT.format(extra='claude')}"
        )
    missing = [m for m in LOOP_MODULES if not installed(m)]
    if missing:
        return (
            f"runtime loop needs {', '.join(missing)}, not installed for {sys.executable}: "
            f"{INSTALL_HINT.format(extra='agent')}"
        )
    return None


def runtime_problems(spec: SwarmSpec, backend: str | None = None) -> list[str]:
    """One line per distinct problem, naming its agents; empty when every runtime can start here (or the
    agents run an image's code)."""
    if not runs_host_code(spec, backend):
        return []
    by_problem: dict[str, list[str]] = {}
    for agent in spec.expand():
        problem = agent_problem(agent)
        if problem is not None:
            by_problem.setdefault(problem, []).append(agent.name)
    return [f"agents {', '.join(names)}: {problem}" for problem, names in by_problem.items()]
