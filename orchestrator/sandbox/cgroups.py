"""cgroup v2 limits (memory, pids, CPU) for one sandbox, where the host delegates a cgroup to us.

Detection (``cgroup_support``) says, in one line, whether limits can be set here and why not:
``not available: cgroup v1`` on a v1 or hybrid host (this development host), ``not available: not
delegated (...)`` on a v2 host whose cgroup we may not write or whose controllers are not enabled for
our children. Where they are, each sandbox's launcher makes ``<base>/kswarm-<pid>``, writes the
limits, moves itself in (everything it starts inherits the cgroup), and removes it when the sandbox
ends. The base is ``$KSWARM_CGROUP`` (a dir the deployment delegated, e.g. a systemd unit with
``Delegate=yes``: with the controllers in its ``cgroup.subtree_control`` and no process of its own),
else this process's own cgroup if it qualifies.

The limits come from the plan: ``memory.max`` from the address-space limit (``rlimits["as"]``),
``pids.max`` from ``pids``, ``cpu.max`` from ``cpus``; a limit the plan does not give is left unset.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from orchestrator.sandbox.plan import SandboxPlan

CGROUP_ROOT = Path("/sys/fs/cgroup")
CONTROLLERS = ("memory", "pids", "cpu")
CPU_PERIOD_US = 100_000


@dataclass(frozen=True)
class CgroupSupport:
    """Whether limits can be set, where, and the line that says so."""

    base: Path | None
    line: str

    @property
    def available(self) -> bool:
        return self.base is not None


def own_cgroup(proc_cgroup: str) -> str | None:
    """This process's v2 path (the ``0::/path`` line of /proc/self/cgroup)."""
    for line in proc_cgroup.splitlines():
        if line.startswith("0::"):
            return line[3:] or "/"
    return None


def cgroup_support(
    root: Path = CGROUP_ROOT, proc_cgroup: str | None = None, env: dict[str, str] | None = None
) -> CgroupSupport:
    env = dict(os.environ) if env is None else env
    if not (root / "cgroup.controllers").is_file():
        if (root / "memory").is_dir() or (root / "pids").is_dir() or (root / "unified").is_dir():
            return CgroupSupport(None, "not available: cgroup v1")
        return CgroupSupport(None, "not available: no cgroup filesystem at /sys/fs/cgroup")
    if env.get("KSWARM_CGROUP"):
        base = Path(env["KSWARM_CGROUP"])
    else:
        if proc_cgroup is None:
            try:
                proc_cgroup = Path("/proc/self/cgroup").read_text()
            except OSError:
                proc_cgroup = ""
        path = own_cgroup(proc_cgroup)
        if path is None:
            return CgroupSupport(None, "not available: this process is in no cgroup v2 (hybrid host)")
        base = root / path.lstrip("/")
    try:
        enabled = set((base / "cgroup.subtree_control").read_text().split())
    except OSError as exc:
        why = f"cannot read {base}/cgroup.subtree_control ({exc.strerror})"
        return CgroupSupport(None, f"not available: {why}")
    missing = [c for c in CONTROLLERS if c not in enabled]
    if missing:
        return CgroupSupport(
            None,
            f"not available: not delegated ({', '.join(missing)} not enabled for the children of {base}; "
            "set KSWARM_CGROUP to a delegated cgroup)",
        )
    if not os.access(base, os.W_OK) or not os.access(base / "cgroup.procs", os.W_OK):
        why = f"{base} is not writable by uid {os.getuid()}"
        return CgroupSupport(None, f"not available: not delegated ({why})")
    return CgroupSupport(base, f"cgroup v2 ({', '.join(CONTROLLERS)}) under {base}")


def limits_of(plan: SandboxPlan) -> dict[str, str]:
    """The files to write in the sandbox's cgroup, from the plan."""
    out: dict[str, str] = {}
    if plan.rlimits.get("as"):
        out["memory.max"] = str(plan.rlimits["as"])
        out["memory.swap.max"] = "0"
    if plan.pids:
        out["pids.max"] = str(plan.pids)
    if plan.cpus:
        out["cpu.max"] = f"{int(plan.cpus * CPU_PERIOD_US)} {CPU_PERIOD_US}"
    return out


@dataclass
class SandboxCgroup:
    """One sandbox's cgroup: made and entered by its launcher, removed when the sandbox has ended."""

    path: Path
    parent: Path

    @classmethod
    def create(
        cls, plan: SandboxPlan, support: CgroupSupport | None = None, pid: int | None = None
    ) -> SandboxCgroup | None:
        """Make, limit and enter the cgroup (None where not available, or nothing to limit)."""
        support = support or cgroup_support()
        limits = limits_of(plan)
        if support.base is None or not limits:
            return None
        pid = pid or os.getpid()
        path = support.base / f"kswarm-{pid}"
        path.mkdir(exist_ok=True)
        for name, value in limits.items():
            target = path / name
            if target.exists() or name != "memory.swap.max":  # no swap accounting: no such file
                target.write_text(value)
        (path / "cgroup.procs").write_text(str(pid))
        return cls(path, support.base)

    def remove(self) -> None:
        """Move the launcher back out (the sandbox's processes are gone) and remove the cgroup."""
        try:
            (self.parent / "cgroup.procs").write_text(str(os.getpid()))
        except OSError:
            pass
        try:
            self.path.rmdir()
        except OSError:
            pass
