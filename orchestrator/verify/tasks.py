"""Task model and loader.

A task is a directory holding ``task.py`` (trusted, operator-authored code) that defines:

- ``ENTRY``: name of the function a candidate module must expose;
- ``reference(*inputs)``: the PyTorch reference (returns a tensor or a tuple of tensors);
- ``make_inputs(case, dtype, seed, device)``: deterministic inputs for one trial (a tuple);
- ``SHAPES`` / ``CPU_SHAPES``: lists of shape cases (``dict[str, int]``), each with at least two
  cases that are not block multiples and one case of another scale;
- ``DTYPES``: dtype names (``"float32"``, ``"float16"``, ``"bfloat16"``, ``"int32"`` …);
- optional ``TOLERANCES`` (``{"float16": 2e-2}`` or ``{"float16": {"atol": .., "rtol": ..}}``),
  ``SEEDS`` (at least five), ``NAME``, ``DESCRIPTION``.
"""

from __future__ import annotations

import importlib.util
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType, ModuleType
from typing import Any

import torch

ShapeCase = dict[str, int]

MIN_SEEDS = 5
DEFAULT_SEEDS: tuple[int, ...] = (0, 1, 2, 3, 4)
# A case "is not a block multiple" when one of its dims is not a multiple of this (the smallest
# block any sane kernel uses); masking bugs only show on such shapes.
BLOCK_QUANTUM = 16
# "Another scale": the largest case must be at least this many times bigger than the smallest.
MIN_SCALE_RATIO = 4

FLOAT_DTYPES = ("float64", "float32", "float16", "bfloat16")
INT_DTYPES = ("int8", "uint8", "int16", "int32", "int64", "bool")

# atol = rtol per dtype (KernelBench anchors; bf16 looser since it has 8 mantissa bits).
DEFAULT_TOLERANCE: Mapping[str, float] = MappingProxyType(
    {
        "float64": 1e-7,
        "float32": 1e-4,
        "float16": 1e-2,
        "bfloat16": 2e-2,
    }
)


class TaskError(ValueError):
    """The task directory does not describe a valid task."""


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float

    @property
    def exact(self) -> bool:
        return self.atol == 0.0 and self.rtol == 0.0


@dataclass(frozen=True)
class Trial:
    """One seeded run of the candidate on one shape case and dtype."""

    index: int
    case: ShapeCase
    dtype: str
    seed: int


@dataclass(frozen=True)
class Task:
    name: str
    root: Path
    entry: str
    reference: Callable[..., Any]
    make_inputs: Callable[..., Sequence[Any]]
    shapes: tuple[ShapeCase, ...]
    cpu_shapes: tuple[ShapeCase, ...]
    dtypes: tuple[str, ...]
    seeds: tuple[int, ...]
    tolerances: Mapping[str, Tolerance]
    description: str = ""

    def tolerance(self, dtype: str) -> Tolerance:
        return self.tolerances.get(dtype) or default_tolerance(dtype)

    def trials(self, *, cpu: bool, dtypes: Sequence[str] | None = None) -> list[Trial]:
        cases = self.cpu_shapes if cpu else self.shapes
        chosen = self.dtypes if dtypes is None else tuple(dtypes)
        out: list[Trial] = []
        for case in cases:
            for dtype in chosen:
                for seed in self.seeds:
                    out.append(Trial(index=len(out), case=dict(case), dtype=dtype, seed=seed))
        return out


def torch_dtype(name: str) -> torch.dtype:
    value = getattr(torch, name, None)
    if not isinstance(value, torch.dtype):
        raise TaskError(f"unknown dtype {name!r}")
    return value


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def default_tolerance(dtype: str) -> Tolerance:
    """fp32 1e-4, fp16 1e-2, bf16 2e-2 (atol = rtol); integers and bool exact."""
    tol = DEFAULT_TOLERANCE.get(dtype)
    if tol is None:
        if dtype in INT_DTYPES:
            return Tolerance(0.0, 0.0)
        raise TaskError(f"no default tolerance for dtype {dtype!r}")
    return Tolerance(tol, tol)


def _parse_tolerances(raw: object) -> dict[str, Tolerance]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise TaskError("TOLERANCES must be a mapping of dtype name to float or {atol, rtol}")
    out: dict[str, Tolerance] = {}
    for dtype, value in raw.items():
        torch_dtype(str(dtype))
        if isinstance(value, int | float):
            out[str(dtype)] = Tolerance(float(value), float(value))
        elif isinstance(value, Mapping) and set(value) <= {"atol", "rtol"}:
            out[str(dtype)] = Tolerance(float(value.get("atol", 0.0)), float(value.get("rtol", 0.0)))
        else:
            raise TaskError(f"bad tolerance for {dtype!r}: {value!r}")
    return out


def _numel(case: ShapeCase) -> int:
    return math.prod(case.values())


def validate_cases(cases: Sequence[ShapeCase], label: str) -> tuple[ShapeCase, ...]:
    """At least two non-block-multiple cases and one case of another scale."""
    if not cases:
        raise TaskError(f"{label} is empty")
    for case in cases:
        if not isinstance(case, Mapping) or not case:
            raise TaskError(f"{label}: each case must be a non-empty dict of dim name to int")
        for key, value in case.items():
            if not isinstance(key, str) or not isinstance(value, int) or value < 0:
                raise TaskError(f"{label}: bad dim {key!r}={value!r}")
    odd = [c for c in cases if any(v % BLOCK_QUANTUM for v in c.values())]
    if len(odd) < 2:
        raise TaskError(f"{label} needs at least two cases with a dim not a multiple of {BLOCK_QUANTUM}")
    sizes = [max(_numel(c), 1) for c in cases]
    if len(cases) < 3 or max(sizes) < MIN_SCALE_RATIO * min(sizes):
        raise TaskError(
            f"{label} needs at least three cases spanning {MIN_SCALE_RATIO}x in size (another scale)"
        )
    return tuple(dict(c) for c in cases)


def _load_module(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"kswarm_task_{name}", path)
    if spec is None or spec.loader is None:
        raise TaskError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # the task file is broken: report it as a task error
        raise TaskError(f"{path}: {type(exc).__name__}: {exc}") from exc
    return module


def load_task(task_dir: str | Path) -> Task:
    root = Path(task_dir).resolve()
    path = root / "task.py"
    if not path.is_file():
        raise TaskError(f"{root} has no task.py")
    safe = re.sub(r"\W", "_", root.name)
    module = _load_module(path, safe)

    entry = getattr(module, "ENTRY", None)
    if not isinstance(entry, str) or not entry.isidentifier():
        raise TaskError("ENTRY must name the candidate's entry function")
    reference = getattr(module, "reference", None)
    make_inputs = getattr(module, "make_inputs", None)
    if not callable(reference) or not callable(make_inputs):
        raise TaskError("task.py must define reference(*inputs) and make_inputs(case, dtype, seed, device)")

    shapes = validate_cases(list(getattr(module, "SHAPES", [])), "SHAPES")
    cpu_shapes = validate_cases(list(getattr(module, "CPU_SHAPES", [])), "CPU_SHAPES")

    dtypes = tuple(str(d) for d in getattr(module, "DTYPES", ()))
    if not dtypes:
        raise TaskError("DTYPES is empty")
    for d in dtypes:
        torch_dtype(d)

    seeds = tuple(int(s) for s in getattr(module, "SEEDS", DEFAULT_SEEDS))
    if len(set(seeds)) < MIN_SEEDS:
        raise TaskError(f"SEEDS needs at least {MIN_SEEDS} distinct seeds")

    return Task(
        name=str(getattr(module, "NAME", root.name)),
        root=root,
        entry=entry,
        reference=reference,
        make_inputs=make_inputs,
        shapes=shapes,
        cpu_shapes=cpu_shapes,
        dtypes=dtypes,
        seeds=seeds,
        tolerances=MappingProxyType(_parse_tolerances(getattr(module, "TOLERANCES", None))),
        description=str(getattr(module, "DESCRIPTION", "")),
    )
