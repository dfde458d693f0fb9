"""Issue 22, principle 1: a watched call cannot be told from an unwatched one by what plain Python
measures.

The probe (probes/call_probe.py) reports, in every call the harness makes, what a candidate can read
without asking the monitor anything: the functions that called it and how deep the stack is, its
recursion headroom, and what its inputs and a fresh allocation look like. Before this change a blind
call had one frame fewer than every monitored call (the candidate could measure its headroom and
compute with torch only there), and only blind calls had plain inputs and allocations."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from verifykit import TaskFactory, probe_calls, summary, verify

from orchestrator.verify import Flag

pytestmark = pytest.mark.slow
PROBE = Path(__file__).resolve().parent / "probes" / "call_probe.py"


def _observations(make_task: TaskFactory, tmp_path: Path) -> list[dict]:
    return probe_calls(make_task("add", dtypes=["float32"], layouts={}), PROBE, tmp_path, "calls")


def _collapsed(names: list[str]) -> list[str]:
    """The callers with the random padding (repeats of one frame) collapsed to one."""
    return [n for i, n in enumerate(names) if i == 0 or names[i - 1] != n]


def test_every_call_takes_the_same_path_at_a_random_depth(make_task: TaskFactory, tmp_path: Path) -> None:
    seen = _observations(make_task, tmp_path)
    blind = [o for o in seen if not o["monitored"]]
    watched = [o for o in seen if o["monitored"]]
    assert blind and watched
    # The same functions lead to the candidate in every kind of call (the padding aside) ...
    paths = {tuple(_collapsed(o["callers"])) for o in seen}
    assert len(paths) == 1, paths
    # ... and the recursion limit is the same, so depth + headroom is one constant ...
    assert len({o["depth"] + o["headroom"] for o in seen}) == 1
    # ... while the depth itself is drawn per call: it carries no information about the call's kind.
    assert len({o["depth"] for o in seen}) > len(seen) // 4
    lo, hi = min(o["depth"] for o in watched), max(o["depth"] for o in watched)
    assert all(lo - 8 <= o["depth"] <= hi + 8 for o in blind)


def test_what_a_blind_call_looks_like_is_also_seen_in_watched_calls(
    make_task: TaskFactory, tmp_path: Path
) -> None:
    """Plain inputs and plain fresh memory (no guard bands, no sentinels) are not a sign of a blind
    call: some monitored calls have exactly that, drawn at random."""
    seen = _observations(make_task, tmp_path)

    def looks(o: dict) -> tuple:
        fresh_offset, fresh_nbytes, fresh_needed = o["fresh"]
        input_offset, input_nbytes, input_needed = o["input"]
        return (fresh_offset, fresh_nbytes == fresh_needed, input_offset, input_nbytes == input_needed)

    watched = Counter(looks(o) for o in seen if o["monitored"])
    for o in seen:
        if not o["monitored"]:
            assert looks(o) in watched, (looks(o), watched)
    unguarded = [o for o in seen if o["monitored"] and not o["guarded"]]
    assert unguarded, "every job makes at least one unguarded monitored call"


def test_a_candidate_that_measures_its_headroom_is_caught(make_task: TaskFactory, cheats: Path) -> None:
    """cheats/depth_aware.py computes with torch where it has more recursion headroom than it ever
    had in a watched call (the old harness: only in the blind call, and it passed). The static gate
    rejects the recursion outright; with the gate advisory, the runtime catches it."""
    task = make_task("add", dtypes=["float32"], layouts={})
    assert verify(task, cheats / "depth_aware.py").verdict == "fail"
    result = verify(task, cheats / "depth_aware.py", enforce_static=False)
    assert result.verdict == "fail", summary(result)
    assert Flag.TORCH_COMPUTE in result.flags, summary(result)
