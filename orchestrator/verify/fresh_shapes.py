"""Shapes no agent has seen: every run drawn from the seed base draws fresh cases from the task's input
domain (``domain.py``), besides the task's fixed cases, so a kernel that handles only the shapes it
was shown fails at the gate (issue 27, point 2).

The draw depends only on the task and the run's seed base: it is never revealed before the job runs
(the base is drawn from the OS when the job starts), and ``--seed-base`` replays it exactly, so a
failure on a fresh shape reproduces (``python -m orchestrator.verify --task T --candidate K
--seed-base B``; ``kswarm job show`` prints that command).

The size is bounded by the pool: a fresh case is no larger (in elements over ``DIMS``) than the
largest fixed case the pool runs (``CPU_SHAPES`` on the interpreter, ``SHAPES`` on a device), and no
dimension exceeds that pool's largest, so a job's time stays what its fixed cases cost plus a few
trials. Half the dimensions drawn avoid multiples of 16, where masking bugs show.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from types import MappingProxyType

from orchestrator.verify.domain import InputDomain
from orchestrator.verify.tasks import BLOCK_QUANTUM, ShapeCase, Task, Trial

FRESH_CASES = 2  # fresh cases per run; each runs once per dtype, with one of the run's seeds
ATTEMPTS = 400


def _log_uniform(rng: random.Random, lo: int, hi: int) -> int:
    if hi <= lo:
        return lo
    low = math.log(max(lo, 1))
    return max(lo, min(hi, round(math.exp(rng.uniform(low, math.log(hi))))))


def _dimension(rng: random.Random, lo: int, hi: int, multiple_of: int) -> int:
    # Half the time anywhere in the range (tiny edge cases included), half near the pool's largest.
    value = _log_uniform(rng, lo, hi) if rng.random() < 0.5 else _log_uniform(rng, max(lo, hi // 4), hi)
    value = min(hi, -(-value // multiple_of) * multiple_of)  # up to a multiple, within the range
    if rng.random() < 0.5 and value % BLOCK_QUANTUM == 0:  # off the block grid where the range allows
        for candidate in (value + multiple_of, value - multiple_of):
            if lo <= candidate <= hi and candidate % BLOCK_QUANTUM:
                return candidate
    return value


def _elements(case: ShapeCase, dims: Sequence[str]) -> int:
    return math.prod(case[d] for d in dims)


def draw_cases(task: Task, seed_base: int, device: bool, count: int = FRESH_CASES) -> list[ShapeCase]:
    """``count`` cases inside the task's domain, none of its named points, within the pool's size."""
    domain: InputDomain | None = task.domain
    shown = task.shapes if device else task.cpu_shapes
    if domain is None or not shown:
        return []
    rng = random.Random(f"fresh-shapes:{task.name}:{seed_base}")
    budget = max(_elements(case, task.dims) for case in shown)
    named = [dict(case) for case in domain.points.values()]
    cases: list[ShapeCase] = []
    for _ in range(ATTEMPTS):
        if len(cases) == count:
            break
        case: ShapeCase = {}
        for key, extent in domain.extents.items():
            seen = [c[key] for c in shown if key in c]
            if key not in task.dims and not seen:
                continue  # a parameter the pool's cases leave to its default
            cap = max(seen) if seen else extent.hi
            hi = max(extent.lo, min(extent.hi, cap))
            if key in task.dims:
                case[key] = _dimension(rng, extent.lo, hi, extent.multiple_of)
            else:
                case[key] = rng.randrange(extent.lo, hi + 1)
        if case in named or case in cases or domain.check(case) or _elements(case, task.dims) > budget:
            continue
        cases.append(case)
    return cases


def fresh_trials(
    task: Task, dtypes: Sequence[str], seeds: Sequence[int], seed_base: int | None, start: int, device: bool
) -> list[Trial]:
    """The run's fresh trials: each fresh case once per dtype, with one of the run's seeds (and that
    seed's layouts). None without a seed base (explicit seeds replay fixed trials only) or a domain."""
    if seed_base is None or not seeds:
        return []
    rng = random.Random(f"fresh-seeds:{task.name}:{seed_base}")
    trials: list[Trial] = []
    for case in draw_cases(task, seed_base, device):
        for dtype in dtypes:
            j = rng.randrange(len(seeds))
            layout = MappingProxyType(task.layout_for(j))
            trials.append(Trial(start + len(trials), case, dtype, int(seeds[j]), j, layout, fresh=True))
    return trials
