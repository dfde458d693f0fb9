"""Fixtures for the verification harness tests (all on the CPU, Triton interpreter in the child)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from verifykit import CATALOGUE, CHEATS, HONEST, SharedForkServer, TaskFactory


@pytest.fixture(scope="session", autouse=True)
def shared_fork_server() -> Iterator[None]:
    """Stops the shared fork server (verifykit.verify) at the end of the run."""
    yield
    SharedForkServer.close()


@pytest.fixture
def cheats() -> Path:
    return CHEATS


@pytest.fixture
def honest() -> Path:
    return HONEST


@pytest.fixture
def add_task() -> Path:
    return CATALOGUE / "add"


@pytest.fixture
def make_task(tmp_path: Path) -> TaskFactory:
    """A copy of a catalogue task with some settings overridden (fewer dtypes keep the
    slow interpreter tests short; ``layouts={}`` isolates a test from the layout checks)."""

    def make(
        name: str = "add",
        *,
        dtypes: list[str] | None = None,
        layouts: dict[int, list[str]] | None = None,
        extra: str = "",
    ) -> Path:
        source = (CATALOGUE / name / "task.py").read_text()
        if dtypes is not None:
            source += f"\nDTYPES = {dtypes!r}\n"
        if layouts is not None:
            source += f"\nINPUT_LAYOUTS = {layouts!r}\n"
        folder = tmp_path / f"task_{name}_{len(list(tmp_path.glob('task_*')))}"
        folder.mkdir()
        (folder / "task.py").write_text(source + extra)
        return folder

    return make


@pytest.fixture
def make_add_task(make_task: TaskFactory) -> Callable[[list[str]], Path]:
    """An `add` task with other dtypes (same inputs/reference)."""
    return lambda dtypes: make_task("add", dtypes=dtypes)
