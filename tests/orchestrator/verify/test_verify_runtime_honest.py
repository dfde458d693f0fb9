"""Honest kernels pass on the CPU interpreter; bf16 parts are reported unverifiable, not passed."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from verifykit import CATALOGUE, solution, summary, verify

from orchestrator.verify import VerificationResult


@pytest.mark.slow
@pytest.mark.parametrize("name", ["add", "softmax", "matmul"])
def test_honest_kernel_passes(name: str) -> None:
    (candidate,) = [solution(name)]
    result = verify(CATALOGUE / name, candidate, "cpu")
    assert result.verdict == "pass", summary(result)
    assert result.flags == [] and result.static_violations == []
    # device shapes: test_verify_device_shapes; fresh shapes: test_verify_fresh_shapes
    cpu_shapes = [t for t in result.trials if not t.sampled and not t.fresh]
    assert len(cpu_shapes) == 30 and all(t.ok for t in result.trials)
    assert sum(t.fresh for t in result.trials) == 4, "2 fresh cases from the domain x 2 dtypes"
    assert len({t.seed for t in result.trials}) >= 5 and result.seed_base is not None
    assert {t.dtype for t in result.trials} == {"float32", "float16"}
    calls = [c for t in result.trials for c in t.calls]
    # per fixed case and dtype: one trial of three calls (same inputs twice, then refilled) and one
    # blind call; each fresh case and dtype (one trial) is refilled too
    assert {c.kind for c in calls} == {"first", "repeat", "refill", "blind"}
    assert sum(c.kind == "blind" for c in calls) == 6 and sum(c.kind == "refill" for c in calls) == 6 + 4
    assert {c.order for c in calls if c.monitored} >= {"natural", "reversed", "shuffled"}
    assert all(c.launches and c.launches >= 1 for c in calls if c.monitored)
    assert len({tuple(sorted(t.layout.items())) for t in result.trials}) > 1  # the declared layouts ran
    assert result.child is not None and result.child.returncode == 0 and result.child.completed
    env = result.environment
    assert env is not None and env.triton_interpret == "1" and env.torch.startswith("2.")
    assert result.timings is None  # no timing on the cpu pool
    again = VerificationResult.model_validate_json(result.model_dump_json())
    assert again == result


@pytest.mark.slow
def test_bf16_only_task_is_unverifiable_on_cpu(make_add_task: Callable[[list[str]], Path]) -> None:
    result = verify(make_add_task(["bfloat16"]), solution("add"), "cpu")
    assert result.verdict == "unverifiable"
    assert result.child is None and result.trials == []
    assert any("bfloat16" in r for r in result.unverifiable_reasons)


@pytest.mark.slow
def test_mixed_task_runs_fp32_and_reports_bf16_unverifiable(
    make_add_task: Callable[[list[str]], Path],
) -> None:
    result = verify(make_add_task(["float32", "bfloat16"]), solution("add"), "cpu")
    assert result.verdict == "unverifiable", summary(result)  # never "pass" while part of it went unchecked
    assert result.trials and all(t.ok and t.dtype == "float32" for t in result.trials)
    assert any("bfloat16" in r for r in result.unverifiable_reasons)


def test_unknown_pool() -> None:
    with pytest.raises(ValueError, match="unknown pool"):
        verify(CATALOGUE / "add", solution("add"), "tpu")


def test_seeds_and_seed_base_are_exclusive() -> None:
    with pytest.raises(ValueError, match="not both"):
        verify(CATALOGUE / "add", solution("add"), seeds=[1], seed_base=2)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is present")
def test_device_pool_without_device_is_refused() -> None:
    with pytest.raises(RuntimeError, match="needs a cuda device"):
        verify(CATALOGUE / "add", solution("add"), "cuda")
