"""What the CLI suites share: the result of one in-process ``kswarm`` run."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Ran:
    code: int
    stdout: str
    stderr: str

    def error_line(self) -> str:
        """The one line a failed command prints (asserts that it is exactly one, after ``error:``)."""
        lines = self.stderr.strip().splitlines()
        assert len(lines) == 1, f"expected one line on stderr, got: {self.stderr!r}"
        assert lines[0].startswith("error: "), lines[0]
        return lines[0].removeprefix("error: ")


Kswarm = Callable[..., Ran]
