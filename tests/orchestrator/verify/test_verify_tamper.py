"""Principle 2: the monitor cannot be switched off or side-stepped. Tripwires record every switch the
candidate flips, an integrity check after each call compares the process with its baseline, and the
runner uses private references (a patched torch.save changes nothing). Each cheat passed before."""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

import pytest
from verifykit import TaskFactory, summary, verify

from orchestrator.verify import Flag
from orchestrator.verify.integrity import Integrity


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "flag"),
    [
        ("disable_dispatch", Flag.MONITOR_TAMPERED),  # torch._C._DisableTorchDispatch around torch.add
        ("pop_dispatch_mode", Flag.MONITOR_TAMPERED),  # pops the mode, computes, pushes it back
        ("patch_save", Flag.MONITOR_TAMPERED),  # rewrites what torch.save writes
        ("profile_after_return", Flag.MONITOR_TAMPERED),  # sys.setprofile to compute after return
        ("atexit_rewrite", Flag.MONITOR_TAMPERED),  # rewrites output files at exit
        ("class_swap", Flag.MONITOR_TAMPERED),  # __class__ assignment on an input
        ("hide_from_policy", Flag.TORCH_COMPUTE),  # looks for the allow-list in sys.modules: gone
        ("lazy_result", Flag.NOT_A_TENSOR),  # a list whose __iter__ adds after the call returned
    ],
)
def test_tampering_is_caught(make_task: TaskFactory, cheats: Path, name: str, flag: Flag) -> None:
    result = verify(
        make_task("add", dtypes=["float32"], layouts={}), cheats / f"{name}.py", enforce_static=False
    )
    assert result.verdict == "fail", summary(result)
    assert flag in result.flags, summary(result)


@pytest.mark.slow
def test_a_forged_report_stream_cannot_hide_what_was_seen(make_task: TaskFactory, cheats: Path) -> None:
    """The candidate writes a clean-looking report for every trial into the report pipe and exits 0
    before the runner reports; the findings were streamed to the parent as they happened."""
    result = verify(
        make_task("add", dtypes=["float32"], layouts={}), cheats / "forge_and_exit.py", enforce_static=False
    )
    assert result.verdict in ("fail", "error"), summary(result)
    assert Flag.TIMEOUT not in result.flags
    # What the monitor saw before the forgery stays seen. (When the job's schedule made the first
    # call a blind one, nothing watched it: then the forgery is still refused, as a broken stream.)
    first = result.trials[0].calls[0].kind if result.trials and result.trials[0].calls else "?"
    assert Flag.TORCH_COMPUTE in result.flags or first == "blind", summary(result)
    assert any("report stream" in r or "without reporting" in r for r in result.reasons), summary(result)


@pytest.mark.slow
def test_patched_save_changes_nothing(make_task: TaskFactory, cheats: Path) -> None:
    result = verify(
        make_task("add", dtypes=["float32"], layouts={}), cheats / "patch_save.py", enforce_static=False
    )
    assert Flag.UNWRITTEN_OUTPUT in result.flags  # what it returned was saved, not what it forged
    assert any("torch.save was rebound" in r for r in result.reasons)


def _integrity() -> tuple[Integrity, dict]:
    namespace = {"allow": frozenset({"view"})}
    probe_state = {"alive": True}
    check = Integrity({"harness": namespace}, [json.JSONEncoder], lambda: probe_state["alive"])
    check.snapshot()
    return check, {"ns": namespace, "probe": probe_state}


def test_integrity_sees_rebinding_hooks_and_a_dead_probe() -> None:
    check, state = _integrity()
    assert check.check(None) == []
    original = json.dumps
    json.dumps = lambda *a, **k: "{}"  # a patched library function
    try:
        assert any("json.dumps was rebound" in p for p in check.check(None))
    finally:
        json.dumps = original
    state["ns"]["allow"] = frozenset({"view", "add"})  # the harness's own namespace
    assert any("harness.allow was rebound" in p for p in check.check(None))
    state["ns"]["allow"] = frozenset({"view"})
    check.snapshot()
    json.JSONEncoder.extra = 1  # type: ignore[attr-defined]  # a class the harness relies on
    try:
        assert any("JSONEncoder.extra was added" in p for p in check.check(None))
    finally:
        del json.JSONEncoder.extra  # type: ignore[attr-defined]
    previous = signal.signal(signal.SIGUSR2, lambda *_: None)
    try:
        assert any("signal handler" in p for p in check.check(None))
    finally:
        signal.signal(signal.SIGUSR2, previous)
    before = sys.getprofile()
    sys.setprofile(lambda *a: None)
    try:
        assert any("profile" in p for p in check.check(None))
    finally:
        sys.setprofile(before)
    state["probe"]["alive"] = False
    assert any("audit hook" in p for p in check.check(None))
    state["probe"]["alive"] = True
    assert check.check(None) == []
