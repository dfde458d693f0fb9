"""The task's device shapes on the cpu pool (docs/verification.md, device shapes), parent side.

A kernel whose block sizes, grid or index arithmetic only cover the small ``CPU_SHAPES`` passes them
and is wrong on the device. So for every dtype the cpu pool also runs one of the task's ``SHAPES``,
drawn per job among those within the budget below, as one monitored call in which each launch runs
only a sample of its programs (sampling.py, in the child). The parent computes the reference on its
own CPU and compares only the output elements the executed programs wrote from valid data; the first
and the last element of every output must have been written (the boundary programs own them).

A shape over the budget is not run; when no shape of a dtype fits, the verdict's reasons say so and
the evidence stays "cpu-shapes-only" (harness.evidence_for).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from types import MappingProxyType

import torch

from orchestrator.verify.tasks import ShapeCase, Task, Trial, torch_dtype

# Inputs plus outputs of one device-shape trial: they travel to the child and back (input snapshots
# included) and sit in the child in guarded storages (up to three times their size).
MAX_BYTES = 64 << 20
# The child's sample per launch (sampling.SampleRequest): about this many programs.
PROGRAMS_PER_LAUNCH = 12
# Element states in the child's report (sampling.py).
INVALID, READY, WRITTEN, SPOILED = 0, 1, 2, 3


def estimate(task: Task, case: ShapeCase, dtype: str) -> int | None:
    """Bytes of one case's inputs and outputs; None when unknown (the case is not run).

    Scaled from a CPU shape built for real (milliseconds): every dimension of its tensors is one of
    that case's values, replaced by the device case's. Only where no CPU shape tells the dimensions
    apart are the device case's tensors built on the meta device (the first meta kernels import
    seconds of torch code, so that is the last resort)."""
    for small in sorted(task.cpu_shapes, key=lambda c: -_proxy(c)):
        size = _scaled(task, small, case, dtype)
        if size is not None:
            return size
    return _on_meta(task, case, dtype)


def _proxy(case: ShapeCase) -> int:
    return math.prod(max(v, 1) for v in case.values())


def _scaled(task: Task, small: ShapeCase, case: ShapeCase, dtype: str) -> int | None:
    values = [v for v in small.values() if v > 1]
    if len(set(values)) != len(values):
        return None  # two keys with one value: a dimension could be either
    key_of = {v: k for k, v in small.items() if v > 1}
    try:
        with torch.no_grad():
            inputs = list(task.make_inputs(dict(small), torch_dtype(dtype), 0, "cpu"))
            out = task.reference(*inputs)
    except Exception:
        return None
    outs = list(out) if isinstance(out, tuple | list) else [out]
    total = 0
    for t in (x for x in (*inputs, *outs) if isinstance(x, torch.Tensor)):
        numel = 1
        for size in t.shape:
            if size > 1 and (size not in key_of or key_of[size] not in case):
                return None  # a dimension that is none of the case's values
            numel *= case[key_of[size]] if size > 1 else 1
        total += numel * t.element_size()
    return total


def _on_meta(task: Task, case: ShapeCase, dtype: str) -> int | None:
    try:
        with torch.device("meta"):
            inputs = list(task.make_inputs(dict(case), torch_dtype(dtype), 0, "meta"))
            size = sum(x.untyped_storage().nbytes() for x in inputs if isinstance(x, torch.Tensor))
            try:
                out = task.reference(*inputs)
                outs = out if isinstance(out, tuple | list) else [out]
                size += sum(x.numel() * x.element_size() for x in outs if isinstance(x, torch.Tensor))
            except Exception:  # a data-dependent reference cannot run on meta tensors: count inputs twice
                size *= 2
            return int(size)
    except Exception:  # inputs that cannot be built on the meta device: no estimate, not run
        return None


def fits(size: int | None) -> bool:
    return size is not None and size <= MAX_BYTES


def device_trials(
    task: Task, dtypes: Sequence[str], seeds: Sequence[int], start: int
) -> tuple[list[Trial], list[str]]:
    """One sampled trial per dtype on a device shape within the budget, and what could not run.

    The draw depends only on the job's seeds, so ``--seeds`` / ``--seed-base`` replays it.
    """
    rng = random.Random("device-shapes:" + ",".join(str(s) for s in seeds))
    trials: list[Trial] = []
    skipped: list[str] = []
    for dtype in dtypes:
        runnable = [case for case in task.shapes if fits(estimate(task, case, dtype))]
        if not runnable:
            skipped.append(
                f"device shapes ({dtype}): none within the cpu budget ({MAX_BYTES >> 20} MiB of inputs "
                "and outputs)"
            )
            continue
        j = rng.randrange(len(seeds))
        trials.append(
            Trial(
                start + len(trials),
                dict(rng.choice(runnable)),
                dtype,
                int(seeds[j]),
                j,
                MappingProxyType(task.layout_for(j)),
                sampled=True,
            )
        )
    return trials, skipped


# --- judging a sampled output (judge.py) ----------------------------------------------------------


@dataclass(frozen=True)
class SampledOutput:
    """What of one output a sampled call lets the parent compare."""

    valid: torch.Tensor | None  # elements to compare; None when nothing can be judged
    never_written: str | None = None  # an end no executed program wrote: the kernel misses it
    not_judged: str | None = None  # why nothing can be compared (the sample cannot follow the kernel)


def ends(shape: Sequence[int]) -> list[tuple[int, ...]]:
    """The first and the last element: the first and last programs own them under every usual
    mapping (rows, tiles, flat blocks; grid-stride loops through the residues sampling.py adds).
    Other corners are not: a flat kernel over a matrix owns ``[0, N-1]`` from a middle program."""
    return sorted({tuple(0 for _ in shape), tuple(n - 1 for n in shape)})


def sampled_output(j: int, out: torch.Tensor, states: object) -> SampledOutput:
    if type(states) is not torch.Tensor or states.shape != out.shape or states.dtype != torch.uint8:
        return SampledOutput(None, not_judged=f"output {j}: no element states were reported")
    assert isinstance(states, torch.Tensor)
    if out.numel() == 0:
        return SampledOutput(None, not_judged=f"output {j} is empty")
    missing = [c for c in ends(out.shape) if int(states[c]) == INVALID]
    if missing:
        where = ", ".join(str(list(c)) for c in missing[:4])
        return SampledOutput(
            None, never_written=f"output {j}: element(s) {where} were never written by any program"
        )
    spoiled = [c for c in ends(out.shape) if int(states[c]) != WRITTEN]
    if spoiled:
        return SampledOutput(
            None,
            not_judged=f"output {j}: its boundary element(s) depend on programs the sample skipped",
        )
    return SampledOutput(states == WRITTEN)


def share(valid: torch.Tensor) -> str:
    n = int(valid.sum())
    return f"{n} of {valid.numel()} elements ({100 * n / max(valid.numel(), 1):.2g}%)"
