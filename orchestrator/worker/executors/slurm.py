"""The Slurm executor: ``sbatch --nodes=1 --gres=<type>:N`` with the harness as the batch script.

Slurm does the gang allocation and sets ``CUDA_VISIBLE_DEVICES`` for GPU GRES; the batch script
starts the harness in the one sandbox (``orchestrator/sandbox``, docs/sandbox.md) with the
allow-listed environment plus Slurm's device variables, or refuses it when the node cannot build the
sandbox. State comes from ``squeue`` while the job is known there and from ``sacct`` (falling back to
``sacct -c``, the job-completion log, and to ``scontrol``) afterwards; the script also writes its
exit code into the output dir, which is shared with the worker (one machine here; a shared
filesystem on a real cluster). Cancel is ``scancel``.
"""

from __future__ import annotations

import asyncio
import math
import os
import shlex
import sys
import time
from pathlib import Path
from typing import ClassVar

from gateway.client.jobs.executors import ExecutorOptions, SlurmOptions
from orchestrator.sandbox.plan import SETUP_FAILED
from orchestrator.worker.executors.base import ExecOutcome, ExecSpec, OnOutput, OutputCap, drop_planted_record
from orchestrator.worker.executors.local import LocalExecutor, job_plan, setup_failure

NOBODY = 65534
PROJECT_ROOT = Path(__file__).resolve().parents[3]
SLURM_DEVICE_VARS = ("CUDA_VISIBLE_DEVICES", "SLURM_JOB_ID", "SLURM_JOB_GPUS")
SANDBOX_SUMMARY = (
    "network, mount (minimal root, checkout read-only, output dir only writable), pid, ipc namespaces; "
    "seccomp; refused where the node cannot build it"
)
ACTIVE_STATES = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING"}


async def _cmd(*argv: str, limit_s: float = 30) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        stdin=asyncio.subprocess.DEVNULL,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), limit_s)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return 124, "", f"{argv[0]} timed out"
    return proc.returncode or 0, out.decode(errors="replace"), err.decode(errors="replace")


class SlurmExecutor:
    kind = "slurm"
    options_model: ClassVar[type[ExecutorOptions]] = SlurmOptions
    unavailable: str | None = None  # a node that cannot build the sandbox refuses its job, with why

    def __init__(self, poll_s: float = 0.5, isolate: bool = True, pending_limit_s: float = 3600) -> None:
        self.poll_s = poll_s
        self.isolate = isolate
        self.pending_limit_s = pending_limit_s

    def isolation(self) -> list[str]:
        return ["slurm: --nodes=1 gres", f"sandbox: {SANDBOX_SUMMARY}" if self.isolate else "bare"]

    def sbatch_args(self, spec: ExecSpec, script: Path) -> list[str]:
        minutes = max(1, math.ceil(spec.timeout_s / 60) + 1)  # Slurm's own backstop, above ours
        args = [
            "sbatch",
            "--parsable",
            "--nodes=1",
            f"--job-name=kswarm-{spec.job_id}",
            f"--output={spec.outdir / 'slurm.out'}",
            f"--chdir={spec.outdir}",
            f"--time={minutes}",
            "--export=NONE",
        ]
        if spec.device_count > 0 and spec.device != "cpu":
            args.append(f"--gres={spec.gres}:{spec.device_count}")
        if spec.partition:
            args.append(f"--partition={spec.partition}")
        return [*args, str(script)]

    def batch_script(self, spec: ExecSpec) -> str:
        """The batch script: the job in the one sandbox (``orchestrator/sandbox``, as the local
        executor runs it), with Slurm's device variables added to the job's allow-listed environment
        at run time. Where the node cannot build the sandbox the job is refused (the sandbox exits
        ``SETUP_FAILED`` with its reason), never run less confined. ``isolate=False`` (tests of the
        Slurm plumbing only) runs the harness bare."""
        out = shlex.quote(str(spec.outdir))
        lines = ["#!/bin/sh", f"# kswarm job {spec.job_id} attempt {spec.attempt}"]
        lines.append('echo "[kswarm] node $(hostname) devices ${CUDA_VISIBLE_DEVICES:-none}"')
        if not self.isolate:
            env = " ".join(shlex.quote(f"{k}={v}") for k, v in sorted(spec.env.items()))
            lines.append(f"env -i {env} " + " ".join(shlex.quote(a) for a in spec.argv))
        else:
            run_as = NOBODY if os.geteuid() == 0 else None  # Slurm runs the script as the submitter
            plan = job_plan(spec, run_as).model_dump_json()
            keep = [*SLURM_DEVICE_VARS, *(["ASCEND_RT_VISIBLE_DEVICES"] if spec.device == "npu" else [])]
            # Slurm's device variables join the job's environment (the plan's); the launcher itself
            # gets only PATH and the project, as the local executor's does.
            enter = (
                "import json, os, sys; plan = json.loads(sys.argv[1]); "
                f"plan['env'].update({{k: os.environ[k] for k in {keep!r} if k in os.environ}}); "
                "env = {'PATH': os.environ.get('PATH', '/usr/bin:/bin'), 'PYTHONPATH': sys.argv[2]}; "
                "os.execve(sys.executable, [sys.executable, '-P', '-s', '-m', 'orchestrator.sandbox', "
                "json.dumps(plan)], env)"
            )
            python = shlex.quote(sys.executable)
            lines.append(f'echo "[kswarm] sandbox: {SANDBOX_SUMMARY}"')
            lines.append(
                f"{python} -I -c {shlex.quote(enter)} {shlex.quote(plan)} {shlex.quote(str(PROJECT_ROOT))}"
            )
        lines += ["code=$?", f"echo $code > {out}/exit_code", "exit $code"]
        return "\n".join(lines) + "\n"

    async def submit(self, spec: ExecSpec) -> str:
        if self.isolate:
            LocalExecutor(NOBODY if os.geteuid() == 0 else None).prepare(
                spec
            )  # read-only checkout, own out dir
        await _cmd("scancel", f"--name=kswarm-{spec.job_id}")  # an earlier attempt's, if its worker died
        script = spec.outdir / "job.sh"
        script.write_text(self.batch_script(spec))
        script.chmod(0o755)
        code, out, err = await _cmd(*self.sbatch_args(spec, script))
        if code != 0:
            raise RuntimeError(f"sbatch failed ({code}): {err.strip() or out.strip()}")
        return out.strip().split(";")[0]

    async def state(self, slurm_id: str) -> tuple[str, int | None]:
        """(STATE, exit code or None): squeue while known there, then sacct, sacct -c, scontrol."""
        code, out, _ = await _cmd("squeue", "-h", "-j", slurm_id, "-o", "%T")
        if code == 0 and out.strip():
            return out.strip().splitlines()[0], None
        for argv in (
            ("sacct", "-n", "-P", "-X", "-j", slurm_id, "-o", "State,ExitCode"),
            ("sacct", "-c", "-n", "-P", "-j", slurm_id, "-o", "State,ExitCode"),
        ):
            code, out, _ = await _cmd(*argv)
            lines = [ln for ln in out.splitlines() if ln.strip()] if code == 0 else []
            if lines:
                state, _, exit_code = lines[-1].partition("|")
                return state.split()[0], _exit(exit_code)
        code, out, _ = await _cmd("scontrol", "show", "job", "-o", slurm_id)
        fields = dict(p.split("=", 1) for p in out.split() if "=" in p) if code == 0 else {}
        if "JobState" in fields:
            return fields["JobState"], _exit(fields.get("ExitCode", ""))
        return "UNKNOWN", None

    async def cancel(self, slurm_id: str) -> None:
        await _cmd("scancel", slurm_id)

    async def run(
        self, spec: ExecSpec, cancel: asyncio.Event, on_output: OnOutput | None = None
    ) -> ExecOutcome:
        cap = OutputCap(spec.limits.output_bytes, on_output)
        started = time.monotonic()
        try:
            slurm_id = await self.submit(spec)
        except (OSError, RuntimeError) as exc:
            return ExecOutcome(returncode=None, error=str(exc), isolation=["slurm"])
        log_path = spec.outdir / "slurm.out"
        offset = 0
        run_started: float | None = None
        timed_out = cancelled = False
        state, exit_code = "PENDING", None
        unknown_since: float | None = None
        while True:
            state, exit_code = await self.state(slurm_id)
            offset = _follow(log_path, offset, cap)
            now = time.monotonic()
            if state == "RUNNING" and run_started is None:
                run_started = now
            if state not in ACTIVE_STATES:
                if state != "UNKNOWN" or (spec.outdir / "exit_code").exists():
                    break
                unknown_since = unknown_since or now
                if now - unknown_since > 30:
                    break
            if cancel.is_set():
                cancelled = True
            elif run_started is not None and now - run_started > spec.timeout_s:
                timed_out = True
            elif run_started is None and now - started > self.pending_limit_s:
                timed_out = True
            if cancelled or timed_out:
                await self.cancel(slurm_id)
                break
            await asyncio.sleep(self.poll_s)
        await asyncio.sleep(0)
        _follow(log_path, offset, cap)
        returncode: int | None = None
        if not (cancelled or timed_out):
            written = spec.outdir / "exit_code"
            try:
                returncode = int(written.read_text().strip())
            except (OSError, ValueError):
                returncode = exit_code
        if state == "TIMEOUT":
            timed_out = True
        drop_planted_record(spec)
        error = None if returncode is not None or cancelled or timed_out else f"slurm job ended {state}"
        if returncode == SETUP_FAILED and not (timed_out or cancelled):
            error = setup_failure(cap.text()) or error
        return ExecOutcome(
            returncode=returncode,
            timed_out=timed_out,
            cancelled=cancelled,
            output=cap.text(),
            truncated=cap.truncated,
            wall_s=time.monotonic() - started,
            error=error,
            isolation=self.isolation(),
            detail={"slurm_job": slurm_id, "slurm_state": state},
        )


def _exit(raw: str) -> int | None:
    code, _, sig = raw.strip().partition(":")
    try:
        return -int(sig) if sig and int(sig) else int(code)
    except ValueError:
        return None


def _follow(path: Path, offset: int, cap: OutputCap) -> int:
    try:
        with path.open("rb") as fh:
            fh.seek(offset)
            data = fh.read()
    except OSError:
        return offset
    cap.feed(data)
    return offset + len(data)
