"""Executors run one job attempt: ``local`` (subprocess), ``docker`` (container), ``slurm`` (sbatch).

``EXECUTORS`` maps a kind's name to its class (``module:Class``, imported only when asked for); the
kind's options model and capabilities are in ``gateway/client/jobs/executors.py`` under the same name.
``load_executor`` also takes ``package.module:Class`` for an executor outside the tree: its class
declares its own options model, and no file here changes (docs/jobs.md, "Adding an executor").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway.client.jobs.executors import ExecutorOptions, load_dotted
from orchestrator.worker.executors.base import ExecOutcome, ExecSpec, Executor

if TYPE_CHECKING:  # mypy holds every class of the tree to the protocol
    from orchestrator.worker.executors.docker import DockerExecutor
    from orchestrator.worker.executors.local import LocalExecutor
    from orchestrator.worker.executors.slurm import SlurmExecutor

    _IN_TREE: tuple[type[Executor], ...] = (LocalExecutor, DockerExecutor, SlurmExecutor)

EXECUTORS: dict[str, str] = {
    "local": "orchestrator.worker.executors.local:LocalExecutor",
    "docker": "orchestrator.worker.executors.docker:DockerExecutor",
    "slurm": "orchestrator.worker.executors.slurm:SlurmExecutor",
}


def load_executor(kind: str) -> type[Executor]:
    """The class of ``kind``: a registered name, or ``package.module:Class``; a ValueError that says
    what is wrong otherwise (unknown name, no such module or class, not an executor)."""
    path = EXECUTORS.get(kind, kind)
    if ":" not in path:
        raise ValueError(
            f"unknown executor {kind!r}: {', '.join(EXECUTORS)}, or package.module:Class for one of your own"
        )
    cls = load_dotted(path, "executor")
    options = getattr(cls, "options_model", None)
    if not (
        isinstance(cls, type)
        and callable(getattr(cls, "run", None))
        and isinstance(options, type)
        and issubclass(options, ExecutorOptions)
    ):
        raise ValueError(
            f"executor {kind!r} is not an executor: a class with kind, options_model (a subclass of "
            "gateway.client.jobs.executors.ExecutorOptions), unavailable, isolation() and run()"
        )
    return cls


def make_executor(options: ExecutorOptions | str) -> Executor:
    """An executor for a pool's options (or a kind's name); its options reach it with every attempt
    (``ExecSpec.options``)."""
    kind = options if isinstance(options, str) else options.kind
    return load_executor(kind)()


__all__ = ["EXECUTORS", "ExecOutcome", "ExecSpec", "Executor", "load_executor", "make_executor"]
