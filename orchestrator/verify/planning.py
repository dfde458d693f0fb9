"""The parent's plan of a job: which calls every trial makes, its inputs, references and child blobs.

Per (shape case, dtype), with choices drawn from the OS for every job (so no call is recognisable
before it happens):

- one trial makes three calls: on its inputs in natural program order, on the very same input
  objects again in reversed order, then after the buffers were refilled in place with new values in
  shuffled order (results must be fresh and right every time);
- one trial is a single *blind* call: every instrument is removed, inputs and allocations are plain,
  as in production; its outputs are still compared (a candidate that behaves only when watched
  fails there);
- every other trial is a single monitored call in a random program order; about one in three of
  them (at least one per job) is *unguarded*: its inputs and allocations are plain, exactly as in
  the blind call, while every other instrument watches. What a blind call looks like (no guard
  bands, no sentinels in fresh memory) is thus no sign that nobody watches.

On the cpu pool, one trial per dtype on a device shape (``Trial.sampled``, device_shapes.py) is a
single guarded monitored call that runs a sample of each launch's programs (``TrialPlan.sample``).
On device pools the program order is the hardware's ("device").
"""

from __future__ import annotations

import io
import random
import secrets
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from orchestrator.verify.device_shapes import PROGRAMS_PER_LAUNCH
from orchestrator.verify.guards import raw_bytes
from orchestrator.verify.judge import TrialData
from orchestrator.verify.layouts import apply_layouts
from orchestrator.verify.protocol import CallPlan, TrialPlan
from orchestrator.verify.runtime_policy import ORDERS
from orchestrator.verify.sampling import SampleRequest
from orchestrator.verify.seeds import refill_seed
from orchestrator.verify.special_values import plant
from orchestrator.verify.tasks import Task, TaskError, Trial, torch_dtype

# The share of single monitored calls made unguarded (see the module's docstring).
UNGUARDED_SHARE = 1 / 3


@dataclass(frozen=True)
class Prepared:
    data: list[TrialData]
    blobs: list[list[bytes]]  # per trial, in the order the child reads them: inputs, then refill values
    payload_bytes: int  # what the inputs and references weigh (bounds what the child may send)


def schedule(
    trials: Sequence[Trial], *, interpret: bool, rng: random.Random, timed: frozenset[int] = frozenset()
) -> list[TrialPlan]:
    """Every trial's calls and program-order seed (``timed``: the trials whose inputs are timed)."""
    groups: dict[tuple[tuple[tuple[str, int], ...], str], list[Trial]] = {}
    for trial in (t for t in trials if not t.sampled):
        groups.setdefault((tuple(sorted(trial.case.items())), trial.dtype), []).append(trial)
    repeat: set[int] = set()
    blind: set[int] = set()
    for members in groups.values():
        picks = rng.sample(range(len(members)), k=min(2, len(members)))
        repeat.add(members[picks[0]].index)
        if len(picks) > 1:
            blind.add(members[picks[1]].index)

    def order(name: str) -> str:
        return name if interpret else "device"

    singles = [t.index for t in trials if t.index not in repeat and t.index not in blind and not t.sampled]
    unguarded = {i for i in singles if rng.random() < UNGUARDED_SHARE}
    if singles and not unguarded:
        unguarded.add(rng.choice(singles))
    plans = []
    for trial in trials:
        if trial.sampled:  # a device shape (cpu pool): one guarded monitored call, sampled programs
            plans.append(_sampled_plan(trial, rng))
            continue
        if trial.index in repeat:
            calls = [
                CallPlan("first", order("natural"), True),
                CallPlan("repeat", order("reversed"), True),
                CallPlan("refill", order("shuffled"), True),
            ]
        elif trial.index in blind:
            calls = [CallPlan("blind", order("natural"), False, guarded=False)]
        else:
            guarded = trial.index not in unguarded
            calls = [CallPlan("first", order(rng.choice(ORDERS)), True, guarded=guarded)]
        plans.append(TrialPlan(trial.index, calls, seed=rng.getrandbits(63), timed=trial.index in timed))
    return plans


def _sampled_plan(trial: Trial, rng: random.Random) -> TrialPlan:
    request = SampleRequest(seed=rng.getrandbits(63), programs=PROGRAMS_PER_LAUNCH)
    call = CallPlan("first", rng.choice(("natural", "shuffled")), True)
    return TrialPlan(trial.index, [call], seed=rng.getrandbits(63), sample=request.to_json())


def _outputs(value: object) -> list[torch.Tensor]:
    items = list(value) if isinstance(value, tuple | list) else [value]
    tensors = [x for x in items if isinstance(x, torch.Tensor)]
    if len(tensors) < len(items):
        raise TaskError("task reference must return a tensor or a tuple of tensors")
    return [x.detach() for x in tensors]


def clone_to(inputs: Sequence[object], device: str) -> list[object]:
    return [x.detach().clone().to(device) if isinstance(x, torch.Tensor) else x for x in inputs]


def _geometry(x: object) -> object:
    if isinstance(x, torch.Tensor):
        return (x.dtype, tuple(x.shape), x.stride(), x.storage_offset(), x.untyped_storage().nbytes())
    return x


def _spec(x: object) -> object:
    """What the child needs to rebuild an input exactly: its whole storage and its geometry."""
    if not isinstance(x, torch.Tensor):
        return x
    return {
        "storage": raw_bytes(x).clone(),
        "dtype": str(x.dtype).removeprefix("torch."),
        "size": list(x.shape),
        "stride": list(x.stride()),
        "offset": int(x.storage_offset()),
    }


def _blob(inputs: Sequence[object]) -> bytes:
    buffer = io.BytesIO()
    torch.save([_spec(x) for x in inputs], buffer)
    return buffer.getvalue()


def build_inputs(task: Task, trial: Trial, seed: int, layout_seed: int) -> list[object]:
    """One trial's inputs, on the CPU: the task's ``make_inputs``, the trial's special values planted
    (special_values.py), then its layouts. Every trial is built here: fixed, fresh, regression cases and
    counterexamples alike."""
    made = list(task.make_inputs(dict(trial.case), torch_dtype(trial.dtype), seed, "cpu"))
    return apply_layouts(plant(made, trial.special, seed), trial.layout, random.Random(layout_seed))


def reference_outputs(task: Task, inputs: Sequence[object], device: str) -> list[torch.Tensor]:
    with torch.no_grad():  # private clones: nothing the reference does can leak into the inputs
        return _outputs(task.reference(*clone_to(inputs, device)))


def _weight(tensors: Sequence[object]) -> int:
    return sum(x.untyped_storage().nbytes() for x in tensors if isinstance(x, torch.Tensor))


def prepare(task: Task, trials: Sequence[Trial], plans: Sequence[TrialPlan], device: str) -> Prepared:
    layout_rng = secrets.SystemRandom()
    data, blobs, weight = [], [], 0
    for trial, plan in zip(trials, plans, strict=True):
        layout_seed = layout_rng.getrandbits(64)
        inputs = build_inputs(task, trial, trial.seed, layout_seed)
        reference = reference_outputs(task, inputs, device)
        blobs.append([_blob(inputs)])
        refill = refill_ref = refilled_seed = None
        if plan.refill:
            refilled_seed = refill_seed(trial.seed)
            refill = build_inputs(task, trial, refilled_seed, layout_seed)
            if [_geometry(x) for x in refill] != [_geometry(x) for x in inputs]:
                raise TaskError("make_inputs must give the same shapes and scalars for one case and dtype")
            refill_ref = reference_outputs(task, refill, device)
            blobs[-1].append(_blob(refill))
        weight += _weight(inputs) + _weight(reference) + _weight(refill or []) + _weight(refill_ref or [])
        data.append(TrialData(trial, plan, inputs, reference, refill, refill_ref, refilled_seed))
    return Prepared(data, blobs, weight)
