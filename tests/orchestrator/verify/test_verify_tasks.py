"""Task loader and seeds: the example tasks load; malformed tasks are rejected with a clear TaskError;
the size rules count only declared dimensions; seeds are fresh per job and replayable."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from verifykit import CATALOGUE

from orchestrator.verify.seeds import derive_seeds, draw_seed_base, parse_seeds, refill_seed
from orchestrator.verify.tasks import OutputContract, TaskError, Tolerance, load_task

GOOD = """
import torch
ENTRY = "add"
DTYPES = ["float32"]
DIMS = ("n",)
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
def test_examples_load_and_plan_trials(name: str) -> None:
    task = load_task(CATALOGUE / name)
    assert task.entry == name and task.seed_count >= 5 and task.dims and task.input_layouts
    seeds = derive_seeds(123, task.seed_count)
    trials = task.trials(cpu=True, seeds=seeds)
    assert len(trials) == len(task.cpu_shapes) * len(task.dtypes) * len(seeds)
    assert [t.index for t in trials] == list(range(len(trials)))
    assert {t.seed for t in trials} == set(seeds)
    layouts = {tuple(sorted(t.layout.items())) for t in trials}
    assert len(layouts) > 1  # the declared layouts are all exercised
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


def test_seed_count_and_legacy_seeds(tmp_path: Path) -> None:
    assert load_task(write(tmp_path, GOOD)).seed_count == 5
    assert load_task(write(tmp_path, GOOD + "\nSEED_COUNT = 7\n")).seed_count == 7
    legacy = load_task(write(tmp_path, GOOD + "\nSEEDS = [0, 1, 2, 3, 4, 5]\n"))
    assert legacy.seed_count == 6  # only how many: the fixed values are never used
    trials = legacy.trials(cpu=True)
    assert not {t.seed for t in trials} & set(range(6))


def test_contract_and_layouts_parse(tmp_path: Path) -> None:
    task = load_task(
        write(
            tmp_path,
            GOOD + '\nINPUT_LAYOUTS = {0: ["dense", "offset"]}\nOUTPUT_CONTRACT = {"contiguous": False}\n',
        )
    )
    assert task.input_layouts == {0: ("dense", "offset")}
    assert task.output_contract == OutputContract(contiguous=False)
    assert [t.layout for t in task.trials(cpu=True, seeds=[1, 2])][:2] == [{0: "dense"}, {0: "offset"}]


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ('\nCPU_SHAPES = [{"n": 1024}, {"n": 2048}, {"n": 32}]\n', "multiple of"),
        ('\nCPU_SHAPES = [{"n": 1001}, {"n": 1003}, {"n": 1005}]\n', "another scale"),
        # a scale key or a flag does not count as a dimension for either rule
        (
            '\nCPU_SHAPES = [{"n": 1001, "scale": 1}, {"n": 1003, "scale": 8}, {"n": 1005, "scale": 64}]\n',
            "another scale",
        ),
        ('\nCPU_SHAPES = [{"n": 1024, "odd": 3}, {"n": 2048, "odd": 5}, {"n": 64}]\n', "multiple of"),
        ('\nCPU_SHAPES = [{"m": 1001}, {"m": 3001}, {"m": 37}]\n', "lacks the declared"),
        ("\ndel DIMS\n", "DIMS"),
        ('\nDIMS = "n"\n', "DIMS"),
        ("\nSEEDS = [0, 1, 2]\n", "at least 5"),
        ("\nSEED_COUNT = 2\n", "at least 5"),
        ('\nDTYPES = ["float77"]\n', "unknown dtype"),
        ('\nENTRY = "not an identifier"\n', "ENTRY"),
        ("\ndel reference\n", "reference"),
        ('\nINPUT_LAYOUTS = {0: ["sideways"]}\n', "unknown layout"),
        ('\nINPUT_LAYOUTS = {0: ["transposed"]}\n', "at least 2 dimensions"),
        ('\nINPUT_LAYOUTS = {3: ["dense"]}\n', "make_inputs returns 1"),
        ('\nOUTPUT_CONTRACT = {"fresh": True}\n', "OUTPUT_CONTRACT"),
    ],
)
def test_invalid_tasks(tmp_path: Path, patch: str, message: str) -> None:
    with pytest.raises(TaskError, match=message):
        load_task(write(tmp_path, GOOD + patch))


def test_missing_task_file(tmp_path: Path) -> None:
    with pytest.raises(TaskError, match=r"task\.py"):
        load_task(tmp_path)


def test_seeds_are_fresh_reproducible_and_parsed() -> None:
    bases = {draw_seed_base() for _ in range(20)}
    assert len(bases) == 20  # from the OS, every job
    assert derive_seeds(42, 5) == derive_seeds(42, 5) and len(set(derive_seeds(42, 5))) == 5
    assert derive_seeds(42, 5) != derive_seeds(43, 5)
    assert refill_seed(7) == refill_seed(7) != 7
    assert parse_seeds("1, 2,0x10") == [1, 2, 16]
    for bad, message in [
        ("", "comma-separated"),
        ("1,x", "not an integer"),
        ("-1", "outside"),
        ("3,3", "twice"),
    ]:
        with pytest.raises(ValueError, match=message):
            parse_seeds(bad)


def test_device_queries_and_input_copies_parse(tmp_path: Path) -> None:
    plain = load_task(write(tmp_path, GOOD))
    assert plain.device_queries == () and plain.allow_input_copies is False
    task = load_task(
        write(
            tmp_path,
            GOOD + '\nDEVICE_QUERIES = ("torch.cuda.synchronize",)\nALLOW_INPUT_COPIES = True\n',
        )
    )
    assert task.device_queries == ("torch.cuda.synchronize",) and task.allow_input_copies is True


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ('\nDEVICE_QUERIES = "torch.cuda.synchronize"\n', "DEVICE_QUERIES"),
        ('\nDEVICE_QUERIES = ("torch.cuda.memory_allocated",)\n', "cannot be permitted"),
        ("\nALLOW_INPUT_COPIES = 1\n", "ALLOW_INPUT_COPIES"),
    ],
)
def test_bad_device_queries_and_input_copies(tmp_path: Path, patch: str, message: str) -> None:
    with pytest.raises(TaskError, match=message):
        load_task(write(tmp_path, GOOD + patch))
