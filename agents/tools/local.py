"""Local tools: ``bash``, ``read_file``, ``write_file``, ``edit_file``, ``memory_read``, ``memory_write``.

File tools are confined to the work dir, memory tools to the memory dir (``agents.tools.paths``).
``bash`` runs ``bash -c`` with the work dir as cwd in its own process group, which is killed on
timeout; its output (stdout and stderr together) is truncated with a note.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from agents.tools.git_remote import GIT_URL_ENV, GitRemote
from agents.tools.paths import PathRefused, confine, relative
from agents.tools.result import ToolResult, truncate

MEMORY_FILE = "MEMORY.md"
# Never handed to bash even if present: the agent holds only its own token.
SECRET_ENV = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "KSWARM_LLM_API_KEY", "KSWARM_OPERATOR_TOKEN")


def _obj(props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": required}


STR = {"type": "string"}
SPECS: list[dict[str, Any]] = [
    {
        "name": "bash",
        "description": "Run a bash command in your work dir; stdout+stderr (truncated) and the exit code.",
        "input_schema": _obj(
            {"command": STR, "timeout": {"type": "number", "description": "Seconds (default: the max)."}},
            ["command"],
        ),
    },
    {
        "name": "read_file",
        "description": "Read a text file in your work dir (path relative to it); optional line range.",
        "input_schema": _obj(
            {"path": STR, "offset": {"type": "integer", "minimum": 1}, "limit": {"type": "integer"}},
            ["path"],
        ),
    },
    {
        "name": "write_file",
        "description": "Create or overwrite a file in your work dir (parent dirs are created).",
        "input_schema": _obj({"path": STR, "content": STR}, ["path", "content"]),
    },
    {
        "name": "edit_file",
        "description": "Replace old_text by new_text in a work-dir file; old_text must match exactly once.",
        "input_schema": _obj(
            {"path": STR, "old_text": STR, "new_text": STR}, ["path", "old_text", "new_text"]
        ),
    },
    {
        "name": "memory_read",
        "description": "Read a memory file (default MEMORY.md); '.' lists your memory files.",
        "input_schema": _obj({"file": STR}, []),
    },
    {
        "name": "memory_write",
        "description": "Write a memory file (default MEMORY.md); append=true adds to its end.",
        "input_schema": _obj({"content": STR, "file": STR, "append": {"type": "boolean"}}, ["content"]),
    },
]


def memory_banner(text: str) -> str | None:
    """The orchestrator's identity banner at the top of MEMORY.md (title + one paragraph), if any."""
    if not text.startswith("# Memory of "):
        return None
    parts = text.split("\n\n", 2)
    return "\n\n".join(parts[:2]) + "\n\n" if len(parts) >= 2 else None


def write_text(path: Path, content: str) -> None:
    """Write without following a symlink planted at the final component after the check."""
    path.parent.mkdir(parents=True, exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
    fd = os.open(path, flags, 0o644)
    with os.fdopen(fd, "w") as fh:
        fh.write(content)


class LocalTools:
    """The local tools of one agent, bound to its work and memory dirs."""

    def __init__(
        self,
        work_dir: Path,
        memory_dir: Path,
        bash_timeout: float = 120.0,
        output_limit: int = 16_000,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.work = work_dir
        self.memory = memory_dir
        self.bash_timeout = bash_timeout
        self.limit = output_limit
        base = dict(os.environ if env is None else env)
        self.env = {k: v for k, v in base.items() if k not in SECRET_ENV}
        self.git = GitRemote(base)
        self.handlers: dict[str, Callable[..., Awaitable[ToolResult]]] = {
            "bash": self.bash,
            "read_file": self.read_file,
            "write_file": self.write_file,
            "edit_file": self.edit_file,
            "memory_read": self.memory_read,
            "memory_write": self.memory_write,
        }

    def specs(self) -> list[dict[str, Any]]:
        return [dict(s) for s in SPECS]

    async def aclose(self) -> None:
        """Stop the git bridge, if bash ever opened one."""
        await self.git.aclose()

    async def call(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        handler = self.handlers[name]
        try:
            return await handler(**arguments)
        except PathRefused as exc:
            return ToolResult(str(exc), is_error=True)
        except TypeError as exc:
            return ToolResult(f"bad arguments for {name}: {exc}", is_error=True)
        except (OSError, UnicodeDecodeError) as exc:
            return ToolResult(f"{name} failed: {type(exc).__name__}: {exc}", is_error=True)

    # -- bash -------------------------------------------------------------------------------

    async def bash(self, command: str, timeout: float | None = None) -> ToolResult:  # noqa: ASYNC109 - the tool's own argument
        limit = min(float(timeout), self.bash_timeout) if timeout else self.bash_timeout
        self.work.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        env = dict(self.env)
        if (git_url := await self.git.url()) is not None:
            env[GIT_URL_ENV] = git_url  # git cannot use the socket: a loopback bridge to it
        proc = await asyncio.create_subprocess_exec(
            "bash",
            "-c",
            command,
            cwd=self.work,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,  # its own process group: a timeout kills what it spawned too
        )
        try:
            out, _ = await asyncio.wait_for(proc.communicate(), limit)
        except TimeoutError:
            self._kill_group(proc.pid)
            out, _ = await proc.communicate()
            text = truncate(out.decode(errors="replace"), self.limit)
            return ToolResult(f"{text}\n[timed out after {limit:g}s; the command was killed]", is_error=True)
        except asyncio.CancelledError:
            self._kill_group(proc.pid)
            raise
        text = truncate(out.decode(errors="replace"), self.limit)
        took = time.monotonic() - started
        return ToolResult(
            f"{text}\n[exit code {proc.returncode}; {took:.1f}s]", is_error=proc.returncode != 0
        )

    @staticmethod
    def _kill_group(pid: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)

    # -- files ------------------------------------------------------------------------------

    async def read_file(self, path: str, offset: int | None = None, limit: int | None = None) -> ToolResult:
        target = confine(path, self.work)
        if not target.is_file():
            return ToolResult(f"no file {path!r} in the work dir", is_error=True)
        text = target.read_text()
        if offset or limit:
            lines = text.splitlines(keepends=True)
            start = max(1, offset or 1) - 1
            text = "".join(lines[start : start + limit if limit else None])
        return ToolResult(truncate(text, self.limit))

    async def write_file(self, path: str, content: str) -> ToolResult:
        target = confine(path, self.work)
        write_text(target, content)
        return ToolResult(f"wrote {len(content)} characters to {relative(target, self.work)}")

    async def edit_file(self, path: str, old_text: str, new_text: str) -> ToolResult:
        target = confine(path, self.work)
        if not target.is_file():
            return ToolResult(f"no file {path!r} in the work dir", is_error=True)
        if not old_text:
            return ToolResult("old_text is empty; give the exact text to replace", is_error=True)
        text = target.read_text()
        count = text.count(old_text)
        if count != 1:
            why = (
                "not found" if count == 0 else f"found {count} times; add surrounding text to make it unique"
            )
            return ToolResult(f"edit refused: old_text {why} in {path}", is_error=True)
        write_text(target, text.replace(old_text, new_text, 1))
        return ToolResult(f"edited {relative(target, self.work)}: 1 replacement")

    # -- memory -----------------------------------------------------------------------------

    async def memory_read(self, file: str = MEMORY_FILE) -> ToolResult:
        if file in (".", "", "/"):
            self.memory.mkdir(parents=True, exist_ok=True)
            names = sorted(str(p.relative_to(self.memory)) for p in self.memory.rglob("*") if p.is_file())
            return ToolResult("\n".join(names) or "(no memory files)")
        target = confine(file, self.memory, "memory dir")
        if not target.is_file():
            return ToolResult(f"no memory file {file!r} (yet)", is_error=file != MEMORY_FILE)
        return ToolResult(truncate(target.read_text(), self.limit))

    async def memory_write(self, content: str, file: str = MEMORY_FILE, append: bool = False) -> ToolResult:
        target = confine(file, self.memory, "memory dir")
        old = target.read_text() if target.is_file() else ""
        if append:
            sep = "" if not old or old.endswith("\n") else "\n"
            new = old + sep + content
        else:
            new = content
            banner = memory_banner(old) if target == confine(MEMORY_FILE, self.memory, "memory dir") else None
            if banner and not new.startswith(banner.split("\n", 1)[0]):
                new = banner + new  # the identity banner stays on top; the orchestrator checks it
        write_text(target, new)
        return ToolResult(f"memory {relative(target, self.memory)}: {len(new)} characters")
