"""An agent's disk bound (``resources.disk``), attacked by the agent's own process on every backend.

The attacker is the agent itself (its command replaced by the attack script): with ``disk: 64m`` it
writes 100 MB to its work dir and 100 MB more to its memory dir. Where the orchestrator may mount (root,
as here and in CI) both writes must fail (ENOSPC: the agent's dirs are a 64 MiB loop-mounted image;
EFBIG: RLIMIT_FSIZE), the host paying at most the bound; where it may not, the watchdog must quarantine
the agent with the reason in its record. The image itself (made, kept, grown, shrunk, unmounted
without leaking a loop device) is checked directly.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from kstest.waiting import wait_for
from orchestrator.sandbox.bubblewrap import BubblewrapSandbox
from orchestrator.supervisor import memory
from orchestrator.supervisor.main import stop_swarm
from orchestrator.supervisor.operations import agent_rows
from orchestrator.swarm_dir import disk

MIB = 1 << 20
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="uid isolation and loop mounts need root")

ATTACK = r"""
import errno, json, os, time
from pathlib import Path

def fill(path, mb):
    written, error = 0, None
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for _ in range(mb):
            written += os.write(fd, b"x" * (1 << 20))
        os.fsync(fd)
    except OSError as exc:
        error = errno.errorcode.get(exc.errno, str(exc.errno))
    finally:
        os.close(fd)
    return {"written": written, "error": error}

work, memory = Path(os.environ["KSWARM_WORK"]), Path(os.environ["KSWARM_MEMORY"])
report = {"work": fill(work / "big.bin", 100), "memory": fill(memory / "second.bin", 100)}
if os.environ.get("KS_KEEP") != "1":  # make room again: the report itself must fit
    (work / "big.bin").unlink()
    (memory / "second.bin").unlink()
    (work / "report.json").write_text(json.dumps(report))
time.sleep(600)
"""


def attacker(keep: bool = False) -> str:
    command = json.dumps(["python", "-c", ATTACK])
    env = json.dumps({"KS_KEEP": "1" if keep else "0"})
    return f"  - name: d-1\n    resources: {{disk: 64m}}\n    runtime: {{command: {command}, env: {env}}}\n"


@pytest.fixture(
    params=[
        "process",
        "userns:bubblewrap",
        "userns:namespaces",
        pytest.param("docker", marks=pytest.mark.docker),
    ]
)
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """uid isolation, the one sandbox (as root: a uid and a sandbox) by each implementation, Docker."""
    mode, _, sandbox = request.param.partition(":")
    if mode == "docker":
        request.getfixturevalue("docker_daemon")
    if sandbox:
        if sandbox == "bubblewrap" and BubblewrapSandbox().unavailable():
            pytest.skip(f"not tested with bubblewrap: {BubblewrapSandbox().unavailable()}")
        monkeypatch.setenv("KSWARM_SANDBOX", sandbox)  # launcher_env() hands it to every launcher
    return mode


def test_an_agent_cannot_write_past_its_disk_bound(swarm_factory) -> None:
    if disk.mount_unavailable():
        pytest.skip(f"no loop mounts here: {disk.mount_unavailable()}")
    swarm = swarm_factory(attacker())
    report_path = swarm.layout.agent_dir("d-1", "work") / "report.json"
    wait_for(report_path.exists, 60, "the agent's report")
    report = json.loads(report_path.read_text())
    for where in ("work", "memory"):
        assert report[where]["error"] in ("ENOSPC", "EFBIG"), report
    assert report["work"]["written"] + report["memory"]["written"] <= 64 * MIB, report
    # The agent's dirs are a filesystem of their own; the host paid at most the bound for them.
    data = swarm.layout.agent_data("d-1")
    assert disk.mounted(data) and data.stat().st_dev != swarm.layout.root.stat().st_dev
    image = swarm.layout.disk_image("d-1")
    # (the host's own extent blocks of the sparse image may add a few KiB)
    assert image.stat().st_size == 64 * MIB and image.stat().st_blocks * 512 <= 65 * MIB
    # Down: the image is unmounted (the loop device freed with it) and kept with the agent's files. As
    # `kswarm down` does, the supervisor stops first: its next pass would start the agent again.
    swarm.stop_thread()
    stop_swarm(swarm.layout, swarm.supervisor.runtime, purge=False)
    assert not disk.mounted(data) and image.exists()
    assert loop_devices_of(image) == []
    # Its files are still there for the operator (`kswarm agent memory show` mounts it meanwhile).
    assert "# Memory of d-1" in memory.show(swarm.layout, "d-1").memory_md
    assert not disk.mounted(data) and loop_devices_of(image) == []


def test_without_mounts_the_watchdog_quarantines_an_agent_over_its_bound(
    swarm_factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fallback of an operator without root: RLIMIT_FSIZE stops each file at the bound, and the
    reconcile loop's measurement stops the agent once its dirs hold more, saying why."""
    monkeypatch.setattr(disk, "mount_unavailable", lambda: "not root (no CAP_SYS_ADMIN)")
    swarm = swarm_factory(attacker(keep=True), disk_check_s=0.2)
    big = swarm.layout.agent_dir("d-1", "work") / "big.bin"
    record = wait_for(
        lambda: (rec := swarm.record("d-1")).state == "quarantined" and rec, 60, "the watchdog's quarantine"
    )
    assert "over its disk bound" in record.last_error and "resources.disk is 64m" in record.last_error
    assert not swarm.supervisor.runtime.status("d-1").running
    assert big.stat().st_size == 64 * MIB  # EFBIG there: no file past the bound
    assert not disk.mounted(swarm.layout.agent_data("d-1"))
    assert "bounded by a watchdog" in (swarm.supervisor.warning or "")  # what `kswarm up` says once
    assert any("d-1 is quarantined: over its disk bound" in t for t in swarm.ops_texts())
    row = agent_rows(swarm.layout, swarm.supervisor.runtime)[0]  # what `kswarm ps` shows without a gateway
    assert row["supervisor_state"] == "quarantined" and "over its disk bound" in row["reason"]


def loop_devices_of(image: Path) -> list[str]:
    done = subprocess.run(["losetup", "-j", str(image)], capture_output=True, text=True, check=True)
    return done.stdout.splitlines()


@pytest.fixture
def image_dir(tmp_path: Path) -> Path:
    if disk.mount_unavailable():
        pytest.skip(f"no loop mounts here: {disk.mount_unavailable()}")
    return tmp_path


def test_the_image_is_kept_grown_and_refused_a_shrink_below_use(image_dir: Path) -> None:
    image, point = image_dir / "disks" / "a.img", image_dir / "data" / "a"
    try:
        disk.attach(image, point, 32 * MIB, "a")
        (point / "keep.txt").write_text("mine")
        (point / "fill.bin").write_bytes(b"x" * (20 * MIB))
        disk.attach(image, point, 32 * MIB, "a")  # idempotent: already mounted at that size
        disk.detach(point)
        assert not disk.mounted(point) and loop_devices_of(image) == []
        disk.attach(image, point, 64 * MIB, "a")  # grown: the files are still there, the room is more
        assert (point / "keep.txt").read_text() == "mine"
        assert os.statvfs(point).f_blocks * os.statvfs(point).f_frsize > 48 * MIB
        with pytest.raises(disk.DiskError, match=r"do not fit in resources\.disk 16m"):
            disk.attach(image, point, 16 * MIB, "a")
    finally:
        disk.discard(image, point)
    assert not image.exists() and not disk.mounted(point)


def test_files_in_the_bare_mount_point_move_into_the_image(image_dir: Path) -> None:
    """An agent from before the bound (or memory restored while the swarm was down) keeps its files."""
    image, point = image_dir / "disks" / "b.img", image_dir / "data" / "b"
    (point / "memory").mkdir(parents=True)
    (point / "memory" / "MEMORY.md").write_text("notes")
    (point / "link").symlink_to("/etc/passwd")
    try:
        disk.attach(image, point, 32 * MIB, "b")
        assert disk.mounted(point) and (point / "memory" / "MEMORY.md").read_text() == "notes"
        assert os.readlink(point / "link") == "/etc/passwd"  # copied as a link, never followed
        disk.detach(point)
        assert sorted(os.listdir(point)) == []  # nothing left to hide under the mount
    finally:
        disk.discard(image, point)


def test_the_watchdog_walk_stops_at_the_bound(tmp_path: Path) -> None:
    for i in range(50):
        (tmp_path / f"f{i}").write_bytes(b"x" * 8192)
    assert disk.used_beyond(tmp_path, 10 * MIB) is None
    over = disk.used_beyond(tmp_path, 64 * 1024)
    assert over is not None and 64 * 1024 < over < 50 * 8192  # stopped before walking everything


def test_an_image_a_leftover_process_still_holds_is_never_mounted_twice_nor_resized(image_dir: Path) -> None:
    """A process of the agent's last run keeps its lazily unmounted filesystem alive: the next start
    mounts that same loop device again (two loop devices on one image would be two filesystems
    writing one file), and a resize waits until it has exited."""
    image, point = image_dir / "disks" / "c.img", image_dir / "data" / "c"
    try:
        disk.attach(image, point, 32 * MIB, "c")
        held = open(point / "held.txt", "w")  # the leftover process's open file
        disk.detach(point)  # busy: unmounted lazily
        assert not disk.mounted(point) and len(loop_devices_of(image)) == 1
        disk.attach(image, point, 32 * MIB, "c")
        assert disk.mounted(point) and len(loop_devices_of(image)) == 1 and (point / "held.txt").exists()
        disk.detach(point)
        with pytest.raises(disk.DiskError, match="still in use"):
            disk.attach(image, point, 64 * MIB, "c")
        held.close()
        wait_for(lambda: loop_devices_of(image) == [], 10, "the loop device's autoclear")
        disk.attach(image, point, 64 * MIB, "c")
        assert (point / "held.txt").exists()
    finally:
        disk.discard(image, point)
    assert loop_devices_of(image) == []
