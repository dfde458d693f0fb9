"""Task loader: the example tasks load; malformed tasks are rejected with a clear TaskError."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from orchestrator.verify.tasks import TaskError, Tolerance, load_task

GOOD = """
import torch
ENTRY = "add"
DTYPES = ["float32"]
CPU_SHAPES = [{"n": 1000}, {"n": 3001}, {"n": 37}]
SHAPES = [{"n": 98765}, {"n": 1000003}, {"n": 4097}]

def make_inputs(case, dtype, seed, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(case["n"], generator=g).to(dtype),)

def reference(x):
    return x
"""


def write(tmp_path: Path, source: str) -> Path:
    (tmp_path / "task.py").write_text(source)
    return tmp_path


@pytest.mark.parametrize("name", ["add", "softmax", "matmul"])
def test_examples_load_and_plan_trials(examples: Path, name: str) -> None:
    task = load_task(examples / "tasks" / name)
    assert task.entry == name and len(task.seeds) >= 5
    trials = task.trials(cpu=True)
    assert len(trials) == len(task.cpu_shapes) * len(task.dtypes) * len(task.seeds)
    assert [t.index for t in trials] == list(range(len(trials)))
    case = task.cpu_shapes[0]
    a = task.make_inputs(case, torch.float32, 3, "cpu")
    b = task.make_inputs(case, torch.float32, 3, "cpu")
    c = task.make_inputs(case, torch.float32, 4, "cpu")
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))  # deterministic per seed
    assert not all(torch.equal(x, y) for x, y in zip(a, c, strict=True))


def test_tolerance_overrides(tmp_path: Path) -> None:
    task = load_task(
        write(tmp_path, GOOD + '\nTOLERANCES = {"float16": 0.05, "float32": {"atol": 1e-3, "rtol": 0}}\n')
    )
    assert task.tolerance("float16") == Tolerance(0.05, 0.05)
    assert task.tolerance("float32") == Tolerance(1e-3, 0.0)
    assert task.tolerance("bfloat16") == Tolerance(2e-2, 2e-2)


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ('\nCPU_SHAPES = [{"n": 1024}, {"n": 2048}, {"n": 37}]\n', "multiple of"),
        ('\nCPU_SHAPES = [{"n": 1001}, {"n": 1003}, {"n": 1005}]\n', "another scale"),
        ("\nSEEDS = [0, 1, 2]\n", "SEEDS"),
        ('\nDTYPES = ["float77"]\n', "unknown dtype"),
        ('\nENTRY = "not an identifier"\n', "ENTRY"),
        ("\ndel reference\n", "reference"),
    ],
)
def test_invalid_tasks(tmp_path: Path, patch: str, message: str) -> None:
    with pytest.raises(TaskError, match=message):
        load_task(write(tmp_path, GOOD + patch))


def test_missing_task_file(tmp_path: Path) -> None:
    with pytest.raises(TaskError, match=r"task\.py"):
        load_task(tmp_path)
