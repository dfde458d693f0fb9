"""Confirming a counterexample (issue 27): a red-team's input, or the inputs its generator prints, judged
against one kernel. ``verify(..., counterexample=CounterexampleRun(...))`` runs the kernel on those
inputs only (never the task's fixed cases) and records a ``CounterexampleOutcome``:

- ``confirmed``: the first input (in the generator's order) that is inside the task's domain
  (``InputDomain.check``: case, dtype, layouts, special values), within the pool's size bound, on which
  the reference runs and is defined (finite, unless NaN/Inf were planted), and on which the kernel fails
  (any flag: mismatch, crash, nan_inf, ...);
- ``refused``: no such input; every input's reasons are given (outside the domain, too large for the
  pool, the reference raising or undefined there, or the kernel right on it, with its error and the
  tolerance);
- ``error``: the harness could not run it (the fork server broke).

A generator (``generate(domain: dict, seed: int) -> list[dict]``) never runs in this process: it runs
in a fresh fork of the candidates' zygote, confined further (generator_child.py), bounded by
``GENERATOR_TIMEOUT_S``, ``GENERATOR_MAX_INPUTS`` and ``GENERATOR_MAX_BYTES``.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

import torch
from pydantic import ValidationError

from kswarm_contracts.counterexample import (
    GENERATOR_MAX_BYTES,
    GENERATOR_MAX_INPUTS,
    GENERATOR_TIMEOUT_S,
    CounterexampleInput,
    CounterexampleOutcome,
)
from orchestrator.verify import protocol as proto
from orchestrator.verify.forkserver import ForkServer, ForkServerError
from orchestrator.verify.models import TrialResult, VerificationResult
from orchestrator.verify.planning import build_inputs, reference_outputs
from orchestrator.verify.pools import INTERPRETER_UNFAITHFUL_DTYPES, PoolSpec
from orchestrator.verify.regressions import input_problems, size_budget, too_large
from orchestrator.verify.tasks import Task, Trial

HERE = Path(__file__).resolve().parent
GENERATOR_MAIN = "orchestrator.verify.generator_child"
# What the generator's one JSON frame may weigh: its inputs are small descriptions, not tensors.
GENERATOR_MAX_OUTPUT_BYTES = 256_000


@dataclass(frozen=True)
class CounterexampleRun:
    """What a counterexample run judges: one input (its JSON text) or a generator's source."""

    input_json: str | None = None
    generator: str | None = None
    generator_timeout_s: float = GENERATOR_TIMEOUT_S

    def __post_init__(self) -> None:
        if (self.input_json is None) == (self.generator is None):
            raise ValueError("a counterexample is one input or one generator, not both or neither")


@dataclass
class Given:
    """The inputs to try, in order: each parsed, or why it does not parse."""

    inputs: list[CounterexampleInput | str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)  # why nothing can be tried at all
    error: bool = False  # the harness could not run the generator


def parse_input(text: str) -> CounterexampleInput | str:
    try:
        return CounterexampleInput.model_validate_json(text)
    except ValidationError as exc:
        return f"not a counterexample input: {_first_errors(exc)}"


def _first_errors(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'input'}: {e['msg']}" for e in exc.errors()[:4])[:400]


def _parse_output(raw: object) -> Given:
    if not isinstance(raw, list):
        return Given(refused=[f"generate() must return a list of inputs, got {type(raw).__name__}"])
    if len(raw) > GENERATOR_MAX_INPUTS:
        return Given(
            refused=[
                f"the generator gave {len(raw)} inputs, over GENERATOR_MAX_INPUTS={GENERATOR_MAX_INPUTS}"
            ]
        )
    if not raw:
        return Given(refused=["the generator gave no input"])
    out: list[CounterexampleInput | str] = []
    for item in raw:
        try:
            out.append(CounterexampleInput.model_validate(item, strict=False))
        except ValidationError as exc:
            out.append(f"not a counterexample input: {_first_errors(exc)}")
    return Given(inputs=out)


class _Drain(threading.Thread):
    def __init__(self, fd: int) -> None:
        super().__init__(daemon=True)
        self.fd = fd

    def run(self) -> None:
        try:
            while os.read(self.fd, 65536):
                pass  # the generator's prints: never part of the result
        except OSError:
            pass


class _Report(threading.Thread):
    def __init__(self, fd: int) -> None:
        super().__init__(daemon=True)
        self.fd = fd
        self.frame: bytes | None = None
        self.problem: str | None = None

    def run(self) -> None:
        try:
            got = proto.read_frame(self.fd, GENERATOR_MAX_OUTPUT_BYTES)
            if got is not None and (got[0] != proto.JSON or len(got[1]) > GENERATOR_MAX_OUTPUT_BYTES):
                raise ValueError(f"its output is over {GENERATOR_MAX_OUTPUT_BYTES} bytes")
            self.frame = got[1] if got is not None else None
        except (ValueError, OSError) as exc:
            self.problem = str(exc)[:300]
        try:
            while os.read(self.fd, 1 << 20):
                pass
        except OSError:
            pass


def run_generator(
    source: str, domain: dict[str, object], seed: int, server: ForkServer, timeout_s: float
) -> Given:
    """The generator's inputs, run in a fresh fork of ``server``'s zygote (generator_child.py)."""
    size = len(source.encode())
    if size > GENERATOR_MAX_BYTES:
        return Given(
            refused=[f"the generator is {size} bytes, over GENERATOR_MAX_BYTES={GENERATOR_MAX_BYTES}"]
        )
    deadline = time.monotonic() + timeout_s
    try:
        child = server.fork(deadline + 60)  # the zygote's own start is not the generator's time
    except ForkServerError as exc:
        return Given(refused=[f"the harness could not run the generator: {exc}"], error=True)
    deadline = time.monotonic() + timeout_s
    header = {
        "modules": [(GENERATOR_MAIN, "<generator-runner>", (HERE / "generator_child.py").read_text())],
        "main": GENERATOR_MAIN,
        "plan": {"source": source, "domain": domain, "seed": seed, "cpu_s": int(timeout_s) + 1},
    }
    threads = [_Drain(child.stdout_r), _Drain(child.stderr_r)]
    report = _Report(child.report_r)
    for thread in (*threads, report):
        thread.start()
    try:
        proto.write_frame(child.plan_w, proto.JSON, json.dumps(header).encode())
    except OSError:
        pass  # it died at once: its exit says so
    finally:
        os.close(child.plan_w)
    returncode, timed_out, failure = server.wait(child, deadline)
    for thread in (report, *threads):
        thread.join(timeout=10)
    for fd in (child.report_r, child.stdout_r, child.stderr_r):
        os.close(fd)
    if failure:
        return Given(refused=[f"the harness could not run the generator: {failure}"], error=True)
    if timed_out:
        return Given(refused=[f"the generator ran past its {timeout_s:g} s limit and was stopped"])
    if report.problem or report.frame is None:
        how = report.problem or f"no output (exit status {returncode})"
        return Given(refused=[f"the generator gave no usable output: {how}"])
    try:
        answer = json.loads(report.frame)
    except ValueError:
        return Given(refused=["the generator's output is not JSON"])
    if not isinstance(answer, dict):
        return Given(refused=["the generator's output is not an answer"])
    if "error" in answer:
        return Given(refused=[f"the generator failed: {str(answer['error'])[:600]}"])
    return _parse_output(answer.get("inputs"))


def to_trial(given: CounterexampleInput, index: int, regression: str | None = None) -> Trial:
    return Trial(
        index,
        dict(given.case),
        given.dtype,
        given.seed,
        layout=MappingProxyType(dict(given.layouts)),
        special=tuple(given.special),
        regression=regression,
    )


def refusals(task: Task, spec: PoolSpec, given: CounterexampleInput) -> list[str]:
    """Why ``given`` cannot be judged on this pool (empty: it can): outside the domain, too large, a
    dtype the pool cannot verify, or a reference that raises or is undefined there."""
    problems = input_problems(task.domain, given)
    if problems:
        return [f"outside the task's domain: {p}" for p in problems]
    if spec.interpret and given.dtype in INTERPRETER_UNFAITHFUL_DTYPES:
        return [f"dtype {given.dtype} is not verifiable on the cpu interpreter; submit it to a device pool"]
    budget = size_budget(task.cpu_shapes, task.shapes, task.dims, interpret=spec.interpret)
    large = too_large(given.case, task.dims, budget, interpret=spec.interpret)
    if large:
        return [large]
    try:
        inputs = build_inputs(task, to_trial(given, 0), given.seed, 0)
    except Exception as exc:  # the task's own builder (or a layout) cannot make this input
        return [f"the input cannot be built: {type(exc).__name__}: {str(exc)[:300]}"]
    try:
        outputs = reference_outputs(task, inputs, spec.device)
    except Exception as exc:  # trusted code, but this input may be one it does not define
        return [f"the reference raised on it: {type(exc).__name__}: {str(exc)[:300]}"]
    if not {"nan", "inf"} & set(given.special):
        for out in outputs:
            if out.dtype.is_floating_point and not bool(torch.isfinite(out).all()):
                return ["the reference is undefined there: its output is not finite"]
    return []


def judged(outcome: CounterexampleOutcome, given: CounterexampleInput, trial: TrialResult) -> str | None:
    """Confirm ``outcome`` with this trial when the kernel failed on it; else why it is refused."""
    if not trial.ok:
        outcome.status = "confirmed"
        outcome.input = given
        outcome.kernel_flags = [str(f) for f in trial.flags]
        outcome.max_abs_error = trial.max_abs_err
        what = ", ".join(outcome.kernel_flags) or "failed"
        outcome.reasons = [
            f"the kernel fails on this input: {what}: {(trial.detail or '')[:300]}".rstrip(": ")
        ]
        return None
    error = "no error" if trial.max_abs_err is None else f"max abs error {trial.max_abs_err:.3g}"
    tolerance = f"atol={trial.atol:g}, rtol={trial.rtol:g}" if trial.atol is not None else "exact"
    return f"the kernel is right on this input ({error}, within its tolerance {tolerance})"


def regression_trials(task: Task, spec: PoolSpec, start: int) -> tuple[list[Trial], list[str]]:
    """The task's regression cases as trials (numbered from ``start``), and why any is skipped here."""
    trials: list[Trial] = []
    skipped: list[str] = []
    for case in task.regressions:
        why = refusals(task, spec, case.input)
        if why:
            skipped.append(f"{case.id}: {'; '.join(why)}")
            continue
        trials.append(to_trial(case.input, start + len(trials), regression=case.id))
    return trials, skipped


def judge_counterexample(
    task: Task,
    spec: PoolSpec,
    run: CounterexampleRun,
    seed: int,
    server: ForkServer,
    run_trials: Callable[[list[Trial]], None],
    result: VerificationResult,
) -> None:
    """Judge the kernel on the counterexample's input(s) only (``run_trials`` runs and judges them into
    ``result``, as any job's trials); ``result.counterexample`` says what was found. ``seed`` is the
    generator's (the run's seed base)."""
    outcome = CounterexampleOutcome(status="refused")
    result.counterexample = outcome
    if run.generator is None:
        given = Given(inputs=[parse_input(run.input_json or "")])
    elif task.domain is None:
        given = Given(refused=["the task declares no input domain (DOMAIN): no generator can be judged"])
    else:
        given = run_generator(run.generator, task.domain.describe(), seed, server, run.generator_timeout_s)
    if given.refused:
        outcome.status = "error" if given.error else "refused"
        outcome.reasons = given.refused
        result.verdict = "error" if given.error else "unverifiable"
        result.reasons.append("no counterexample input was judged: " + given.refused[0])
        return
    label = "input {}: " if run.generator is not None else ""
    refused: list[str] = []
    trials: list[Trial] = []
    admitted: list[tuple[int, CounterexampleInput]] = []
    for position, item in enumerate(given.inputs):
        problems = [item] if isinstance(item, str) else refusals(task, spec, item)
        if problems or isinstance(item, str):
            refused += [label.format(position) + why for why in problems]
            continue
        admitted.append((position, item))
        trials.append(to_trial(item, len(trials)))
    outcome.inputs_tried = len(given.inputs)
    outcome.reasons = refused
    if not trials:
        result.verdict = "unverifiable"
        result.reasons.append("no counterexample input was judged: " + (refused or ["none"])[0])
        return
    run_trials(trials)
    child = result.child
    if child is not None and child.returncode is None and not child.timed_out:
        outcome.status = "error"  # no exit status: the fork server broke, not the kernel
        outcome.reasons = [f"the harness could not run the kernel: {'; '.join(result.reasons)[:300]}"]
        return
    for trial, (position, item) in zip(result.trials, admitted, strict=True):
        right = judged(outcome, item, trial)
        if right is None:
            outcome.inputs_tried = position + 1
            outcome.reasons += refused
            return
        refused.append(label.format(position) + right)
    outcome.reasons = refused
    if run.generator is None:
        outcome.input = admitted[0][1]  # the one input, judged right
