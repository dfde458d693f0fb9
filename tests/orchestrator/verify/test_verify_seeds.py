"""Issue 12.7: fresh seeds per job, recorded and replayable; poisoned allocations; the size rules count
declared dimensions only (test_verify_tasks.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from verifykit import ROOT, TaskFactory, solution, summary, verify

from orchestrator.verify import Flag

pytestmark = pytest.mark.slow


def test_memorised_answers_fail_on_fresh_seeds(make_task: TaskFactory, cheats: Path) -> None:
    """The cheat carries the answers of seeds 0..4 (what every run used to replay). Fresh seeds defeat
    it; replaying those seeds shows it was a memory, not a kernel."""
    task = make_task("sum_rows", dtypes=["float32"], layouts={})
    fresh = verify(task, cheats / "memorised_seeds.py", enforce_static=False)
    assert fresh.verdict == "fail" and Flag.MISMATCH in fresh.flags, summary(fresh)
    assert not set(fresh.seeds) & set(range(5)) and all(not t.ok for t in fresh.trials if not t.sampled)
    replay = verify(task, cheats / "memorised_seeds.py", enforce_static=False, seeds=[0, 1, 2, 3, 4])
    first_calls = [t.calls[0] for t in replay.trials if t.calls[0].kind in ("first", "blind")]
    assert first_calls and all(c.ok for c in first_calls), summary(replay)
    refills = [c for t in replay.trials for c in t.calls if c.kind == "refill"]
    assert refills and not any(c.ok for c in refills)  # even then, new values in the same buffers fail it


def _outcomes(result: dict) -> dict[tuple[str, int], bool]:
    return {(json.dumps(t["shape"]), t["seed"]): t["calls"][0]["ok"] for t in result["trials"]}


def test_recorded_seeds_reproduce_the_outcome(make_task: TaskFactory, cheats: Path, tmp_path: Path) -> None:
    task = make_task("add", dtypes=["float32"], layouts={})
    candidate = cheats / "seed_sensitive.py"
    first = verify(task, candidate)
    assert first.seed_base is not None and len(first.seeds) == 5
    out = tmp_path / "replay.json"
    cmd = [
        sys.executable, "-m", "orchestrator.verify", "--task", str(task), "--candidate", str(candidate),
        "--pool", "cpu", "--out", str(out), "--seeds", ",".join(map(str, first.seeds)),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, check=False)
    replay = json.loads(out.read_text())
    assert replay["seeds"] == first.seeds and replay["seed_base"] is None
    # Explicit seeds replay the fixed trials; the fresh shapes are the seed base's (below).
    fixed = json.loads(first.model_dump_json())
    fixed["trials"] = [t for t in fixed["trials"] if not t["fresh"]]
    fixed_verdict = "pass" if all(t["ok"] for t in fixed["trials"]) else "fail"
    assert replay["verdict"] == fixed_verdict and proc.returncode == {"pass": 0, "fail": 1}[fixed_verdict]
    assert _outcomes(replay) == _outcomes(fixed)
    again = verify(task, candidate, seed_base=first.seed_base)
    assert again.seeds == first.seeds and again.verdict == first.verdict
    assert _outcomes(json.loads(again.model_dump_json())) == _outcomes(json.loads(first.model_dump_json()))
    other = verify(task, candidate)
    assert other.seeds != first.seeds  # a new job draws new seeds


def test_allocations_in_a_launch_window_are_poisoned(make_task: TaskFactory, cheats: Path) -> None:
    task = make_task("relu", dtypes=["float32"], layouts={})
    result = verify(task, cheats / "lucky_allocator.py", enforce_static=False)
    assert result.verdict == "fail" and Flag.UNWRITTEN_OUTPUT in result.flags, summary(result)


def test_cli_rejects_bad_seeds(add_task: Path) -> None:
    cmd = [
        sys.executable, "-m", "orchestrator.verify", "--task", str(add_task),
        "--candidate", str(solution("add")), "--seeds", "1,x",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120, check=False)
    assert proc.returncode == 2 and "not an integer" in proc.stderr
