"""Principle 1: every operation of the candidate's code is observed, inside a launch too (grid
callables, heuristics, autotune hooks), and host work invisible to an op trace is caught at runtime.

Each cheat here passed the harness before (verdict "pass", no flag: see docs/verification.md); the
static gate runs advisory so that the runtime defence is what is tested."""

from __future__ import annotations

from pathlib import Path

import pytest
from verifykit import TaskFactory, solution, summary, verify

from orchestrator.verify import Flag

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    ("name", "flag", "evidence"),
    [
        ("grid_lambda_compute", Flag.TORCH_COMPUTE, "aten.add"),  # torch in the grid callable
        ("heuristics_compute", Flag.TORCH_COMPUTE, "aten.add"),  # torch in a @triton.heuristics value
        ("numpy_host", Flag.HOST_COMPUTE, "Tensor.__array__"),  # numpy on the host
        ("tolist_loop", Flag.HOST_COMPUTE, "Tensor.tolist"),  # a Python loop over .tolist()
        ("ctypes_memory", Flag.HOST_COMPUTE, "ctypes"),  # raw memory through data_ptr + ctypes
        ("thread_compute", Flag.MONITOR_TAMPERED, "start_new_thread"),  # torch in another thread
        ("exec_grid", Flag.MONITOR_TAMPERED, "not the candidate's Python code"),  # a frame-less grid
    ],
)
def test_host_work_anywhere_is_seen(
    make_task: TaskFactory, cheats: Path, name: str, flag: Flag, evidence: str
) -> None:
    result = verify(
        make_task("add", dtypes=["float32"], layouts={}), cheats / f"{name}.py", enforce_static=False
    )
    assert result.verdict == "fail", summary(result)
    assert flag in result.flags, summary(result)
    details = " ".join(c.detail or "" for t in result.trials for c in t.calls)
    assert evidence in details, details[:2000]
    monitored = [c for t in result.trials for c in t.calls if c.monitored]
    assert all(flag in c.flags for c in monitored)  # every watched call, not a lucky one


def test_autotune_hooks_are_observed(make_task: TaskFactory, cheats: Path) -> None:
    """An early_config_prune that computes with torch (it runs inside Autotuner.run, on the cpu pool
    too: interp_autotune.py runs every config under the interpreter)."""
    result = verify(
        make_task("add", dtypes=["float32"], layouts={}),
        cheats / "autotune_prune_compute.py",
        enforce_static=False,
    )
    assert result.verdict == "fail" and Flag.TORCH_COMPUTE in result.flags, summary(result)


def test_torch_compute_at_import_is_seen(make_task: TaskFactory, tmp_path: Path) -> None:
    source = (solution("add")).read_text()
    candidate = tmp_path / "precompute.py"
    candidate.write_text(source + "\n_TABLE = torch.arange(8) * 2\n")
    result = verify(make_task("add", dtypes=["float32"]), candidate, enforce_static=False)
    assert result.verdict == "fail" and Flag.TORCH_COMPUTE in result.flags, summary(result)
    assert any(r.startswith("at import: torch_compute") for r in result.reasons)
