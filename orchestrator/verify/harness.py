"""Top level: ``verify(task_dir, candidate_path, pool) -> VerificationResult``.

Order: static gate (no device time) -> cpu-pool feature screen -> the parent draws the job's seeds
and private parameters, builds every trial's inputs in their declared layouts and computes the
reference on private clones -> a fresh fork of the fork server's zygote runs the candidate (trials of
one to three calls, some blind) and only sends back what it returned -> the parent judges -> (device
pools, on pass) timing against the eager baseline.
"""

from __future__ import annotations

import hashlib
import io
import json
import secrets
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch

from kswarm_contracts.counterexample import CounterexampleOutcome
from orchestrator.verify.counterexample import CounterexampleRun, judge_counterexample, regression_trials
from orchestrator.verify.device_shapes import device_trials
from orchestrator.verify.forkserver import ForkServer
from orchestrator.verify.fresh_shapes import fresh_trials
from orchestrator.verify.guards import GuardParams, draw_guard_params
from orchestrator.verify.judge import VALUE_FLAGS, TrialData, judge_trial
from orchestrator.verify.models import (
    ADVISORY_FLAGS,
    ERROR_FLAGS,
    ChildExit,
    Evidence,
    Flag,
    StaticViolationModel,
    TimingEntry,
    TrialResult,
    VerificationResult,
)
from orchestrator.verify.planning import clone_to, prepare, schedule
from orchestrator.verify.policy import UNVERIFIABLE_ON_CPU
from orchestrator.verify.pools import (
    INTERPRETER_UNFAITHFUL_DTYPES,
    PoolSpec,
    device_available,
    environment,
    pool_spec,
)
from orchestrator.verify.protocol import ChildReport, Plan, TrialReport
from orchestrator.verify.runtime_policy import FLAG_FOR_FINDING
from orchestrator.verify.seeds import derive_seeds, draw_seed_base
from orchestrator.verify.spawn import ChildRun, TrialFrames, run_child
from orchestrator.verify.static.gate import check_source
from orchestrator.verify.tasks import Task, Trial, load_task
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
    seeds: Sequence[int] | None = None,
    seed_base: int | None = None,
    server: ForkServer | None = None,
    counterexample: CounterexampleRun | None = None,
) -> VerificationResult:
    """Verify one candidate against one task on one pool.

    Seeds: ``seeds`` replays exactly those (one trial per case, dtype and seed); ``seed_base`` replays
    the seeds of a recorded run; neither draws a fresh base from the OS (the default, every job).
    ``enforce_static=False`` still reports static violations and unverifiable features but lets the
    candidate run and leaves the verdict to the runtime checks (diagnostics and tests of the runtime
    defences; such a run is never a "pass" while a static unverifiable feature is present).
    ``server``: the fork server whose zygote forks the child (started early by the CLI, or shared by
    several candidates); by default one is started for this call and closed after it.
    ``counterexample``: judge the kernel on that input (or a generator's inputs) only, not on the
    task's cases; the result's ``counterexample`` says whether it is confirmed (counterexample.py).
    Raises TaskError for a broken task, ValueError for an unknown pool or bad seeds, OSError for a
    missing file, RuntimeError when the pool's device is not present on this machine.
    """
    started = time.perf_counter()
    task = load_task(task_dir)
    spec = pool_spec(pool)
    if not device_available(spec):
        raise RuntimeError(f"pool {spec.name!r} needs a {spec.device} device, and none is available here")
    if seeds is not None and seed_base is not None:
        raise ValueError("give seeds or a seed base, not both")
    if server is not None and server.interpret != spec.interpret:
        raise ValueError(f"the fork server was not started for pool {spec.name!r}")
    if seeds is not None:
        chosen, base = [int(s) for s in seeds], None
        if not chosen:
            raise ValueError("seeds must not be empty")
    else:
        base = draw_seed_base() if seed_base is None else int(seed_base)
        chosen = derive_seeds(base, task.seed_count)
    path = Path(candidate_path).resolve()
    raw = path.read_bytes()
    result = VerificationResult(
        task=task.name,
        entry=task.entry,
        candidate=str(path),
        candidate_sha256=hashlib.sha256(raw).hexdigest(),
        pool=spec.name,
        seed_base=base,
        seeds=chosen,
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
        seeds=tuple(chosen),
        server=server,
        seed_base=base,
        counterexample=counterexample,
    )
    try:
        _verify(job, raw.decode("utf-8", errors="replace"), result)
        if counterexample is not None and result.counterexample is None:
            result.counterexample = CounterexampleOutcome(
                status="error",
                reasons=["the kernel was not run on the input: " + ("; ".join(result.reasons) or "no trial")],
            )
    finally:
        result.durations.total_s = time.perf_counter() - started
        result.evidence = evidence_for(result, spec)
    return result


def evidence_for(result: VerificationResult, spec: PoolSpec) -> Evidence:
    """What the verdict proves (models.Evidence): the level every consumer shows and the gate weighs."""
    if result.verdict == "unverifiable":
        return "unverifiable-on-cpu" if spec.interpret else "none"
    if result.verdict != "pass":
        return "none"
    if not spec.interpret:
        return "device-verified"
    if any(t.device_shape and t.ok for t in result.trials):
        return "cpu-screened"
    return "cpu-shapes-only"


@dataclass(frozen=True)
class _Job:
    task: Task
    spec: PoolSpec
    path: Path
    timeout_s: float
    enforce_static: bool
    do_timing: bool
    bench_config: BenchConfig
    seeds: tuple[int, ...]
    server: ForkServer | None
    seed_base: int | None = None  # the run's base: fresh shapes are drawn from it (None: explicit seeds)
    counterexample: CounterexampleRun | None = None  # judge these input(s) only (counterexample.py)


def _verify(job: _Job, source: str, result: VerificationResult) -> None:
    task, spec = job.task, job.spec
    t0 = time.perf_counter()
    report = check_source(source, task.entry, dtypes=task.dtypes, device_queries=task.device_queries)
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
            f"{v.rule} (line {v.line}): {UNVERIFIABLE_ON_CPU.get(v.rule, v.message)}"
            for v in report.unverifiable
        ]
        if job.enforce_static:
            result.verdict = "unverifiable"
            result.reasons.append(
                "uses features the CPU interpreter cannot run faithfully; verify on a device pool"
            )
            return
    if job.counterexample is not None:
        _judge_counterexample(job, job.counterexample, result)
        return

    dtypes = [d for d in task.dtypes if not (spec.interpret and d in INTERPRETER_UNFAITHFUL_DTYPES)]
    for dropped in sorted(set(task.dtypes) - set(dtypes)):
        result.unverifiable_reasons.append(f"dtype {dropped}: not verifiable on the cpu interpreter")
    trials = task.trials(cpu=spec.interpret, dtypes=dtypes, seeds=job.seeds)
    skipped: list[str] = []
    if spec.interpret and trials:  # the task's device shapes too, sampled
        extra, skipped = device_trials(task, dtypes, job.seeds, len(trials))
        trials += extra
    if trials:  # shapes no agent has seen, drawn from the domain for this run
        trials += fresh_trials(task, dtypes, job.seeds, job.seed_base, len(trials), not spec.interpret)
    result.regressions_skipped = list(task.regressions_skipped)
    if trials:  # the task's confirmed counterexamples (regressions.py)
        extra, why = regression_trials(task, spec, len(trials))
        trials += extra
        result.regressions_skipped += why
    if not trials:
        result.verdict = "unverifiable"
        result.reasons.append("no trial can run on this pool")
        return
    _run_and_judge(job, trials, result)
    _regression_reasons(task, result)
    if spec.interpret:
        _device_shape_reasons(result, skipped)


def _regression_reasons(task: Task, result: VerificationResult) -> None:
    """A failed regression trial names its case and finder (the verdict already counts it)."""
    finders = {case.id: case.finder for case in task.regressions}
    for trial in result.trials:
        if trial.regression and not trial.ok:
            what = ", ".join(trial.flags) or "failed"
            result.reasons.append(
                f"regression case {trial.regression} (found by {finders.get(trial.regression, '?')}): "
                f"{what}: {(trial.detail or '')[:200]}".rstrip(": ")
            )


def _judge_counterexample(job: _Job, run: CounterexampleRun, result: VerificationResult) -> None:
    """The kernel on the counterexample's input(s) only (counterexample.py), on one fork server."""
    with _server_for(job) as server:
        own = replace(job, server=server, do_timing=False)
        seed = job.seed_base if job.seed_base is not None else job.seeds[0]

        def run_trials(trials: list[Trial]) -> None:
            _run_and_judge(own, trials, result)

        judge_counterexample(job.task, job.spec, run, seed, server, run_trials, result)


def _device_shape_reasons(result: VerificationResult, skipped: list[str]) -> None:
    """A pass without a judged device shape says so: it proves the CPU shapes only."""
    if result.verdict != "pass" or any(t.device_shape and t.ok for t in result.trials):
        return
    why = skipped + [f"{t.dtype} {t.shape}: {t.sampled}" for t in result.trials if t.sampled]
    result.reasons.append("pass (cpu shapes only): " + ("; ".join(why) or "no device shape ran")[:600])


def _load_blob(blob: bytes | None) -> tuple[object | None, str | None]:
    if blob is None:
        return None, None
    try:
        # weights_only: the blob comes from the candidate's process and must not run code here.
        return torch.load(io.BytesIO(blob), weights_only=True, map_location=None), None
    except Exception as exc:  # any unreadable blob is the candidate's failure, not ours
        return None, f"unreadable output blob: {type(exc).__name__}: {str(exc)[:300]}"


def _judge(
    job: _Job,
    data: TrialData,
    saved: object,
    load_error: str | None,
    report: TrialReport | None,
    params: GuardParams,
    device: torch.device,
) -> TrialResult:
    task = job.task
    return judge_trial(data, saved, load_error, report, task.tolerance, task.output_contract, params, device)


def _run_and_judge(job: _Job, trials: list[Trial], result: VerificationResult) -> None:
    task, spec = job.task, job.spec
    t0 = time.perf_counter()
    timed = frozenset(_timing_indices(trials) if job.do_timing else [])
    plans = schedule(trials, interpret=spec.interpret, rng=secrets.SystemRandom(), timed=timed)
    prepared = prepare(task, trials, plans, spec.device)
    result.durations.inputs_s = time.perf_counter() - t0
    params = draw_guard_params()
    plan = Plan(
        candidate=str(job.path),
        entry=task.entry,
        device=spec.device,
        interpret=spec.interpret,
        guards=params.to_json(),
        timing=asdict(job.bench_config) if timed else None,
        allow_input_copies=task.allow_input_copies,
    )
    frames = [
        TrialFrames(p.index, json.dumps({"trial": p.to_json()}).encode(), blobs)
        for p, blobs in zip(plans, prepared.blobs, strict=True)
    ]
    limit = 64 * prepared.payload_bytes + (64 << 20)
    device = torch.device(spec.device)
    judged: dict[int, TrialResult] = {}
    judging = [0.0]

    def judge_blob(index: int, blob: bytes, report: ChildReport) -> None:
        # Runs in the reader thread as each blob arrives: the blob is dropped once judged.
        if not 0 <= index < len(prepared.data):
            raise ValueError(f"an output blob for trial {index}, which does not exist")
        started = time.perf_counter()
        saved, load_error = _load_blob(blob)
        data = prepared.data[index]
        judged[index] = _judge(job, data, saved, load_error, report.trials.get(index), params, device)
        judging[0] += time.perf_counter() - started

    with _server_for(job) as server:
        child = run_child(
            plan, frames, server=server, timeout_s=job.timeout_s, limit_bytes=limit, on_blob=judge_blob
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
    for data in prepared.data:
        index = data.trial.index
        report = child.report.trials.get(index)
        trial = judged.get(index) or _judge(job, data, None, None, report, params, device)
        if report is not None and report.duplicate and Flag.MONITOR_TAMPERED not in trial.flags:
            trial.flags.append(Flag.MONITOR_TAMPERED)  # a second report arrived after it was judged
            trial.ok = False
        result.trials.append(trial)
    result.durations.compare_s = time.perf_counter() - t0 + judging[0]

    _decide(result, child)
    if job.do_timing and result.verdict == "pass":
        t0 = time.perf_counter()
        result.timings = _baseline_timings(job, prepared.data, child)
        if any(entry.suspicious for entry in result.timings):
            result.flags.append(Flag.SUSPICIOUS_SPEEDUP)
            result.needs_review = True
            result.reasons.append("speedup over eager above 10x: needs human review")
        result.durations.timing_s = time.perf_counter() - t0


# What a blind call can get wrong that a candidate behaving the same everywhere would get right too.
WATCHED_FLAGS = VALUE_FLAGS | {
    Flag.OUTPUT_CONTRACT,
    Flag.WRONG_SHAPE,
    Flag.WRONG_DTYPE,
    Flag.NO_TRITON_LAUNCH,
}


def _monitor_dependent(result: VerificationResult) -> bool:
    """A blind call failed on values or contract where every monitored call of its case and dtype passed."""
    by_group: dict[tuple[str, str], list[tuple[bool, bool]]] = {}
    for trial in result.trials:
        key = (repr(sorted(trial.shape.items())), trial.dtype)
        for call in trial.calls:
            bad = bool(set(call.flags) & WATCHED_FLAGS)
            by_group.setdefault(key, []).append((call.monitored, bad))
    for calls in by_group.values():
        blind_bad = any(bad for monitored, bad in calls if not monitored)
        watched = [bad for monitored, bad in calls if monitored]
        if blind_bad and watched and not any(watched):
            return True
    return False


def _decide(result: VerificationResult, child: ChildRun) -> None:
    flags: list[Flag] = []
    report = child.report
    if child.failure:
        flags.append(Flag.CRASH)
        result.reasons.append(f"no exit status: {child.failure}")
    elif child.timed_out:
        flags += [Flag.CRASH, Flag.TIMEOUT]
        result.reasons.append(f"child timed out after {child.wall_s:.1f}s")
    elif child.returncode != 0:
        flags.append(Flag.CRASH)
        how = f"signal {child.signal}" if child.signal else f"exit code {child.returncode}"
        result.reasons.append(f"child ended abnormally ({how})")
    elif not report.done:
        flags.append(Flag.CRASH)
        result.reasons.append("child exited without reporting completion")
    if report.stream_error:
        flags.append(Flag.MONITOR_TAMPERED if child.returncode == 0 else Flag.CRASH)
        result.reasons.append(f"child's report stream: {report.stream_error}")
    if report.import_error:
        flags.append(Flag.CRASH)
        last = (report.import_error.strip().splitlines() or [""])[-1]
        result.reasons.append(f"candidate failed to import: {last[:200]}")
    for kind, details in report.import_findings.items():
        flag = FLAG_FOR_FINDING.get(kind)
        if flag:
            flags.append(Flag(flag))
            result.reasons.append(f"at import: {kind}: {'; '.join(details[:5])}")
    if _monitor_dependent(result):
        flags.append(Flag.MONITOR_DEPENDENT)
        result.reasons.append("wrong only in calls made without any monitoring (blind calls)")
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


@contextmanager
def _server_for(job: _Job) -> Iterator[ForkServer]:
    """The caller's fork server, or one of this job's own (closed after the child)."""
    if job.server is not None:
        yield job.server
        return
    with ForkServer(interpret=job.spec.interpret) as own:
        yield own


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


def _baseline_timings(job: _Job, data: Sequence[TrialData], child: ChildRun) -> list[TimingEntry]:
    task, spec, config = job.task, job.spec, job.bench_config
    clock = TorchDeviceClock(spec.device, config.flush_bytes)
    entries = []
    for index, samples in sorted(child.report.timings.items()):
        if not samples or index >= len(data):
            continue
        inputs = clone_to(data[index].inputs, spec.device)

        def reference(inputs: list[object] = inputs) -> Any:
            return task.reference(*inputs)

        baseline = summarize(bench(reference, clock, config))
        candidate = summarize(samples)
        ratio, suspicious = speedup(candidate, baseline)
        trial = data[index].trial
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
