"""A task's regression cases: ``<task_dir>/regressions/*.json`` (issue 27), each a ``RegressionCase``
(kswarm_contracts/counterexample.py), a counterexample the harness once confirmed. Every normal
verification runs them as extra fixed trials with their own input (case, dtype, seed, layouts, special
values); a file that does not parse or lies outside the task's domain is skipped with a reason.

The size bound shared with counterexamples: the cpu (interpreter) pool runs nothing larger, in elements
over the task's ``DIMS``, than its largest ``CPU_SHAPES`` case (fresh_shapes.py draws under the same
budget); a device pool up to ``DEVICE_SIZE_FACTOR`` times its largest ``SHAPES`` case.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from kswarm_contracts.counterexample import REGRESSIONS_DIR, CounterexampleInput, RegressionCase
from orchestrator.verify.domain import InputDomain

DEVICE_SIZE_FACTOR = 4
MAX_REGRESSION_FILE_BYTES = 64_000


@dataclass(frozen=True)
class Regressions:
    cases: tuple[RegressionCase, ...] = ()
    skipped: tuple[str, ...] = ()  # "<file>: why" for each file not run


def elements(case: Mapping[str, int], dims: Sequence[str]) -> int:
    return math.prod(case[d] for d in dims)


def size_budget(
    cpu_shapes: Sequence[Mapping[str, int]],
    shapes: Sequence[Mapping[str, int]],
    dims: Sequence[str],
    *,
    interpret: bool,
) -> int:
    """The largest input, in elements over ``dims``, a pool runs (see the module's docstring)."""
    if interpret:
        return max(elements(c, dims) for c in cpu_shapes)
    return DEVICE_SIZE_FACTOR * max(elements(c, dims) for c in shapes)


def too_large(case: Mapping[str, int], dims: Sequence[str], budget: int, *, interpret: bool) -> str | None:
    size = elements(case, dims)
    if size <= budget:
        return None
    if interpret:
        return (
            f"larger than this pool's largest case ({size} elements over {budget}); "
            "submit it to a device pool"
        )
    return f"larger than this pool's size bound ({size} elements over {budget})"


def input_problems(domain: InputDomain | None, given: CounterexampleInput) -> list[str]:
    """Why an input is outside the task's domain (the validator's reasons); empty when inside."""
    if domain is None:
        return ["the task declares no input domain (DOMAIN): no input can be judged inside it"]
    return domain.check(given.case, given.dtype, given.layouts, given.special)


def load_regressions(root: Path, task_name: str, domain: InputDomain | None) -> Regressions:
    folder = root / REGRESSIONS_DIR
    if not folder.is_dir():
        return Regressions()
    cases: list[RegressionCase] = []
    skipped: list[str] = []
    for path in sorted(folder.glob("*.json")):
        try:
            raw = path.read_bytes()
            if len(raw) > MAX_REGRESSION_FILE_BYTES:
                raise ValueError(f"over {MAX_REGRESSION_FILE_BYTES} bytes")
            case = RegressionCase.model_validate_json(raw)
        except (OSError, ValueError, ValidationError) as exc:
            first = str(exc).strip().splitlines()[:3]
            skipped.append(f"{path.name}: does not parse as a regression case: {' '.join(first)[:300]}")
            continue
        if case.task != task_name:
            skipped.append(f"{path.name}: a regression case of task {case.task!r}, not {task_name!r}")
            continue
        problems = input_problems(domain, case.input)
        if problems:
            skipped.append(f"{path.name}: outside the task's domain: {'; '.join(problems)[:300]}")
            continue
        cases.append(case)
    return Regressions(tuple(cases), tuple(skipped))
