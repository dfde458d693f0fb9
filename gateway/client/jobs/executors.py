"""What each kind of job executor lets a pool set, and the facts about it the gateway acts on.

An executor has two halves. Its *options model* (here) is what a pool may write under ``executor:``
(Slurm's partition and GRES, Docker's image) plus the kind's capabilities as class variables — facts of
the kind, never settings of a pool. Its *class* (``orchestrator/worker/executors/``, registered there
under the same name) runs the jobs and names this model as its ``options_model``. The gateway validates
pools and imports nothing of the orchestrator, so the half it needs lives here, beside the pools.

A pool's ``executor`` is one of these models, chosen by its ``kind``: a kind's name (``executor:
slurm`` is short for ``{kind: slurm}``), or ``package.module:Class`` for an executor outside the tree,
whose class declares its own options model (docs/jobs.md, "Adding an executor").
"""

from __future__ import annotations

import importlib
import re
from typing import Annotated, Any, ClassVar, Literal, Union

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, SerializeAsAny

# An out-of-tree executor's class, ``package.module:Class``.
DOTTED = r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$"


class ExecutorOptions(BaseModel):
    """The base of every executor's options: its ``kind``, and its capabilities (class variables)."""

    model_config = ConfigDict(extra="forbid")

    kind: str = Field(description="The executor: a registered kind's name, or package.module:Class.")

    allocates_devices: ClassVar[bool] = False
    """True: the executor's scheduler picks each job's devices (Slurm). One worker then serves the whole
    pool, hands no device ids to the job and only counts what it has handed over; the gateway holds no
    node of the pool to its capacity."""
    submits_with: ClassVar[str] = "its scheduler"
    """What that one worker hands every job to, for messages (``sbatch``)."""

    def exec_fields(self, device: str) -> dict[str, Any]:
        """What these options put into each attempt's ``ExecSpec`` (the worker's, in
        ``orchestrator/worker/executors/base.py``): themselves as ``options``, plus what a kind's
        executor reads from fields of its own."""
        return {"options": self}

    def __eq__(self, other: object) -> bool:
        # A pool written ``executor: docker`` reads back equal to "docker"; what a kind does is decided
        # by its capabilities above, never by comparing names.
        if isinstance(other, str):
            return self.kind == other
        return super().__eq__(other)

    __hash__ = None  # type: ignore[assignment]  # mutable, like every pydantic model


class LocalOptions(ExecutorOptions):
    """The harness as a subprocess on the worker's machine, in the one sandbox. Nothing to set."""

    kind: Literal["local"] = "local"


class DockerOptions(ExecutorOptions):
    """A container per job attempt (CPU share and memory: the pool's ``limits``)."""

    kind: Literal["docker"] = "docker"
    image: str = Field("kswarm/empty", description="Image; host binaries are bind-mounted read-only.")

    def exec_fields(self, device: str) -> dict[str, Any]:
        return {**super().exec_fields(device), "image": self.image}


class SlurmOptions(ExecutorOptions):
    """``sbatch`` per job; Slurm allocates the devices (GRES) on one node of the cluster."""

    kind: Literal["slurm"] = "slurm"
    partition: str | None = Field(None, description="Partition; default: the cluster's default.")
    gres: str | None = Field(None, description="GRES name; default gpu (cuda) or npu (npu).")

    allocates_devices: ClassVar[bool] = True
    submits_with: ClassVar[str] = "sbatch"

    def gres_name(self, device: str) -> str:
        return self.gres or ("npu" if device == "npu" else "gpu")

    def exec_fields(self, device: str) -> dict[str, Any]:
        return {**super().exec_fields(device), "gres": self.gres_name(device), "partition": self.partition}


# Every kind in the tree: its name -> its options model. The worker's classes register under the same
# names (orchestrator/worker/executors/__init__.py); a test keeps the two in step.
EXECUTOR_OPTIONS: dict[str, type[ExecutorOptions]] = {
    "local": LocalOptions,
    "docker": DockerOptions,
    "slurm": SlurmOptions,
}


def load_dotted(path: str, what: str) -> Any:
    """The object that ``package.module:Name`` names; a ValueError saying what is wrong otherwise."""
    if not re.match(DOTTED, path):
        raise ValueError(f"{what} {path!r}: not a package.module:Class path")
    module_name, _, attr = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"{what} {path!r}: cannot import {module_name}: {exc}") from None
    try:
        return getattr(module, attr)
    except AttributeError:
        raise ValueError(f"{what} {path!r}: {module_name} has no {attr}") from None


def options_model(kind: str) -> type[ExecutorOptions]:
    """The options model of ``kind``: a registered one, or the one an out-of-tree class declares."""
    model = EXECUTOR_OPTIONS.get(kind)
    if model is not None:
        return model
    names = ", ".join(EXECUTOR_OPTIONS)
    if ":" not in kind:
        raise ValueError(f"unknown executor {kind!r}: {names}, or package.module:Class for one of your own")
    if kind.startswith(("orchestrator.", "gateway.", "agents.")):
        # The gateway imports nothing of the orchestrator, not even through a pool's settings.
        raise ValueError(f"executor {kind!r}: an executor of the tree is named by its kind: {names}")
    cls = load_dotted(kind, "executor")
    declared = getattr(cls, "options_model", None)
    if not (isinstance(declared, type) and issubclass(declared, ExecutorOptions)):
        raise ValueError(
            f"executor {kind!r} declares no options model: its class needs options_model, a subclass "
            "of gateway.client.jobs.executors.ExecutorOptions"
        )
    return declared


def executor_options(value: Any) -> Any:
    """A pool's ``executor:`` -> its kind's options (validated by that kind's own model)."""
    if isinstance(value, ExecutorOptions):
        return value
    if isinstance(value, str):
        value = {"kind": value}
    if not isinstance(value, dict) or not isinstance(value.get("kind"), str):
        raise ValueError(
            f"executor: a kind's name ({', '.join(EXECUTOR_OPTIONS)}, or package.module:Class) or a "
            "mapping with kind: and that kind's options"
        )
    return options_model(value["kind"]).model_validate(value)


def _schema_input() -> Any:
    """What ``executor:`` takes, for the JSON Schema (``kswarm schema``): a kind's name, an out-of-tree
    class's path, or a registered kind's options, told apart by ``kind``."""
    models: Any = tuple(EXECUTOR_OPTIONS.values())
    names: Any = tuple(EXECUTOR_OPTIONS)
    return Union[  # noqa: UP007 -- built at run time from the registry
        Literal[names],
        Annotated[str, Field(pattern=DOTTED)],
        Annotated[Union[models], Field(discriminator="kind")],  # noqa: UP007
    ]


# The type of a pool's ``executor``: validated by the kind's own model, serialised with its fields.
PoolExecutor = Annotated[
    SerializeAsAny[ExecutorOptions],
    BeforeValidator(executor_options, json_schema_input_type=_schema_input()),
]
