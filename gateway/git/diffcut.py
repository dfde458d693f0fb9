"""Diffs with bounded memory: a unified diff is cut while it streams, never read whole first.

``DiffCutter`` takes a diff in chunks (from git's stdout or an HTTP body) and keeps whole file sections
(``diff --git`` onward): a section over ``max_file_bytes`` becomes its first line and a marker
``... file diff too large, N bytes, not shown``; once ``max_bytes`` are kept the rest is cut at a line
end with a trailing marker ``... diff cut at N bytes; <hint>`` and the cutter asks for no more input.
It holds at most ``max_bytes`` plus one section's first ``max_file_bytes`` plus a chunk, whatever the
diff's size; ``max_read`` bounds the bytes it consumes (and so the time a source spends on sections it
drops). ``stream_git`` feeds it from a git subprocess and kills the process once it has enough.

The markers start with ``... ``: no line of a ``git diff`` between sections does, so readers (the UI's
``split_diff``) can tell them from the diff.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gateway.git.core import GitError, git_env

CHUNK = 64 * 1024
SECTION = b"\ndiff --git "
MARK = "... "
BINARY_RE = re.compile(rb"^index ([0-9a-f]{40})\.\.([0-9a-f]{40})(?: \d+)?\nBinary files ", re.M)


@dataclass
class CutDiff:
    """A diff as shown: ``truncated`` when anything was left out (a file over the per-file cap, or the
    rest past the total cap); ``too_large``: the paths shown as a marker only."""

    text: str = ""
    truncated: bool = False
    too_large: list[str] = field(default_factory=list)


def too_large_line(size: int, limit: int, at_least: bool = False) -> str:
    bytes_ = f"{'at least ' if at_least else ''}{size} bytes"
    return f"{MARK}file diff too large, {bytes_}, not shown (over {limit} bytes per file)\n"


def cut_line(max_bytes: int, hint: str) -> str:
    return f"{MARK}diff cut at {max_bytes} bytes; {hint}\n"


def read_cut_line(read: int, hint: str) -> str:
    return f"{MARK}diff cut after reading {read} bytes (the files above are all that fit); {hint}\n"


def _section_path(head: bytes) -> str:
    line = head.split(b"\n", 1)[0].decode(errors="replace")
    parts = line.split(" b/", 1)
    return parts[1] if len(parts) == 2 else line[len("diff --git ") :]


class DiffCutter:
    def __init__(self, max_bytes: int, max_file_bytes: int, hint: str, max_read: int = 0) -> None:
        self.max_bytes = max_bytes
        self.max_file_bytes = max_file_bytes
        self.hint = hint
        self.max_read = max_read or 8 * max_bytes + 2 * max_file_bytes
        self.sections: list[bytes] = []  # kept, whole (the last one may be cut at the total cap)
        self.kept = 0
        self.read = 0
        self.section = bytearray()  # the current section, while under the per-file cap
        self.section_size = 0
        self.section_head = b""  # its first line, once the section is over the cap
        self.carry = b""  # the tail of the last chunk: a section start may straddle two chunks
        self.cut = False  # the total cap (or max_read) was reached: no more input wanted
        self.read_out = False  # it was max_read
        self.too_large: list[tuple[str, int]] = []

    def feed(self, chunk: bytes) -> bool:
        """Take the next chunk; False when the cutter wants no more (the source may stop)."""
        if self.cut:
            return False
        self.read += len(chunk)
        buf = self.carry + chunk
        start = 0
        while True:
            idx = buf.find(SECTION, start)
            if idx < 0:
                break
            self._add(buf[start : idx + 1])
            self._close()
            if self.cut:
                return False
            start = idx + 1
        keep = len(SECTION) - 1  # a partial "\ndiff --git " at the end waits for the next chunk
        self.carry = buf[max(start, len(buf) - keep) :]
        self._add(buf[start : max(start, len(buf) - keep)])
        if self.read >= self.max_read and not self.cut:
            self._add(self.carry)
            self.carry = b""
            self._close(final=True)
            self.read_out = not self.cut
            self.cut = True
        return not self.cut

    def _add(self, data: bytes) -> None:
        if not data:
            return
        self.section_size += len(data)
        if self.section_head:  # over its cap already: only its size counts from here on
            return
        if self.section_size <= self._limit(data):
            self.section.extend(data)
        else:  # over the cap: keep its first line for the marker
            first = (bytes(self.section) + data[:1024]).split(b"\n", 1)[0]
            self.section_head = first[:1024] + b"\n"
            self.section = bytearray()

    def _limit(self, data: bytes) -> int:
        """A file's section is capped per file; text between files (``format-patch``'s commit mail)
        only by the total cap."""
        start = bytes(self.section[: len(SECTION)]) or data[: len(SECTION)]
        return self.max_file_bytes if start.startswith(SECTION[1:]) else self.max_bytes

    def _close(self, final: bool = False) -> None:
        """The current section ends (``final``: nothing more will come for it)."""
        if not self.section_size:
            return
        if self.section_head:  # over its cap
            self.too_large.append((_section_path(self.section_head), self.section_size))
            line = too_large_line(self.section_size, self.max_file_bytes, at_least=final)
            piece = self.section_head + line.encode()
        else:
            piece = bytes(self.section)
            if final and not piece.endswith(b"\n"):  # the source stopped mid-line
                piece = piece[: piece.rfind(b"\n") + 1]
        self.section = bytearray()
        self.section_size = 0
        self.section_head = b""
        room = self.max_bytes - self.kept
        if len(piece) > room:
            end = piece.rfind(b"\n", 0, room) + 1  # cut at a line end, within the cap
            if end:
                self.sections.append(piece[:end])
                self.kept += end
            self.cut = True
            return
        self.sections.append(piece)
        self.kept += len(piece)

    def finish(self) -> CutDiff:
        """The diff as cut (call after the last chunk, or once ``feed`` said it wants no more)."""
        if not self.cut:
            self._add(self.carry)
            self.carry = b""
            self._close()
        text = b"".join(self.sections).decode(errors="replace")
        if self.cut:
            line = (
                read_cut_line(self.read, self.hint) if self.read_out else cut_line(self.max_bytes, self.hint)
            )
            text += ("" if not text or text.endswith("\n") else "\n") + line
        return CutDiff(
            text=text, truncated=self.cut or bool(self.too_large), too_large=[p for p, _ in self.too_large]
        )

    def replace(self, index: int, path: str, size: int) -> None:
        """Show kept section ``index`` as too large (``size``: its blobs' bytes, known from elsewhere)."""
        head = self.sections[index].split(b"\n", 1)[0][:1024] + b"\n"
        self.sections[index] = head + too_large_line(size, self.max_file_bytes).encode()
        self.too_large.append((path, size))

    def binary_blobs(self) -> list[tuple[int, str, str, str]]:
        """(section index, path, old blob, new blob) of kept sections git showed as binary (with
        ``--full-index``): files over ``core.bigFileThreshold`` are among them."""
        out = []
        for i, section in enumerate(self.sections):
            match = BINARY_RE.search(section)
            if match:
                out.append((i, _section_path(section), match.group(1).decode(), match.group(2).decode()))
        return out


async def stream_git(argv: list[str], git_dir: Path, sink: Callable[[bytes], bool]) -> None:
    """Run ``git argv`` and hand its stdout to ``sink`` chunk by chunk; once ``sink`` returns False the
    process is killed and nothing more is read. A failing git (not killed by us) is a ``GitError``."""
    proc = await asyncio.create_subprocess_exec(
        "git",
        f"--git-dir={git_dir}",
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=git_env(),
    )
    assert proc.stdout is not None and proc.stderr is not None
    errors = asyncio.create_task(_head_of(proc.stderr, 4096))
    stopped = False
    try:
        while chunk := await proc.stdout.read(CHUNK):
            if not sink(chunk):
                stopped = True
                break
    finally:
        if proc.returncode is None and (stopped or not proc.stdout.at_eof()):
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        rc = await proc.wait()
        err = await errors
    if rc and not stopped:
        words = " ".join(a for a in argv if not a.startswith("core."))[:200]
        raise GitError(f"git {words} failed ({rc}): {err.decode(errors='replace').strip()}")


async def _head_of(stream: asyncio.StreamReader, limit: int) -> bytes:
    """The first ``limit`` bytes of ``stream``, the rest read and dropped (a full pipe never blocks)."""
    head = b""
    while chunk := await stream.read(CHUNK):
        head = (head + chunk)[:limit]
    return head
