"""Touching files in an agent's own dirs without following what the agent planted there.

An agent may replace anything in its data dir with a symlink (``.gitconfig`` -> ``/etc/passwd``,
``home/.kswarm`` -> ``/etc``) before its next start. The orchestrator, which provisions those dirs as
root (uid mode) or as the operator (namespace sandbox), must then neither write nor read nor chmod
through the link. Every path here is walked one component at a time with ``O_NOFOLLOW`` relative to
a directory fd, and whatever stands in the way of a directory or a file we own is removed first.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _open_child_dir(parent_fd: int, name: str, mode: int) -> int:
    try:
        return os.open(name, DIR_FLAGS, dir_fd=parent_fd)
    except FileNotFoundError:
        pass
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise
        os.unlink(name, dir_fd=parent_fd)  # a symlink or a file where our dir belongs
    os.mkdir(name, mode, dir_fd=parent_fd)
    return os.open(name, DIR_FLAGS, dir_fd=parent_fd)


@contextlib.contextmanager
def agent_dir(base: Path, *parts: str, mode: int = 0o700, uid: int | None = None) -> Iterator[int]:
    """An fd of ``base/parts...``: ``base`` is trusted (the orchestrator's), each part is created if
    missing and replaced if it is not a real directory; each gets ``mode`` (and ``uid``)."""
    fd = os.open(base, DIR_FLAGS)
    try:
        for part in parts:
            child = _open_child_dir(fd, part, mode)
            os.close(fd)
            fd = child
            os.fchmod(fd, mode)
            if uid is not None:
                os.fchown(fd, uid, uid)
        yield fd
    finally:
        os.close(fd)


def read_text(dir_fd: int, name: str, limit: int = 1 << 20) -> str | None:
    """The regular file ``name`` in ``dir_fd``; None if missing, a link or not a regular file."""
    got = read_prefix(dir_fd, name, limit)
    return None if got is None else got[0]


def read_prefix(dir_fd: int, name: str, limit: int) -> tuple[str, bool] | None:
    """The first ``limit`` bytes of the regular file ``name`` in ``dir_fd`` and whether there is more;
    None if missing, a link or not a regular file (a fifo the agent planted never blocks us)."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except (FileNotFoundError, OSError):
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        chunks: list[bytes] = []
        size = 0
        while size <= limit and (chunk := os.read(fd, limit + 1 - size)):
            chunks.append(chunk)
            size += len(chunk)
        data = b"".join(chunks)
        return data[:limit].decode(errors="replace"), len(data) > limit
    finally:
        os.close(fd)


def write_text(dir_fd: int, name: str, text: str, mode: int = 0o600, uid: int | None = None) -> None:
    """Replace ``name`` in ``dir_fd`` atomically by a new file (a link in its place is replaced, not
    followed; a directory in its place is an error)."""
    tmp = f".{name}.kswarm-tmp"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp, dir_fd=dir_fd)
    fd = os.open(
        tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dir_fd
    )
    try:
        os.write(fd, text.encode())
        os.fchmod(fd, mode)
        if uid is not None:
            os.fchown(fd, uid, uid)
    finally:
        os.close(fd)
    os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)


def real_dir(path: Path) -> bool:
    """Is ``path`` a directory and not a symlink to one?"""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except FileNotFoundError:
        return False
