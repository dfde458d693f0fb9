"""Packaging follows the import rules: each process's extra of ``pyproject.toml`` holds what that process
imports, and no more of the server than it needs. The agent image installs ``kswarm[agent]`` (the agent
and the gateway's client: no FastAPI, Redis, pyarrow or docker); a job worker's image ``kswarm[worker,
verify]`` (no FastAPI, Redis or pyarrow). Checked here against the installed dev environment: every
module a process's packages import (all of them, walked) must come from a distribution its extras
require (transitively), so an import added without its extra fails this test, not a production image.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
OURS = {"gateway", "orchestrator", "agents", "kswarm_contracts"}

# Our modules a process loads: every module of its packages, imported in a fresh interpreter, and
# what of the tree they import in turn (a worker loads gateway.git.sync, which imports git).
LOADED = """
import importlib, json, pkgutil, sys
for root in sys.argv[1:]:
    module = importlib.import_module(root)
    for info in pkgutil.walk_packages(getattr(module, "__path__", []), root + "."):
        if not info.name.endswith("__main__"):
            importlib.import_module(info.name)
ours = ("gateway", "orchestrator", "agents", "kswarm_contracts")
loaded = [m.__file__ for n, m in sys.modules.items() if n.split(".")[0] in ours and m.__file__]
print(json.dumps(sorted(loaded)))
"""


def extra_closure(*extras: str) -> set[str]:
    """Every distribution (normalised name) the base dependencies and ``extras`` require, transitively,
    with environment markers evaluated here (self-references ``kswarm[x]`` followed)."""
    wanted = [Requirement(r) for r in PYPROJECT["project"]["dependencies"]]
    for extra in extras:
        wanted += [Requirement(r) for r in PYPROJECT["project"]["optional-dependencies"][extra]]
    seen: set[str] = set()
    while wanted:
        req = wanted.pop()
        name = normal(req.name)
        if name == "kswarm":
            for extra in req.extras:
                wanted += [Requirement(r) for r in PYPROJECT["project"]["optional-dependencies"][extra]]
            continue
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = metadata.requires(req.name) or []
        except metadata.PackageNotFoundError:
            continue
        for line in requires:
            sub = Requirement(line)
            if sub.marker is None or any(sub.marker.evaluate({"extra": e}) for e in ("", *req.extras)):
                wanted.append(sub)
    return seen


def normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def imported_distributions(*roots: str) -> dict[str, set[str]]:
    """Third-party top-level module -> its distributions, for every import written in the modules of the
    tree that ``roots`` load, lazy ones inside functions included (read from the source, not run).
    What those third-party modules import in turn is their own metadata's business (and their optional
    imports: httpx's CLI tries rich, torch tries dill)."""
    done = subprocess.run(
        [sys.executable, "-c", LOADED, *roots], capture_output=True, text=True, cwd=REPO, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    providers = metadata.packages_distributions()
    found: dict[str, set[str]] = {}
    for file in json.loads(done.stdout):
        for node in ast.walk(ast.parse(Path(file).read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for top in {name.split(".")[0] for name in names}:
                if top in OURS or top in sys.stdlib_module_names or top == "__future__":
                    continue
                found[top] = {normal(d) for d in providers.get(top, [top])}
    return found


@pytest.mark.parametrize(
    ("roots", "extras", "never"),
    [
        # claude: the Claude Code runtime's SDK, imported only by that runtime (EXTRAS=agent,claude).
        (["agents", "gateway.client"], ("agent", "claude"), {"fastapi", "redis", "pyarrow", "docker"}),
        (
            ["orchestrator.worker", "orchestrator.verify", "gateway.client.jobs"],
            ("worker", "verify"),
            {"fastapi", "redis", "pyarrow"},
        ),
    ],
    ids=["agent", "worker"],
)
def test_a_process_imports_only_what_its_extra_installs(
    roots: list[str], extras: tuple[str, ...], never: set[str]
) -> None:
    allowed = extra_closure(*extras)
    assert not never & allowed, f"kswarm[{','.join(extras)}] pulls in {sorted(never & allowed)}"
    missing = {top: dists for top, dists in imported_distributions(*roots).items() if not dists & allowed}
    assert not missing, (
        f"{' and '.join(roots)} import modules that kswarm[{','.join(extras)}] does not install: "
        f"{missing} (add the distribution to the extra in pyproject.toml, or do not import it there)"
    )


def test_the_images_install_their_process_extra() -> None:
    """The agent image installs the agent extra (``EXTRAS`` adds to it), the worker images the worker's."""
    agent = (REPO / "infra" / "agent.Dockerfile").read_text()
    assert 'ARG EXTRAS="agent"' in agent and '".[${EXTRAS}]"' in agent
    for worker in ("worker.Dockerfile", "worker-cuda.Dockerfile"):
        assert '".[worker,verify]"' in (REPO / "infra" / worker).read_text(), worker
    assert '".[server]"' in (REPO / "infra" / "kswarm.Dockerfile").read_text()


# What a job worker may import of gateway/, at any depth: the client (with the job and pool wire models),
# git checkouts and the task models (a new import of the server's fails here; pyproject.toml's worker
# contract names what must never come in).
WORKER_MAY_IMPORT = ("gateway.client", "gateway.git.core", "gateway.git.sync", "gateway.tasks.models")


def test_the_worker_imports_only_the_client_and_the_wire_models() -> None:
    import grimp

    graph = grimp.build_graph("gateway", "orchestrator", "agents", "kswarm_contracts", cache_dir=None)
    reached = graph.find_upstream_modules("orchestrator.worker", as_package=True)
    outside = sorted(
        m
        for m in reached
        if m.startswith("gateway.")
        and not any(m == ok or m.startswith(f"{ok}.") for ok in WORKER_MAY_IMPORT)
        and m
        not in {
            "gateway",
            "gateway.jobs",
            "gateway.git",
            "gateway.tasks",
            "gateway.forge",
            "gateway.forge.gate",
        }
    )
    assert not outside, f"the job worker imports the gateway's server modules: {outside}"
    assert not {m for m in reached if m.split(".")[0] == "agents"}


def test_the_client_depends_on_nothing_of_the_server() -> None:
    """``gateway.client`` (the agents' and workers' door, with the job wire models) imports nothing of
    ``gateway/`` outside itself, at any depth: only the shared vocabulary (``kswarm_contracts``)."""
    import grimp

    graph = grimp.build_graph("gateway", "orchestrator", "agents", "kswarm_contracts", cache_dir=None)
    reached = graph.find_upstream_modules("gateway.client", as_package=True)
    outside = sorted(m for m in reached if m.split(".")[0] != "kswarm_contracts" and m != "gateway")
    assert not outside, f"gateway.client imports modules outside itself: {outside}"
