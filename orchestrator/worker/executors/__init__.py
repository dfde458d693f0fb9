"""Executors run one job attempt: ``local`` (subprocess), ``docker`` (container), ``slurm`` (sbatch)."""

from __future__ import annotations

from orchestrator.worker.executors.base import ExecOutcome, ExecSpec, Executor


def make_executor(kind: str) -> Executor:
    if kind == "local":
        from orchestrator.worker.executors.local import LocalExecutor

        return LocalExecutor()
    if kind == "docker":
        from orchestrator.worker.executors.docker import DockerExecutor

        return DockerExecutor()
    if kind == "slurm":
        from orchestrator.worker.executors.slurm import SlurmExecutor

        return SlurmExecutor()
    raise ValueError(f"unknown executor {kind!r}: local, docker or slurm")


__all__ = ["ExecOutcome", "ExecSpec", "Executor", "make_executor"]
