"""Can a sandbox be built here? Answered by building a whole one around a Python that exits at once:
a refused namespace, a nested mount that cannot be made read-only or a refused ``/proc`` shows up here,
once, instead of in every job or agent."""

from __future__ import annotations

import os
import subprocess
import sys

from orchestrator.sandbox.plan import PROJECT_ROOT, SAFE_PATH, SandboxPlan, interpreter_paths


def launcher_env() -> dict[str, str]:
    """The launcher's environment (init keeps it: a sandboxed command can read it as /proc/1/environ),
    so only what it needs to import the sandbox: the project and our own Python path."""
    path = os.pathsep.join(p for p in (str(PROJECT_ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = {"PATH": SAFE_PATH, "PYTHONPATH": path}
    for name in ("KSWARM_SANDBOX", "KSWARM_CGROUP"):  # the implementation and cgroup chosen for us
        if os.environ.get(name):
            env[name] = os.environ[name]
    return env


def probe_plan(run_as: int | None = None) -> SandboxPlan:
    """A sandbox around a Python that exits at once, holding what every sandbox of ours holds."""
    ro = [str(PROJECT_ROOT), *map(str, interpreter_paths())]
    argv = [sys.executable, "-c", ""]
    return SandboxPlan(argv=argv, env={"PATH": SAFE_PATH}, cwd="/", ro=ro, run_as=run_as)


def sandbox_unavailable(run_as: int | None = None, timeout_s: float = 60) -> str | None:
    """Why ``python -m orchestrator.sandbox`` cannot run here (None: it can), in its own words."""
    plan = probe_plan(run_as)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "orchestrator.sandbox", plan.model_dump_json()],
            capture_output=True,
            text=True,
            env=launcher_env(),
            cwd="/",
            timeout=timeout_s,
        )
    except subprocess.TimeoutExpired:
        return f"building a sandbox did not finish within {timeout_s:.0f} s"
    if done.returncode == 0:
        return None
    lines = [line.removeprefix("kswarm sandbox: ") for line in done.stderr.strip().splitlines()]
    return lines[-1] if lines else f"the sandbox exited {done.returncode}"
