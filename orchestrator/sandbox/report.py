"""What the sandbox protects, in lines for ``kswarm up``'s banner and the job logs: which
implementation builds it, the namespaces, the seccomp filter, the limits (cgroup v2 where delegated)."""

from __future__ import annotations

import os

from orchestrator.sandbox.cgroups import cgroup_support
from orchestrator.sandbox.mounts import SandboxError
from orchestrator.sandbox.probe import probe_plan, sandbox_unavailable
from orchestrator.sandbox.seccomp import SUMMARY
from orchestrator.sandbox.spawn import choose_sandbox


def protection_lines(run_as: int | None = None, probe: bool = True) -> list[str]:
    """One line per protection in effect for a sandbox built here (by ``run_as`` when root).

    With ``probe`` a whole sandbox is built first (``sandbox_unavailable``): if that fails, the first
    line says so and why, and nothing else is claimed."""
    try:
        sandbox = choose_sandbox(plan=probe_plan(run_as if os.geteuid() == 0 else None))
    except SandboxError as exc:
        return [f"sandbox: UNAVAILABLE ({exc.strerror})"]
    if probe:
        why = sandbox_unavailable(run_as if os.geteuid() == 0 else None)
        if why is not None:
            return [f"sandbox: UNAVAILABLE ({why})"]
    if os.geteuid() == 0 and sandbox.name == "namespaces":
        who = f"runs as uid {run_as}, no groups"
    elif os.geteuid() == 0:
        who = f"user (uid {run_as} alone mapped)"
    else:
        who = f"user (uid {os.getuid()} alone mapped)"
    return [
        f"sandbox: {sandbox.describe()}",
        f"namespaces: {who}; mount (minimal read-only root), pid, network (only lo), ipc",
        f"seccomp: {SUMMARY}; no_new_privs; no capabilities",
        f"cgroup limits (memory, pids, cpu): {cgroup_support().line}",
        "rlimits: address space, CPU seconds, open files, file size, processes, no core dumps",
    ]
