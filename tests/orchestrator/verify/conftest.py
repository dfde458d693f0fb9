"""Fixtures for the verification harness tests (all on the CPU, Triton interpreter in the child)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[3] / "orchestrator" / "verify" / "examples"
CHEATS = Path(__file__).resolve().parent / "cheats"


@pytest.fixture
def examples() -> Path:
    return EXAMPLES


@pytest.fixture
def cheats() -> Path:
    return CHEATS


@pytest.fixture
def add_task() -> Path:
    return EXAMPLES / "tasks" / "add"


@pytest.fixture
def make_add_task(tmp_path: Path) -> Callable[[list[str]], Path]:
    """An `add` task with other dtypes (same inputs/reference), written under tmp_path."""

    def make(dtypes: list[str]) -> Path:
        source = (EXAMPLES / "tasks" / "add" / "task.py").read_text()
        folder = tmp_path / ("add_" + "_".join(dtypes))
        folder.mkdir()
        (folder / "task.py").write_text(source + f"\nDTYPES = {dtypes!r}\n")
        return folder

    return make
