"""Principle 3: the candidate cannot tell that it is being tested.

Blind calls (every instrument removed, plain inputs and allocations) are judged like the others, so
a candidate that behaves only when it sees a monitor fails; and what the child process exposes has no
stable, harness-specific fingerprint between two jobs (the property test below). What remains
observable is listed in docs/verification.md."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from verifykit import ROOT, TaskFactory, probe_calls, summary, verify

from orchestrator.verify import Flag

pytestmark = pytest.mark.slow
PROBE = Path(__file__).resolve().parent / "probes" / "env_probe.py"
# Names of the harness and of what it used to leave behind (files, variables, its cache directory).
WORDS = re.compile(
    r"orchestrator|kswarm|verify|harness|plan\.json|status\.jsonl|triton-cache|PYTHONHASHSEED", re.I
)


def test_a_trojan_that_behaves_only_under_test_fails(make_task: TaskFactory, cheats: Path) -> None:
    result = verify(
        make_task("add", dtypes=["float32"], layouts={}), cheats / "harness_aware.py", enforce_static=False
    )
    assert result.verdict == "fail", summary(result)
    assert Flag.MONITOR_DEPENDENT in result.flags, summary(result)
    blind = [c for t in result.trials for c in t.calls if not c.monitored]
    assert blind and all(Flag.MISMATCH in c.flags for c in blind)


def test_a_torch_fallback_when_unwatched_fails(make_task: TaskFactory, cheats: Path) -> None:
    """Right values everywhere, but no kernel when it sees no monitor: the interpreter still counts
    the blind call's launches."""
    task = make_task("add", dtypes=["float32"], layouts={})
    result = verify(task, cheats / "fallback_when_unwatched.py", enforce_static=False)
    assert result.verdict == "fail", summary(result)
    assert {Flag.NO_TRITON_LAUNCH, Flag.MONITOR_DEPENDENT} <= set(result.flags), summary(result)


def _probe(make_task: TaskFactory, tmp_path: Path, run: int) -> list[dict]:
    """One job's observations: its own zygote (server=None), as every job has."""
    task = make_task("add", dtypes=["float32"], layouts={})
    return probe_calls(task, PROBE, tmp_path, str(run), server=None)


def test_no_stable_fingerprint_between_two_jobs(make_task: TaskFactory, tmp_path: Path) -> None:
    first, second = _probe(make_task, tmp_path, 1), _probe(make_task, tmp_path, 2)
    for obs in first + second:
        visible = [obs["argv"], obs["orig_argv"], obs["cmdline"], obs["cwd"], obs["home"], obs["env"],
                   obs["modules"], obs["main_globals"], obs["fds"], obs["name"]]  # fmt: skip
        assert not WORDS.search(json.dumps(visible)), visible  # nothing named after the harness
        assert not any(str(ROOT) in p for p in obs["path"] if "site-packages" not in p)
        assert obs["modules"] == [] and obs["cwd_list"] == [] and not obs["home_list"]
        assert obs["argv"] == [""] and obs["cmdline"][1:] == ["-I", "-"]
        assert set(obs["env"]) <= {
            "PATH",
            "LANG",
            "HOME",
            "OMP_NUM_THREADS",
            "TRITON_INTERPRET",
            "LD_LIBRARY_PATH",
        }
        neutral = ("pipe:", "/dev/null", "socket:", "anon_inode:")
        assert all(t.startswith(neutral) or t == obs["home"] for t in obs["fds"].values()), obs["fds"]
        if not obs["monitored"]:  # a blind call looks like production
            assert obs["dispatch_modes"] == 0
            assert obs["fresh"]["offset"] == 0 and obs["fresh"]["nbytes"] == obs["fresh"]["needed"]
    # What must exist is drawn per job: paths, the hash seed, guard sizes and sentinels differ.
    a = next(o for o in first if o["guarded"])
    b = next(o for o in second if o["guarded"])
    assert a["cwd"] != b["cwd"] and a["home"] != b["home"] and a["hash"] != b["hash"]
    assert (a["fresh"]["offset"], a["fresh"]["bits"]) != (b["fresh"]["offset"], b["fresh"]["bits"])
