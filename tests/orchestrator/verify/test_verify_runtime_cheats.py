"""The long-standing cheats and bugs are rejected with the right flag. Runtime defences are also
exercised with the static gate in advisory mode (enforce_static=False), to show they hold on their own."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from verifykit import ROOT, TaskFactory, verify

from orchestrator.verify import Flag, VerificationResult

pytestmark = pytest.mark.slow


def run(task: Path, cheats: Path, name: str, **kwargs: object) -> VerificationResult:
    return verify(task, cheats / f"{name}.py", "cpu", **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("name", "rule"),
    [
        ("torch_fallback", "torch_compute"),
        ("try_fallback", "try_except_fallback"),
        ("verdict_patch", "monkeypatch"),
    ],
)
def test_static_rejection_spends_no_runtime(add_task: Path, cheats: Path, name: str, rule: str) -> None:
    result = run(add_task, cheats, name)
    assert result.verdict == "fail"
    assert rule in {v.rule for v in result.static_violations}
    assert result.child is None and result.trials == [] and result.durations.child_s == 0.0


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("return_input", {Flag.OUTPUT_ALIASES_INPUT}),
        ("inplace", {Flag.INPUTS_MUTATED, Flag.OUTPUT_ALIASES_INPUT}),
        ("hardcoded_block", {Flag.MISMATCH, Flag.UNWRITTEN_OUTPUT}),
        ("unwritten", {Flag.MISMATCH, Flag.UNWRITTEN_OUTPUT}),
        ("nan", {Flag.NAN_INF}),
        ("oob_store", {Flag.OUT_OF_BOUNDS_WRITE}),
        ("segfault", {Flag.OUT_OF_BOUNDS_WRITE}),  # the wild store is intercepted, never performed
        ("no_launch", {Flag.NO_TRITON_LAUNCH}),
    ],
)
def test_runtime_cheats_fail(make_task: TaskFactory, cheats: Path, name: str, expected: set[Flag]) -> None:
    task = make_task("add", dtypes=["float32"], layouts={})
    result = run(task, cheats, name, enforce_static=False)
    assert result.verdict == "fail", result.reasons
    assert expected <= set(result.flags), result.flags
    assert not any(t.ok for t in result.trials if t.shape["n"] % 256)  # every non-multiple trial fails


def test_runtime_catches_host_torch_compute(make_task: TaskFactory, cheats: Path) -> None:
    result = run(make_task("add", dtypes=["float32"]), cheats, "host_arith", enforce_static=False)
    assert {v.rule for v in result.static_violations} >= {"torch_compute"}
    assert result.verdict == "fail" and Flag.TORCH_COMPUTE in result.flags
    assert any("aten.add" in (t.detail or "") for t in result.trials)


@pytest.mark.parametrize("name", ["kill_self", "crash_at_exit"])
def test_abnormal_exit_is_an_error_even_after_outputs(
    make_task: TaskFactory, cheats: Path, name: str
) -> None:
    result = run(make_task("add", dtypes=["float32"], layouts={}), cheats, name, enforce_static=False)
    assert result.verdict == "error" and Flag.CRASH in result.flags
    assert result.child is not None and result.child.signal == 11
    if name == "crash_at_exit":  # every output was written and correct: still an error
        assert result.trials and result.child.completed
        assert not any({Flag.MISMATCH, Flag.NAN_INF} & set(t.flags) for t in result.trials)
        assert Flag.MONITOR_TAMPERED in result.flags  # and the atexit handler itself was seen


def test_exception_is_an_error(make_task: TaskFactory, cheats: Path) -> None:
    result = run(make_task("add", dtypes=["float32"]), cheats, "raises")
    assert result.verdict == "error" and Flag.CRASH in result.flags
    assert any("boom" in (t.detail or "") for t in result.trials)


def test_timeout_is_an_error(add_task: Path, cheats: Path) -> None:
    result = run(add_task, cheats, "hang", timeout_s=5)
    assert result.verdict == "error" and {Flag.CRASH, Flag.TIMEOUT} <= set(result.flags)
    assert result.child is not None and result.child.timed_out


def test_interpreter_unfaithful_features_are_unverifiable(add_task: Path, cheats: Path) -> None:
    result = run(add_task, cheats, "bf16_kernel")
    assert result.verdict == "unverifiable" and result.unverifiable_reasons
    assert result.child is None


def test_an_honest_autotuned_kernel_passes_on_cpu(make_task: TaskFactory, cheats: Path) -> None:
    """Issue 22 point 7: every config runs under the interpreter (interp_autotune.py)."""
    result = run(make_task("add", dtypes=["float32"], layouts={}), cheats, "autotuned")
    assert result.verdict == "pass", result.reasons


def test_an_autotuned_kernel_with_one_wrong_config_fails(make_task: TaskFactory, cheats: Path) -> None:
    """The wrong config runs in every benchmark, whichever config a call keeps (before: unverifiable)."""
    result = run(make_task("add", dtypes=["float32"], layouts={}), cheats, "autotune_bad_config")
    assert result.verdict == "fail", result.reasons
    assert Flag.OUT_OF_BOUNDS_WRITE in result.flags


def test_verdict_patching_has_no_effect(add_task: Path, cheats: Path, tmp_path: Path) -> None:
    """The candidate monkeypatches torch.allclose/equal, forges status lines and writes a passing
    result.json next to itself; with the static gate advisory it runs, and the parent still fails it."""
    candidate = tmp_path / "verdict_patch.py"
    shutil.copy(cheats / "verdict_patch.py", candidate)
    out = tmp_path / "result.json"  # exactly where the candidate writes its forgery
    cmd = [
        sys.executable, "-m", "orchestrator.verify", "--task", str(add_task), "--candidate", str(candidate),
        "--pool", "cpu", "--out", str(out), "--static-advisory",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, check=False)
    assert (tmp_path / "verdict_patch.forged").exists()  # the forgery really ran
    assert proc.returncode == 1, proc.stderr
    result = VerificationResult.model_validate_json(out.read_text())
    assert result.verdict == "fail" and Flag.MISMATCH in result.flags
    assert Flag.MONITOR_TAMPERED in result.flags  # torch.allclose & co. were rebound
    assert result.child is not None and result.child.returncode == 0
    data = json.loads(out.read_text())  # the CLI's file: the documented schema
    assert (
        data["schema_version"] == 2
        and len([t for t in data["trials"] if not (t["device_shape"] or t["sampled"] or t["fresh"])]) == 30
    )
    assert {"verdict", "flags", "static_violations", "environment", "durations", "child", "seeds"} <= set(
        data
    )
    assert {v["rule"] for v in data["static_violations"]} >= {"monkeypatch", "file_io"}
