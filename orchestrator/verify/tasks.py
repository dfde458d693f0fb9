"""Task model and loader.

A task is a directory holding ``task.py`` (trusted, operator-authored code) that defines:

- ``ENTRY``: name of the function a candidate module must expose;
- ``reference(*inputs)``: the PyTorch reference (returns a tensor or a tuple of tensors);
- ``make_inputs(case, dtype, seed, device)``: deterministic inputs for one trial (a tuple);
- ``SHAPES`` / ``CPU_SHAPES``: lists of shape cases (``dict[str, int]``);
- ``DIMS``: the case keys that are tensor dimensions (the size rules count only those: a flag or a
  scale key in a case must not satisfy them);
- ``DTYPES``: dtype names (``"float32"``, ``"float16"``, ``"bfloat16"``, ``"int32"`` …);
- optional ``SEED_COUNT`` (how many seeds, at least five; which ones is drawn fresh for every job),
  ``INPUT_LAYOUTS`` (``{input index: [layout, ...]}``, see layouts.py), ``OUTPUT_CONTRACT``
  (``{"contiguous": bool, "own_storage": bool, "no_view": bool}``, all True by default),
  ``TOLERANCES`` (``{"float16": 2e-2}`` or ``{"float16": {"atol": .., "rtol": ..}}``), ``NAME``,
  ``DESCRIPTION``. A legacy ``SEEDS`` list counts as ``SEED_COUNT = len(SEEDS)``; its values are
  never used (fixed seeds can be memorised);
- optional ``DEVICE_QUERIES`` (device queries the static gate permits, by name, e.g.
  ``("torch.cuda.synchronize",)``; any other is ``device_conditioned``) and ``ALLOW_INPUT_COPIES``
  (``True``: host-side copies of input data are not ``torch_compute``; default ``False``);
- ``DOMAIN``: every input the kernel must handle (ranges per case key, constraints, value distribution,
  special values the reference defines; ``domain.py``), the shapes above being named points in it.

Beside ``task.py``, ``regressions/*.json`` holds the task's regression cases (regressions.py): confirmed
counterexamples every verification runs too.
"""

from __future__ import annotations

import importlib.util
import math
import random
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType, ModuleType
from typing import Any

import torch

from kswarm_contracts.counterexample import RegressionCase
from orchestrator.verify.domain import DomainError, InputDomain, parse_domain
from orchestrator.verify.layouts import LAYOUTS, LayoutError, relayout
from orchestrator.verify.policy import PERMITTABLE_DEVICE_QUERIES
from orchestrator.verify.regressions import load_regressions
from orchestrator.verify.seeds import derive_seeds, draw_seed_base

ShapeCase = dict[str, int]

MIN_SEEDS = 5
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
class OutputContract:
    """What every output must be (beyond dtype, shape, device and values)."""

    contiguous: bool = True  # dense, C-contiguous strides
    own_storage: bool = True  # storage_offset 0 and a storage exactly the size the shape needs
    no_view: bool = True  # not a view of another tensor (``_base is None``)


@dataclass(frozen=True)
class Trial:
    """One seeded run of the candidate on one shape case and dtype."""

    index: int
    case: ShapeCase
    dtype: str
    seed: int
    seed_index: int = 0
    layout: Mapping[int, str] = field(default_factory=dict)  # input index -> layout name
    sampled: bool = False  # a device shape (SHAPES) on the cpu pool: a sample of programs (device_shapes.py)
    fresh: bool = False  # a case drawn from the task's domain for this run (fresh_shapes.py)
    special: tuple[str, ...] = ()  # special values planted into its inputs (special_values.py)
    regression: str | None = None  # the regression case it runs (regressions.py), by id


@dataclass(frozen=True)
class Task:
    name: str
    root: Path
    entry: str
    reference: Callable[..., Any]
    make_inputs: Callable[..., Sequence[Any]]
    shapes: tuple[ShapeCase, ...]
    cpu_shapes: tuple[ShapeCase, ...]
    dims: tuple[str, ...]
    dtypes: tuple[str, ...]
    seed_count: int
    tolerances: Mapping[str, Tolerance]
    input_layouts: Mapping[int, tuple[str, ...]] = field(default_factory=dict)
    output_contract: OutputContract = OutputContract()
    description: str = ""
    # Device queries the static gate lets through (by resolved name): everything else that reads the
    # device is `device_conditioned` (a path the cpu pool never runs).
    device_queries: tuple[str, ...] = ()
    # Whether the candidate's host code may copy input data (clone/contiguous/copy_ of an input):
    # by default that is torch doing work outside the kernel, `torch_compute` at run time.
    allow_input_copies: bool = False
    # Every input its kernel must handle (domain.py); None for a task that declares no DOMAIN yet.
    domain: InputDomain | None = None
    # Its regression cases (<task_dir>/regressions/*.json, regressions.py) and the files skipped, why.
    regressions: tuple[RegressionCase, ...] = ()
    regressions_skipped: tuple[str, ...] = ()

    def tolerance(self, dtype: str) -> Tolerance:
        return self.tolerances.get(dtype) or default_tolerance(dtype)

    def layout_for(self, seed_index: int) -> dict[int, str]:
        """Seed j of every case and dtype uses variant j (cyclically) of each input's layouts."""
        return {i: variants[seed_index % len(variants)] for i, variants in self.input_layouts.items()}

    def trials(
        self, *, cpu: bool, dtypes: Sequence[str] | None = None, seeds: Sequence[int] | None = None
    ) -> list[Trial]:
        """Cases x dtypes x seeds. ``seeds=None`` draws a fresh set (``seed_count`` of them)."""
        cases = self.cpu_shapes if cpu else self.shapes
        chosen = self.dtypes if dtypes is None else tuple(dtypes)
        seeds = list(seeds) if seeds is not None else derive_seeds(draw_seed_base(), self.seed_count)
        out: list[Trial] = []
        for case in cases:
            for dtype in chosen:
                for j, seed in enumerate(seeds):
                    out.append(
                        Trial(len(out), dict(case), dtype, int(seed), j, MappingProxyType(self.layout_for(j)))
                    )
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


def _parse_dims(raw: object) -> tuple[str, ...]:
    if raw is None:
        raise TaskError(
            "DIMS must name the shape-case keys that are tensor dimensions, e.g. DIMS = ('rows', 'cols')"
        )
    if isinstance(raw, str) or not isinstance(raw, Sequence) or not raw:
        raise TaskError("DIMS must be a non-empty list of case keys")
    dims = tuple(str(d) for d in raw)
    if len(set(dims)) != len(dims):
        raise TaskError("DIMS lists a key twice")
    return dims


def validate_cases(cases: Sequence[ShapeCase], label: str, dims: Sequence[str]) -> tuple[ShapeCase, ...]:
    """At least two cases with a dimension that is not a block multiple, and another scale (4x or more
    in element count), both counted over the declared dimension keys only."""
    if not cases:
        raise TaskError(f"{label} is empty")
    for case in cases:
        if not isinstance(case, Mapping) or not case:
            raise TaskError(f"{label}: each case must be a non-empty dict of dim name to int")
        for key, value in case.items():
            if not isinstance(key, str) or not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise TaskError(f"{label}: bad dim {key!r}={value!r}")
        missing = [d for d in dims if d not in case]
        if missing:
            raise TaskError(f"{label}: case {dict(case)} lacks the declared dimension(s) {missing}")
    odd = [c for c in cases if any(c[d] % BLOCK_QUANTUM for d in dims)]
    if len(odd) < 2:
        raise TaskError(
            f"{label} needs at least two cases with a dimension (one of DIMS) "
            f"not a multiple of {BLOCK_QUANTUM}"
        )
    sizes = [max(math.prod(c[d] for d in dims), 1) for c in cases]
    if len(cases) < 3 or max(sizes) < MIN_SCALE_RATIO * min(sizes):
        raise TaskError(
            f"{label} needs at least three cases whose dimensions (DIMS) span {MIN_SCALE_RATIO}x in "
            "element count (another scale)"
        )
    return tuple(dict(c) for c in cases)


def _parse_seed_count(module: ModuleType) -> int:
    if hasattr(module, "SEED_COUNT"):
        count = module.SEED_COUNT
        if not isinstance(count, int) or isinstance(count, bool):
            raise TaskError("SEED_COUNT must be an int")
    elif hasattr(module, "SEEDS"):
        # Legacy: only how many. The values are never used: fixed seeds can be memorised.
        count = len(set(module.SEEDS))
    else:
        count = MIN_SEEDS
    if count < MIN_SEEDS:
        raise TaskError(f"SEED_COUNT (or SEEDS) needs at least {MIN_SEEDS} seeds")
    return count


def _parse_layouts(raw: object) -> dict[int, tuple[str, ...]]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise TaskError("INPUT_LAYOUTS must map an input index to a list of layout names")
    out: dict[int, tuple[str, ...]] = {}
    for index, variants in raw.items():
        if not isinstance(index, int) or index < 0:
            raise TaskError(f"INPUT_LAYOUTS: bad input index {index!r}")
        if isinstance(variants, str) or not isinstance(variants, Sequence) or not variants:
            raise TaskError(f"INPUT_LAYOUTS[{index}] must be a non-empty list of layout names")
        for name in variants:
            if name not in LAYOUTS:
                raise TaskError(
                    f"INPUT_LAYOUTS[{index}]: unknown layout {name!r}; known: {', '.join(LAYOUTS)}"
                )
        out[index] = tuple(str(v) for v in variants)
    return out


def _parse_device_queries(raw: object) -> tuple[str, ...]:
    if raw is None:
        return ()
    if isinstance(raw, str) or not isinstance(raw, Sequence):
        raise TaskError("DEVICE_QUERIES must be a list of dotted names, e.g. ('torch.cuda.synchronize',)")
    out = tuple(str(q) for q in raw)
    unknown = sorted(set(out) - PERMITTABLE_DEVICE_QUERIES)
    if unknown:
        raise TaskError(
            f"DEVICE_QUERIES: {unknown} cannot be permitted; known: {sorted(PERMITTABLE_DEVICE_QUERIES)}"
        )
    return out


def _parse_allow_input_copies(raw: object) -> bool:
    if not isinstance(raw, bool):
        raise TaskError("ALLOW_INPUT_COPIES must be True or False")
    return raw


def _parse_contract(raw: object) -> OutputContract:
    if raw is None:
        return OutputContract()
    fields = {"contiguous", "own_storage", "no_view"}
    if (
        not isinstance(raw, Mapping)
        or not set(raw) <= fields
        or not all(isinstance(v, bool) for v in raw.values())
    ):
        raise TaskError(f"OUTPUT_CONTRACT must map some of {sorted(fields)} to bools")
    return OutputContract(**{str(k): bool(v) for k, v in raw.items()})


def _check_layouts_apply(task: Task) -> None:
    """Build the first case's inputs in every declared layout once, so a bad declaration fails here."""
    if not task.input_layouts:
        return
    case = task.cpu_shapes[0]
    inputs = list(task.make_inputs(dict(case), torch_dtype(task.dtypes[0]), 0, "cpu"))
    for index, variants in task.input_layouts.items():
        if index >= len(inputs):
            raise TaskError(f"INPUT_LAYOUTS names input {index}, make_inputs returns {len(inputs)}")
        value = inputs[index]
        if not isinstance(value, torch.Tensor):
            raise TaskError(f"INPUT_LAYOUTS names input {index}, which is not a tensor")
        for name in variants:
            try:
                relayout(value, name, random.Random(0))
            except LayoutError as exc:
                raise TaskError(f"INPUT_LAYOUTS[{index}]: {exc}") from exc


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

    dims = _parse_dims(getattr(module, "DIMS", None))
    shapes = validate_cases(list(getattr(module, "SHAPES", [])), "SHAPES", dims)
    cpu_shapes = validate_cases(list(getattr(module, "CPU_SHAPES", [])), "CPU_SHAPES", dims)

    dtypes = tuple(str(d) for d in getattr(module, "DTYPES", ()))
    if not dtypes:
        raise TaskError("DTYPES is empty")
    for d in dtypes:
        torch_dtype(d)

    task = Task(
        name=str(getattr(module, "NAME", root.name)),
        root=root,
        entry=entry,
        reference=reference,
        make_inputs=make_inputs,
        shapes=shapes,
        cpu_shapes=cpu_shapes,
        dims=dims,
        dtypes=dtypes,
        seed_count=_parse_seed_count(module),
        tolerances=MappingProxyType(_parse_tolerances(getattr(module, "TOLERANCES", None))),
        input_layouts=MappingProxyType(_parse_layouts(getattr(module, "INPUT_LAYOUTS", None))),
        output_contract=_parse_contract(getattr(module, "OUTPUT_CONTRACT", None)),
        description=str(getattr(module, "DESCRIPTION", "")),
        device_queries=_parse_device_queries(getattr(module, "DEVICE_QUERIES", None)),
        allow_input_copies=_parse_allow_input_copies(getattr(module, "ALLOW_INPUT_COPIES", False)),
    )
    _check_layouts_apply(task)
    raw_domain = getattr(module, "DOMAIN", None)
    if raw_domain is None:
        return _with_regressions(task)
    try:
        domain = parse_domain(
            raw_domain,
            dims=dims,
            dtypes=dtypes,
            layouts=task.input_layouts,
            cpu_shapes=cpu_shapes,
            shapes=shapes,
        )
    except DomainError as exc:
        raise TaskError(str(exc)) from None
    return _with_regressions(replace(task, domain=domain))


def _with_regressions(task: Task) -> Task:
    found = load_regressions(task.root, task.name, task.domain)
    return replace(task, regressions=found.cases, regressions_skipped=found.skipped)
