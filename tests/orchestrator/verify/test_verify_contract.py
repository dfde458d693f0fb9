"""Principle 4: the output contract is checked fully: a fresh, dense, contiguous tensor that starts at
its storage's beginning, in a storage exactly its size, not a view, sharing memory with no input and
no earlier call's output. Each cheat returned right values and passed before."""

from __future__ import annotations

from pathlib import Path

import pytest
from verifykit import TaskFactory, summary, verify

from orchestrator.verify import Flag

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    ("name", "flag", "words"),
    [
        ("cached_workspace", Flag.OUTPUT_REUSED, "shares storage"),  # one buffer returned every call
        ("slice_of_larger", Flag.OUTPUT_CONTRACT, "start at its storage"),  # the middle of a pool
        ("strided_output", Flag.OUTPUT_CONTRACT, "not contiguous"),  # every other element
        ("returns_view", Flag.OUTPUT_CONTRACT, "view of another tensor"),  # a view of a kept buffer
    ],
)
def test_output_contract(make_task: TaskFactory, cheats: Path, name: str, flag: Flag, words: str) -> None:
    result = verify(make_task("add", dtypes=["float32"], layouts={}), cheats / f"{name}.py")
    assert result.static_violations == []  # nothing the static gate could see
    assert result.verdict == "fail" and flag in result.flags, summary(result)
    assert any(words in (t.detail or "") for t in result.trials), summary(result)
