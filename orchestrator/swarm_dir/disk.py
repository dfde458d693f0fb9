"""One agent's disk bound (``resources.disk``), the same for every backend.

An agent's dirs (home, work, memory, history: ``swarm/data/<name>``) live on the filesystem of the
forge, Redis's log and the gateway's logs; a full disk there turns every post into a 503. So:

- **mount** (the orchestrator may mount: root or CAP_SYS_ADMIN, ``/dev/loop-control``, ``mkfs.ext4``):
  one sparse ext4 image per agent (``swarm/disks/<name>.img``), loop-mounted ``nosuid,nodev`` on the
  agent's data dir before it starts. A write past the bound fails with ENOSPC, whichever backend runs
  the agent: the uid mode's private mount namespace and the namespace sandbox copy/bind the mount, and
  Docker binds dirs inside it. The image is kept across restarts and ``kswarm down`` (the files are the
  agent's), grown when the spec's size grew, shrunk when it shrank and the files still fit (else the
  start is refused, saying so); files that sit in the bare mount point (an agent from before the
  bound, a memory rollback while the swarm was down) are moved into the image first. It is unmounted
  when the agent is removed (``kswarm down``, the spec no longer names it); ``mount -o loop`` sets the
  loop device's autoclear, so the unmount frees the device too.
- **watchdog** (nothing may mount: ``kswarm demo`` as a user): ``kswarm up`` says so once, and the
  reconcile loop measures each running agent's dirs every ``lifecycle.disk_check_s`` (a walk that stops
  at the bound) and quarantines an agent over it, with the reason in its ``last_error``.

Either way the launcher sets RLIMIT_FSIZE to the bound: no single file grows past it (EFBIG).
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shutil
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

MKFS = "mkfs.ext4"
CAP_SYS_ADMIN = 21
TOOL_TIMEOUT_S = 120
BLOCK = 4096  # the watchdog counts each entry at least this (what ext4 spends on a small file)


class DiskError(RuntimeError):
    """An agent's disk image could not be made, resized or mounted: one line saying why."""


def _have_sys_admin() -> bool:
    if os.geteuid() == 0:
        return True
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return False
    found = re.search(r"^CapEff:\s*([0-9a-f]+)$", status, re.M)
    return bool(found and int(found.group(1), 16) >> CAP_SYS_ADMIN & 1)


@functools.cache
def mount_unavailable() -> str | None:
    """Why agents' disks cannot be loop-mounted here (None: they can); asked once per process."""
    if not _have_sys_admin():
        return "not root (no CAP_SYS_ADMIN)"
    if not Path("/dev/loop-control").exists():
        return "no loop devices (/dev/loop-control)"
    for tool in (MKFS, "mount", "umount", "findmnt", "losetup", "resize2fs", "e2fsck"):
        if shutil.which(tool, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin") is None:
            return f"{tool} is not installed"
    return None


def disk_warning() -> str | None:
    """What ``kswarm up`` says once when only the watchdog bounds agents' disks (None: mounts do)."""
    why = mount_unavailable()
    if why is None:
        return None
    return (
        f"agents' disks are bounded by a watchdog, not a mount ({why}): an agent over resources.disk is "
        "quarantined at the next check, and RLIMIT_FSIZE bounds each file"
    )


def _tool(*argv: str, ok: tuple[int, ...] = (0,)) -> subprocess.CompletedProcess[str]:
    path = os.environ.get("PATH", "") + ":/usr/sbin:/sbin"
    exe = shutil.which(argv[0], path=path) or argv[0]
    done = subprocess.run(
        [exe, *argv[1:]], capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, stdin=subprocess.DEVNULL
    )
    if done.returncode not in ok:
        said = (done.stderr.strip() or done.stdout.strip()).splitlines()
        raise DiskError(f"{' '.join(argv[:2])}: {said[-1] if said else f'exit {done.returncode}'}")
    return done


def _unescape(field: str) -> str:  # mountinfo writes space, tab, newline and backslash as \ooo
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def mounted(point: Path) -> bool:
    """Is something mounted on ``point`` (in this process's mount namespace)?"""
    target = os.path.realpath(point)
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return False
    return any(_unescape(line.split()[4]) == target for line in lines)


def _human(size: int) -> str:
    for unit, shift in (("g", 30), ("m", 20), ("k", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift}{unit}"
    return f"{size} bytes"


def _make(image: Path, size: int) -> None:
    fd = os.open(image, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.ftruncate(fd, size)  # sparse: the host pays for what the agent writes, not for the bound
    finally:
        os.close(fd)
    try:
        # -m 0: no blocks reserved for root (the agent is never root there), so the bound is the bound;
        # a 4 MiB journal (the smallest): the host pays for it in every image, written or not.
        _tool(MKFS, "-q", "-F", "-m", "0", "-J", "size=4", str(image))
    except DiskError:
        image.unlink(missing_ok=True)
        raise


def _loop_of(image: Path) -> str | None:
    """The loop device still backing ``image`` (a lazily unmounted filesystem a leftover process
    holds), if any."""
    found = _tool("losetup", "-j", str(image)).stdout.split(":", 1)[0].strip()
    return found or None


def _resize(image: Path, size: int, name: str) -> None:
    """Grow or shrink an unmounted image to ``size``; a shrink below what it holds is refused."""
    if _loop_of(image):  # resizing under a live filesystem would corrupt it
        raise DiskError(
            f"agent {name}'s disk is still in use (a process of its last run holds it): its new size "
            "applies once that has exited"
        )
    _tool("e2fsck", "-f", "-p", str(image), ok=(0, 1))  # resize2fs wants a freshly checked filesystem
    if size > image.stat().st_size:
        os.truncate(image, size)
        _tool("resize2fs", str(image))
        return
    try:
        _tool("resize2fs", str(image), f"{size // 1024}K")
    except DiskError as exc:
        raise DiskError(
            f"agent {name}'s files do not fit in resources.disk {_human(size)} ({exc}): free space in "
            f"its dirs or keep resources.disk at {_human(image.stat().st_size)}"
        ) from None
    os.truncate(image, size)


def _mount(image: Path, point: Path) -> None:
    # A loop device that still backs the image is mounted again (the same filesystem, one superblock):
    # a second loop device on the same image would be two filesystems writing one file.
    device = _loop_of(image)
    if device is not None:
        _tool("mount", "-o", "nosuid,nodev", device, str(point))
    else:
        _tool("mount", "-o", "loop,nosuid,nodev", str(image), str(point))


def _clear(directory: Path) -> None:
    """Remove what is in ``directory`` (links removed, never followed)."""
    for entry in os.scandir(directory):
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path)
        else:
            os.unlink(entry.path)


def _move_in(image: Path, point: Path, name: str) -> None:
    """Files in the bare mount point go into the image (else the mount would hide them on the host)."""
    staging = image.with_suffix(".moving")
    staging.mkdir(mode=0o700, exist_ok=True)
    _mount(image, staging)
    try:
        # -a: owners, modes and links as they are (nothing followed); ENOSPC if they do not fit.
        _tool("cp", "-a", "--", f"{point}/.", f"{staging}/")
    except DiskError as exc:
        raise DiskError(
            f"agent {name}'s files do not fit in resources.disk {_human(image.stat().st_size)} ({exc})"
        ) from None
    finally:
        _tool("umount", str(staging))
        staging.rmdir()
    _clear(point)


def attach(image: Path, point: Path, size: int, name: str) -> None:
    """Make sure ``image`` (``size`` bytes) is mounted on ``point``; idempotent, run before every start."""
    point.mkdir(parents=True, exist_ok=True, mode=0o700)
    if not stat.S_ISDIR(os.lstat(point).st_mode):
        raise DiskError(f"{point} is not a directory: agent {name}'s disk cannot be mounted there")
    if mounted(point):
        if image.exists() and image.stat().st_size == size:
            return
        _tool("umount", str(point))  # the agent is down (a start is due): resized below, mounted again
    image.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    if not image.exists():
        _make(image, size)
    elif image.stat().st_size != size:
        _resize(image, size, name)
    if any(os.scandir(point)):
        _move_in(image, point, name)
    _mount(image, point)


def detach(point: Path) -> None:
    """Unmount ``point`` if it is mounted (lazily when busy: a leftover process keeps it until it exits,
    and the loop device is freed then); the image and its files stay."""
    if not mounted(point):
        return
    device = _tool("findmnt", "-n", "-o", "SOURCE", "--mountpoint", str(point), ok=(0, 1)).stdout.strip()
    try:
        _tool("umount", str(point))
    except DiskError:
        _tool("umount", "-l", str(point))
        return
    _released(device)


def _released(device: str, bound_s: float = 10.0) -> None:
    """Wait (bounded) until the unmounted filesystem's loop device lets its image go: the kernel clears
    an autoclear device after the last close, asynchronously, so without this a removed agent's image
    is still attached for a moment after ``down`` returns."""
    name = Path(device).name
    if not name.startswith("loop"):
        return
    backing = Path("/sys/block") / name / "loop" / "backing_file"
    deadline = time.monotonic() + bound_s
    while backing.exists() and time.monotonic() < deadline:
        time.sleep(0.05)


@contextlib.contextmanager
def visible(image: Path, point: Path) -> Iterator[None]:
    """The agent's files at ``point`` for a read or an edit from outside while it is removed (``kswarm
    agent memory show`` or ``rollback`` after ``kswarm down``): its image is mounted for that time."""
    if not image.exists() or mounted(point) or mount_unavailable() is not None:
        yield
        return
    point.mkdir(parents=True, exist_ok=True, mode=0o700)
    _mount(image, point)
    try:
        yield
    finally:
        detach(point)


def discard(image: Path, point: Path) -> None:
    """Unmount and delete the image (a purge: the agent's files go)."""
    detach(point)
    with contextlib.suppress(FileNotFoundError):
        image.unlink()


def used_beyond(root: Path, limit: int) -> int | None:
    """The bytes ``root`` holds on disk if more than ``limit``, else None. The walk stops as soon as
    it passes ``limit``, counting each entry's blocks (a sparse file costs what it holds) but at least
    ``BLOCK`` (a million empty files cost inodes too), so its cost is bounded by the bound, not by what
    an agent piles up; a hard-linked inode counts once; no link is followed."""
    total = 0
    seen: set[tuple[int, int]] = set()
    stack = [str(root)]
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue  # gone meanwhile, or not ours to read: what it holds is not counted
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if st.st_nlink > 1 and not stat.S_ISDIR(st.st_mode):
                if (st.st_dev, st.st_ino) in seen:
                    continue
                seen.add((st.st_dev, st.st_ino))
            total += max(st.st_blocks * 512, BLOCK)
            if total > limit:
                return total
            if stat.S_ISDIR(st.st_mode):
                stack.append(entry.path)
    return None
