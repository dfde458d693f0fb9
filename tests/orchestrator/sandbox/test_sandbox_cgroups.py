"""cgroup v2 limits of the sandbox: detection (this host runs cgroup v1), and what is written where a
cgroup is delegated -- on a directory laid out like a delegated cgroup v2 subtree (no cgroup v2 here)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from orchestrator.sandbox import cgroups
from orchestrator.sandbox.cgroups import CgroupSupport, SandboxCgroup, cgroup_support, limits_of
from orchestrator.sandbox.plan import SandboxPlan
from orchestrator.sandbox.report import protection_lines


def v2_tree(root: Path, enabled: str = "cpu memory pids") -> Path:
    """A cgroup2 root with this process in ``/kswarm.slice``, whose children get ``enabled``."""
    (root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    base = root / "kswarm.slice"
    base.mkdir()
    (base / "cgroup.subtree_control").write_text(enabled + "\n")
    (base / "cgroup.procs").write_text("")
    return base


def plan(**extra: object) -> SandboxPlan:
    return SandboxPlan(argv=["/bin/true"], env={}, cwd="/", **extra)  # type: ignore[arg-type]


def test_this_hosts_cgroup_v1_is_detected_and_said() -> None:
    if (Path("/sys/fs/cgroup") / "cgroup.controllers").exists():
        pytest.skip("this host runs cgroup v2")
    support = cgroup_support()
    assert not support.available and support.line == "not available: cgroup v1"


def test_the_banner_says_which_protections_are_active() -> None:
    lines = protection_lines(65534)
    assert lines[0].startswith("sandbox: ") and "UNAVAILABLE" not in lines[0], lines
    assert any(line.startswith("seccomp: denied: ptrace") for line in lines)
    cgroup_line = next(line for line in lines if line.startswith("cgroup limits"))
    assert cgroup_line.endswith(cgroup_support().line)


def test_a_v1_or_hybrid_root_is_not_taken_for_v2(tmp_path: Path) -> None:
    (tmp_path / "memory").mkdir()
    assert cgroup_support(tmp_path, "0::/\n", {}).line == "not available: cgroup v1"
    assert cgroup_support(tmp_path / "nothing", "", {}).line.startswith("not available: no cgroup")


def test_delegated_v2_is_found_from_our_own_cgroup(tmp_path: Path) -> None:
    base = v2_tree(tmp_path)
    support = cgroup_support(tmp_path, "0::/kswarm.slice\n", {})
    assert support.available and support.base == base, support.line


def test_controllers_not_enabled_for_our_children_are_named(tmp_path: Path) -> None:
    v2_tree(tmp_path, enabled="cpu")
    support = cgroup_support(tmp_path, "0::/kswarm.slice\n", {})
    assert not support.available and "memory, pids not enabled" in support.line, support.line


def test_kswarm_cgroup_names_the_delegated_base(tmp_path: Path) -> None:
    base = v2_tree(tmp_path)
    support = cgroup_support(tmp_path, "0::/elsewhere\n", {"KSWARM_CGROUP": str(base)})
    assert support.base == base


def test_an_unwritable_base_is_not_delegated(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root writes anywhere: the check is for an unprivileged worker")
    base = v2_tree(tmp_path)
    base.chmod(0o555)
    assert "not writable" in cgroup_support(tmp_path, "0::/kswarm.slice\n", {}).line


def test_the_limits_come_from_the_plan() -> None:
    limits = limits_of(plan(rlimits={"as": 1 << 30}, pids=64, cpus=1.5))
    assert limits == {
        "memory.max": str(1 << 30),
        "memory.swap.max": "0",
        "pids.max": "64",
        "cpu.max": f"150000 {cgroups.CPU_PERIOD_US}",
    }
    assert limits_of(plan()) == {}


def test_a_sandbox_cgroup_is_made_limited_entered_and_removed(tmp_path: Path) -> None:
    base = v2_tree(tmp_path)
    support = CgroupSupport(base, "delegated")
    group = SandboxCgroup.create(plan(rlimits={"as": 1 << 30}, pids=64), support, pid=4242)
    assert group is not None and group.path == base / "kswarm-4242"
    assert (group.path / "memory.max").read_text() == str(1 << 30)
    assert (group.path / "pids.max").read_text() == "64"
    assert (group.path / "cgroup.procs").read_text() == "4242"  # the launcher moved itself in
    for name in os.listdir(group.path):  # the kernel's files vanish with the cgroup; a plain dir's do not
        (group.path / name).unlink()
    group.remove()
    assert not group.path.exists() and (base / "cgroup.procs").read_text() == str(os.getpid())


def test_nothing_is_made_where_cgroups_are_not_delegated(tmp_path: Path) -> None:
    assert SandboxCgroup.create(plan(pids=64), CgroupSupport(None, "not available: cgroup v1")) is None
