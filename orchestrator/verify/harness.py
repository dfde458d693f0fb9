"""Top level: ``verify(task_dir, candidate_path, pool) -> VerificationResult``.

Order: static gate (no device time) -> cpu-pool feature screen -> the parent generates inputs from the
seeds and computes the reference on private clones -> the child runs the candidate and only saves
outputs -> the parent compares -> (device pools, on pass) timing against the eager baseline.
"""

from __future__ import annotations

import hashlib
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from orchestrator.verify.checks import evaluate_trial
from orchestrator.verify.guards import nbytes
from orchestrator.verify.models import (
    ADVISORY_FLAGS,
    ERROR_FLAGS,
    ChildExit,
    Flag,
    StaticViolationModel,
    TimingEntry,
    VerificationResult,
)
from orchestrator.verify.policy import UNVERIFIABLE_ON_CPU
from orchestrator.verify.pools import (
    INTERPRETER_UNFAITHFUL_DTYPES,
    PoolSpec,
    device_available,
    environment,
    pool_spec,
)
from orchestrator.verify.protocol import Plan, TrialSpec
from orchestrator.verify.spawn import ChildRun, run_child
from orchestrator.verify.static_gate import check_source
from orchestrator.verify.tasks import Task, Trial, load_task, torch_dtype
from orchestrator.verify.timing import BenchConfig, TorchDeviceClock, bench, speedup, summarize


def verify(
    task_dir: str | Path,
    candidate_path: str | Path,
    pool: str = "cpu",
    *,
    timeout_s: float | None = None,
    enforce_static: bool = True,
    timing: bool | None = None,
    bench_config: BenchConfig | None = None,
) -> VerificationResult:
    """Verify one candidate against one task on one pool.

    ``enforce_static=False`` still reports static violations but lets the candidate run and leaves
    the verdict to the runtime checks alone (diagnostics and tests of the runtime defences).
    Raises TaskError for a broken task, ValueError for an unknown pool, OSError for a missing file,
    RuntimeError when the pool's device is not present on this machine.
    """
    started = time.perf_counter()
    task = load_task(task_dir)
    spec = pool_spec(pool)
    if not device_available(spec):
        raise RuntimeError(f"pool {spec.name!r} needs a {spec.device} device, and none is available here")
    path = Path(candidate_path).resolve()
    raw = path.read_bytes()
    result = VerificationResult(
        task=task.name,
        entry=task.entry,
        candidate=str(path),
        candidate_sha256=hashlib.sha256(raw).hexdigest(),
        pool=spec.name,
        verdict="error",
        environment=environment(spec),
    )
    job = _Job(
        task=task,
        spec=spec,
        path=path,
        timeout_s=timeout_s or spec.timeout_s,
        enforce_static=enforce_static,
        do_timing=spec.timing if timing is None else timing,
        bench_config=bench_config or BenchConfig(),
    )
    try:
        _verify(job, raw.decode("utf-8", errors="replace"), result)
    finally:
        result.durations.total_s = time.perf_counter() - started
    return result


@dataclass(frozen=True)
class _Job:
    task: Task
    spec: PoolSpec
    path: Path
    timeout_s: float
    enforce_static: bool
    do_timing: bool
    bench_config: BenchConfig


def _verify(job: _Job, source: str, result: VerificationResult) -> None:
    task, spec = job.task, job.spec
    t0 = time.perf_counter()
    report = check_source(source, task.entry)
    result.durations.static_s = time.perf_counter() - t0
    result.static_violations = [
        StaticViolationModel(rule=v.rule, line=v.line, message=v.message) for v in report.violations
    ]
    if report.violations and job.enforce_static:
        rules = sorted({v.rule for v in report.violations})
        result.verdict = "fail"
        result.reasons.append(f"static gate: {len(report.violations)} violation(s): {', '.join(rules)}")
        return
    if spec.interpret and report.unverifiable:
        result.unverifiable_reasons = [
            f"{v.rule} (line {v.line}): {UNVERIFIABLE_ON_CPU[v.rule]}" for v in report.unverifiable
        ]
        result.verdict = "unverifiable"
        result.reasons.append(
            "uses features the CPU interpreter cannot run faithfully; verify on a device pool"
        )
        return

    dtypes = [d for d in task.dtypes if not (spec.interpret and d in INTERPRETER_UNFAITHFUL_DTYPES)]
    for skipped in sorted(set(task.dtypes) - set(dtypes)):
        result.unverifiable_reasons.append(f"dtype {skipped}: not verifiable on the cpu interpreter")
    trials = task.trials(cpu=spec.interpret, dtypes=dtypes)
    if not trials:
        result.verdict = "unverifiable"
        result.reasons.append("no trial can run on this pool")
        return

    with tempfile.TemporaryDirectory(prefix="kswarm-verify-") as tmp:
        work = Path(tmp)
        _run_and_judge(job, trials, work, result)


def _as_outputs(value: object) -> list[torch.Tensor]:
    items = list(value) if isinstance(value, tuple | list) else [value]
    if not all(isinstance(x, torch.Tensor) for x in items):
        raise TypeError("task reference must return a tensor or a tuple of tensors")
    return [x.detach() for x in items]


def _clone_to(inputs: Sequence[object], device: str) -> list[object]:
    return [x.detach().clone().to(device) if isinstance(x, torch.Tensor) else x for x in inputs]


def _load_saved(path: Path, limit: int) -> tuple[object | None, str | None]:
    if not path.is_file():
        return None, None
    if path.stat().st_size > limit:
        return None, f"output file is {path.stat().st_size} bytes, over the {limit}-byte limit"
    try:
        # weights_only: the file comes from the candidate's process and must not run code here.
        return torch.load(path, weights_only=True, map_location=None), None
    except Exception as exc:  # any unreadable file is the candidate's failure, not ours
        return None, f"unreadable output file: {type(exc).__name__}: {str(exc)[:300]}"


def _run_and_judge(job: _Job, trials: list[Trial], work: Path, result: VerificationResult) -> None:
    task, spec = job.task, job.spec
    t0 = time.perf_counter()
    pristine: list[list[object]] = []
    specs: list[TrialSpec] = []
    for trial in trials:
        inputs = list(task.make_inputs(dict(trial.case), torch_dtype(trial.dtype), trial.seed, "cpu"))
        torch.save(inputs, work / f"in_{trial.index}.pt")
        pristine.append(inputs)
        specs.append(
            TrialSpec(trial.index, str(work / f"in_{trial.index}.pt"), str(work / f"out_{trial.index}.pt"))
        )
    result.durations.inputs_s = time.perf_counter() - t0

    t0 = time.perf_counter()
    references = []
    with torch.no_grad():
        for inputs in pristine:  # private clones: nothing the reference does can leak into the inputs
            references.append(_as_outputs(task.reference(*_clone_to(inputs, spec.device))))
    result.durations.reference_s = time.perf_counter() - t0

    timing_indices = _timing_indices(trials) if job.do_timing else []
    plan = Plan(
        candidate=str(job.path),
        entry=task.entry,
        device=spec.device,
        status=str(work / "status.jsonl"),
        trials=specs,
        timing={"indices": timing_indices, "config": asdict(job.bench_config)} if timing_indices else None,
    )
    plan.dump(work / "plan.json")
    child = run_child(
        work / "plan.json",
        work / "status.jsonl",
        work,
        interpret=spec.interpret,
        timeout_s=job.timeout_s,
    )
    result.durations.child_s = child.wall_s
    result.child = ChildExit(
        returncode=child.returncode,
        signal=child.signal,
        timed_out=child.timed_out,
        completed=child.report.done,
        stderr_tail=child.stderr_tail,
    )

    t0 = time.perf_counter()
    device = torch.device(spec.device)
    for trial, tspec, inputs, ref in zip(trials, specs, pristine, references, strict=True):
        limit = 16 * (sum(nbytes(x) for x in inputs if isinstance(x, torch.Tensor)) + sum(map(nbytes, ref)))
        saved, load_error = _load_saved(Path(tspec.outputs), limit + (16 << 20))
        trial_result = evaluate_trial(
            trial, task.tolerance, inputs, ref, saved, child.report.trials.get(trial.index), device
        )
        if load_error:
            trial_result.detail = load_error
        result.trials.append(trial_result)
    result.durations.compare_s = time.perf_counter() - t0

    _decide(result, child)
    if job.do_timing and result.verdict == "pass":
        t0 = time.perf_counter()
        result.timings = _baseline_timings(job, trials, pristine, child)
        if any(entry.suspicious for entry in result.timings):
            result.flags.append(Flag.SUSPICIOUS_SPEEDUP)
            result.needs_review = True
            result.reasons.append("speedup over eager above 10x: needs human review")
        result.durations.timing_s = time.perf_counter() - t0


def _decide(result: VerificationResult, child: ChildRun) -> None:
    flags: list[Flag] = []
    if child.timed_out:
        flags += [Flag.CRASH, Flag.TIMEOUT]
        result.reasons.append(f"child timed out after {child.wall_s:.1f}s")
    elif child.returncode != 0:
        flags.append(Flag.CRASH)
        how = f"signal {child.signal}" if child.signal else f"exit code {child.returncode}"
        result.reasons.append(f"child ended abnormally ({how})")
    elif not child.report.done:
        flags.append(Flag.CRASH)
        result.reasons.append("child exited without reporting completion")
    if child.report.import_error:
        flags.append(Flag.CRASH)
        last = (child.report.import_error.strip().splitlines() or [""])[-1]
        result.reasons.append(f"candidate failed to import: {last[:200]}")
    if child.report.import_ops:
        flags.append(Flag.TORCH_COMPUTE)
        result.reasons.append(f"torch compute at import time: {child.report.import_ops[:5]}")
    for trial in result.trials:
        flags += [f for f in trial.flags if f not in flags]
    result.flags = sorted(set(flags), key=list(Flag).index)
    failed = [t for t in result.trials if not t.ok]
    if any(f in ERROR_FLAGS for f in result.flags):
        result.verdict = "error"
    elif failed or any(f not in ADVISORY_FLAGS for f in result.flags):
        result.verdict = "fail"
        result.reasons.append(
            f"{len(failed)}/{len(result.trials)} trial(s) failed: {', '.join(result.flags)}"
        )
    elif result.unverifiable_reasons:
        result.verdict = "unverifiable"
        result.reasons.append("all runnable trials passed, but part of the task cannot be verified here")
    else:
        result.verdict = "pass"


def _timing_indices(trials: Sequence[Trial]) -> list[int]:
    """First trial of every shape case, first dtype only."""
    seen: set[tuple[tuple[str, int], ...]] = set()
    first_dtype = trials[0].dtype if trials else ""
    out = []
    for t in trials:
        key = tuple(sorted(t.case.items()))
        if t.dtype == first_dtype and key not in seen:
            seen.add(key)
            out.append(t.index)
    return out


def _baseline_timings(
    job: _Job, trials: Sequence[Trial], pristine: Sequence[Sequence[Any]], child: ChildRun
) -> list[TimingEntry]:
    task, spec, config = job.task, job.spec, job.bench_config
    clock = TorchDeviceClock(spec.device, config.flush_bytes)
    entries = []
    for index, samples in sorted(child.report.timings.items()):
        if not samples or index >= len(trials):
            continue
        inputs = _clone_to(pristine[index], spec.device)
        baseline = summarize(bench(lambda inputs=inputs: task.reference(*inputs), clock, config))
        candidate = summarize(samples)
        ratio, suspicious = speedup(candidate, baseline)
        trial = trials[index]
        entries.append(
            TimingEntry(
                shape=dict(trial.case),
                dtype=trial.dtype,
                candidate=candidate,
                baseline=baseline,
                speedup=ratio,
                suspicious=suspicious,
            )
        )
    return entries
