"""What one sandbox holds: the ``SandboxPlan`` (JSON on the launcher's command line) and its constants."""

from __future__ import annotations

import sys
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

SYSTEM_RO = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
PRIVATE_TMPFS = ("/tmp", "/var/tmp", "/run", "/dev/shm")
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")
SETUP_FAILED = 121  # the exit status when the sandbox could not be built: the command never ran
NOBODY = 65534
SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
PROJECT_ROOT = Path(__file__).resolve().parents[2]


def interpreter_paths() -> list[Path]:
    """What this Python needs to run: its prefix, the virtual environment's, the interpreter's dir."""
    paths = {Path(sys.base_prefix), Path(sys.prefix), Path(sys.executable).resolve().parent}
    return sorted({p.resolve() for p in paths if p.exists()})


class SandboxPlan(BaseModel):
    """One sandboxed command: what its root holds, who it runs as and what it may not do.

    Paths are host paths, bound at the same path inside. Besides ``ro``/``rw`` the root always holds
    the system dirs (read-only), fresh tmpfs at ``PRIVATE_TMPFS``, a ``/dev`` of its own, its own
    ``/proc`` and a read-only ``/sys``; nothing else of the host."""

    model_config = ConfigDict(extra="forbid")

    argv: list[str] = Field(min_length=1, description="The command; argv[0] an absolute path.")
    env: dict[str, str] = Field(description="Its whole environment (nothing is inherited).")
    cwd: str = Field(description="Its working directory (inside one of the bound paths).")
    ro: list[str] = Field(default_factory=list, description="Bound read-only, recursively.")
    rw: list[str] = Field(default_factory=list, description="Bound read-write.")
    hide: list[str] = Field(
        default_factory=list, description="Covered by an empty tmpfs wherever a bind above would show them."
    )
    devices: list[str] = Field(
        default_factory=list, description="Device nodes (or dirs of them) under /dev, bound read-write."
    )
    run_as: int | None = Field(
        None, description="When built by root: the uid (and gid) the command runs as. Never root."
    )
    loopback: bool = Field(True, description="Bring ``lo`` up in the empty network namespace.")
    pids: int | None = Field(None, description="RLIMIT_NPROC where it counts for this sandbox alone.")
    seccomp: bool = Field(True, description="Install the syscall filter (seccomp.py) before the exec.")
    parent_pid: int | None = Field(
        None, description="The launcher dies with this process (and refuses to start once it is gone)."
    )
    rlimits: dict[str, int] = Field(
        default_factory=dict, description="Set by the launcher before anything else: as, cpu, nofile, fsize."
    )
    tmpfs_size: str = Field("256m", description="Size of each private tmpfs.")
    cpus: float | None = Field(None, gt=0, description="CPU share (cgroup v2 cpu.max), where delegated.")
