"""Regression cases (issue 27, orchestrator/verify/regressions.py): a task's confirmed counterexamples,
``<task_dir>/regressions/*.json``, run by every normal verification as extra fixed trials with their own
input; a failing one names its case. Special values (special_values.py) are planted the same way in
every trial that asks for them."""

from __future__ import annotations

import math
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from verifykit import CATALOGUE, CHEATS, solution, summary

from kswarm_contracts.counterexample import REGRESSIONS_DIR, CounterexampleInput, RegressionCase
from orchestrator.verify import load_task, verify
from orchestrator.verify.domain import SPECIAL_VALUES
from orchestrator.verify.forkserver import ForkServer
from orchestrator.verify.special_values import plant

CAPPED = CHEATS / "fresh_shapes" / "shown_lengths_only.py"
CASE_ID = "cx0123456789ab"


@pytest.fixture(scope="module")
def server() -> Iterator[ForkServer]:
    with ForkServer(interpret=True) as shared:
        yield shared


def _case(given: CounterexampleInput, case_id: str = CASE_ID, task: str = "add") -> RegressionCase:
    return RegressionCase(
        id=case_id, task=task, input=given, finder="red-1", kernel="kernels/add.py", sha="a" * 40, job="j1"
    )


@pytest.fixture
def add_with_regressions(tmp_path: Path) -> Path:
    """The catalogue's add with one real regression case and three files that must be skipped."""
    root = tmp_path / "add"
    shutil.copytree(CATALOGUE / "add", root)
    folder = root / REGRESSIONS_DIR
    folder.mkdir()
    found = CounterexampleInput(case={"n": 500}, dtype="float32", seed=5, special=["zeros"])
    (folder / f"{CASE_ID}.json").write_text(_case(found).model_dump_json())
    outside = CounterexampleInput(case={"n": 0}, dtype="float32")
    (folder / "cx0000000000aa.json").write_text(_case(outside, "cx0000000000aa").model_dump_json())
    (folder / "cx0000000000bb.json").write_text('{"id": "cx0000000000bb", "task": "add"}')
    too_big = CounterexampleInput(case={"n": 1_000_000}, dtype="float32")
    (folder / "cx0000000000cc.json").write_text(_case(too_big, "cx0000000000cc").model_dump_json())
    return root


def test_a_regression_case_fails_the_capped_kernel_naming_the_case(
    server: ForkServer, add_with_regressions: Path
) -> None:
    result = verify(add_with_regressions, CAPPED, "cpu", server=server, seeds=[1, 2, 3, 4, 5])
    assert result.verdict == "fail", summary(result)
    regression = [t for t in result.trials if t.regression]
    assert [t.regression for t in regression] == [CASE_ID]
    assert not regression[0].ok and regression[0].special == ["zeros"] and regression[0].seed == 5
    assert all(t.ok for t in result.trials if not t.regression), "every fixed case passes"
    assert any(r.startswith(f"regression case {CASE_ID} (found by red-1): ") for r in result.reasons)
    skipped = "\n".join(result.regressions_skipped)
    assert "cx0000000000aa.json: outside the task's domain: n=0 is outside" in skipped
    assert "cx0000000000bb.json: does not parse as a regression case" in skipped
    assert "cx0000000000cc: larger than this pool's largest case" in skipped


def test_the_honest_kernel_passes_the_regression_case(server: ForkServer, add_with_regressions: Path) -> None:
    result = verify(add_with_regressions, solution("add"), "cpu", server=server, seeds=[1, 2, 3, 4, 5])
    assert result.verdict == "pass", summary(result)
    assert [t.regression for t in result.trials if t.regression] == [CASE_ID]


def test_a_task_without_regressions_dir_loads_none() -> None:
    task = load_task(CATALOGUE / "add")
    assert task.regressions == () and task.regressions_skipped == ()


@pytest.mark.parametrize("name", SPECIAL_VALUES)
def test_each_special_value_is_planted_deterministically_in_float_inputs(name: str) -> None:
    x = torch.randn(6, 40, generator=torch.Generator().manual_seed(0)).to(torch.float16)
    index = torch.arange(6)
    first = plant([x, index], [name], seed=9)
    again = plant([x, index], [name], seed=9)
    assert torch.equal(first[0].nan_to_num(7.0), again[0].nan_to_num(7.0)), "the seed decides where"
    assert first[1] is index, "integer inputs are left alone"
    planted = first[0].float()
    if name == "zeros":
        assert bool((planted == 0).all(dim=1).any())
    elif name == "nan":
        assert 1 <= int(planted.isnan().sum()) <= 8
    elif name == "inf":
        assert bool((planted == math.inf).any()) and bool((planted == -math.inf).any())
    elif name == "denormals":
        tiny = torch.finfo(torch.float16).tiny
        assert bool(((planted != 0) & (planted.abs() < tiny)).any())
    elif name == "ties":
        top = planted.max(dim=1, keepdim=True).values
        assert bool(((planted == top).sum(dim=1) >= 2).all())
    else:
        assert float(planted.abs().max()) > torch.finfo(torch.float16).max / 64
        assert bool(planted.isfinite().all())
