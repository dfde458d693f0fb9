"""Pool configuration: what a pool is and the rules its submissions are checked against (the check itself,
which refuses with the gateway's errors, is ``gateway/jobs/admission.py``).

A pool is a queue plus the machines that serve it: a device type, nodes with device ids, an executor
and rules. A request that breaks a rule is refused at submission with ``RuleViolation``, whose message
names the rule (``allowed_device_counts``, ``single_node``, ``node_capacity``, ``max_timeout_s``,
``kinds``, ``max_queued_per_agent``). ``max_running_per_agent`` is not a refusal: extra jobs wait.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import AliasChoices, BaseModel, ConfigDict, Field, model_validator

from gateway.client.jobs.executors import ExecutorOptions, LocalOptions, PoolExecutor, options_model
from gateway.client.jobs.models import SubmittableKind

# The task catalogue's trusted task definitions (docs/tasks.md).
CATALOGUE_TASKS = Path(__file__).resolve().parents[2] / "tasks" / "catalogue" / "tasks"
DeviceType = Literal["cpu", "cuda", "npu"]
ALL_KINDS: tuple[SubmittableKind, ...] = ("verify", "bench")  # a pool's kinds unless it names them
VISIBLE_DEVICES_VAR: dict[str, str | None] = {
    "cpu": None,
    "cuda": "CUDA_VISIBLE_DEVICES",
    "npu": "ASCEND_RT_VISIBLE_DEVICES",
}
# Executor options that earlier versions took at the pool's top level, with their defaults there: still
# read (folded into ``executor:``), and a default one is dropped where the pool's kind has no such option
# (an old dump wrote all three for every pool).
FLAT_EXECUTOR_OPTIONS: dict[str, str | None] = {"gres": None, "partition": None, "image": "kswarm/empty"}


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class NodeConfig(_Model):
    """One machine of a pool and the devices it offers (CPU pools: job slots)."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$", description="Node name (Slurm node, host, 'local').")
    devices: list[int] = Field(min_length=1, description="Device ids on the node, e.g. 0..7 (cpu: slot ids).")


class PoolRules(_Model):
    """What a pool admits and how it shares itself between agents."""

    allowed_device_counts: list[int] | None = Field(
        None, description="Device counts a job may ask for on its node, e.g. [8] = exactly 8 cards."
    )
    max_running_per_agent: int = Field(2, ge=1, description="Jobs of one agent running at once; more wait.")
    max_queued_per_agent: int = Field(50, ge=1, description="Jobs of one agent waiting; more are refused.")
    reproduction_priority: bool = Field(True, description="Review-reproduction jobs go before others.")
    max_timeout_s: int = Field(3600, ge=1, description="Longest wall-clock limit a job may ask for.")
    kinds: list[SubmittableKind] = Field(
        default_factory=lambda: list(ALL_KINDS), description="Job kinds accepted (cpu: verify only)."
    )


class JobLimits(_Model):
    """Limits applied to one job's process tree by the executors."""

    memory_bytes: int = Field(16 << 30, ge=64 << 20, description="Address space (rlimit AS / cgroup).")
    cpu_time_s: int | None = Field(None, ge=1, description="CPU seconds (RLIMIT_CPU); default timeout x 2.")
    nofile: int = Field(1024, ge=64, description="Open files (RLIMIT_NOFILE).")
    nproc: int = Field(4096, ge=16, description="Processes/threads (RLIMIT_NPROC, docker pids_limit).")
    file_bytes: int = Field(1 << 30, ge=1 << 20, description="Largest file a job may write (RLIMIT_FSIZE).")
    output_bytes: int = Field(256 << 10, ge=1024, description="Output kept (stdout+stderr); the rest is cut.")
    cpus: float = Field(2.0, gt=0, description="CPU share for containers (docker nano_cpus).")


def _default_nodes(data: dict[str, Any]) -> list[NodeConfig]:
    """One node per worker (``local``, ``local-2``, ...), two job slots (devices) each."""
    executor = data.get("executor")
    pool_wide = isinstance(executor, ExecutorOptions) and executor.allocates_devices
    count = 1 if pool_wide else max(1, int(data.get("workers") or 1))
    return [NodeConfig(name="local" if i == 0 else f"local-{i + 1}", devices=[0, 1]) for i in range(count)]


class PoolConfig(_Model):
    """A job pool: device type, nodes, executor, rules, the verification command, and how many worker
    processes ``kswarm up -f`` runs for it. The swarm spec's ``pools:`` entries are this model."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]{0,63}$", description="Pool name, e.g. cpu, gpu-h100.")
    device: DeviceType = Field("cpu", description="Device type the jobs run on.")
    executor: PoolExecutor = Field(
        default_factory=LocalOptions,
        validation_alias=AliasChoices("executor", "kind"),
        description="How workers run a job, with that kind's options: local (the sandbox), docker (a "
        "container per job: image), slurm (sbatch: partition, gres), or package.module:Class for an "
        "executor of your own. A kind's name alone is short for {kind: <name>}; `kind` is accepted as "
        "the same field.",
    )
    workers: int = Field(
        1,
        ge=0,
        le=64,
        description="Worker processes `kswarm up -f` starts and supervises, one per node (the first "
        "`workers` nodes); a pool whose executor allocates devices itself (slurm) has at most 1 (it "
        "submits every job to the scheduler); 0: its workers run elsewhere, started with a token from "
        "`kswarm worker token POOL`.",
    )
    nodes: list[NodeConfig] = Field(
        default_factory=_default_nodes,
        min_length=1,
        description="Nodes and their device ids (CPU pools: job slots; Slurm: what the cluster has); "
        "default: one node per worker, local, local-2, ..., with 2 slots each.",
    )
    default_devices: int | None = Field(None, ge=0, description="Devices when a job names none.")
    timeout_s: int = Field(600, ge=1, description="Default wall-clock limit of one attempt.")
    max_attempts: int = Field(3, ge=1, le=20, description="Deliveries (worker deaths) before dead-lettering.")
    rules: PoolRules = Field(default_factory=PoolRules, description="Admission and sharing rules.")
    limits: JobLimits = Field(default_factory=JobLimits, description="Per-job process limits.")
    harness_pool: str | None = Field(
        None, description="--pool for the harness; default: device (cpu/cuda/npu)."
    )
    harness_command: list[str] | None = Field(
        None,
        description="Command template instead of the real harness (tests); fields {python} {task_dir} "
        "{candidate} {pool} {out} {timeout} {kind}.",
    )
    tasks_dir: Path | None = Field(
        None,
        description="Trusted task definitions; default: the task catalogue (gateway/tasks/catalogue/tasks).",
    )

    @model_validator(mode="before")
    @classmethod
    def _flat_executor_options(cls, data: Any) -> Any:
        """``executor: slurm`` with ``partition:``/``gres:``/``image:`` beside it (the earlier shape):
        those keys move under ``executor:``."""
        if not isinstance(data, dict) or not any(k in data for k in FLAT_EXECUTOR_OPTIONS):
            return data
        data = dict(data)
        key = "kind" if "kind" in data and "executor" not in data else "executor"
        executor = data.get(key, "local")
        if isinstance(executor, str):
            executor = {"kind": executor}
        if not isinstance(executor, dict) or not isinstance(executor.get("kind"), str):
            return data  # the executor's own validation says what is wrong
        executor = dict(executor)
        fields = options_model(executor["kind"]).model_fields
        for name, default in FLAT_EXECUTOR_OPTIONS.items():
            if name not in data:
                continue
            value = data.pop(name)
            if name in executor:
                raise ValueError(f"{name} is given twice: beside executor: and under it")
            if name in fields:
                executor[name] = value
            elif value != default:
                raise ValueError(
                    f"{name} is not an option of the {executor['kind']} executor "
                    f"(its options: {', '.join(f for f in fields if f != 'kind') or 'none'})"
                )
        data[key] = executor
        return data

    @model_validator(mode="after")
    def _consistent(self) -> PoolConfig:
        if self.device == "cpu" and "rules" not in self.model_fields_set:
            self.rules = PoolRules(allowed_device_counts=[1], kinds=["verify"])
        names = [n.name for n in self.nodes]
        if len(set(names)) != len(names):
            raise ValueError(f"pool {self.name}: node names repeat")
        executor = self.executor
        if executor.allocates_devices and self.workers > 1:
            raise ValueError(
                f"pool {self.name}: a {executor.kind} pool has one worker (it submits every job with "
                f"{executor.submits_with}); workers: {self.workers}"
            )
        if not executor.allocates_devices and self.workers > len(self.nodes):
            raise ValueError(
                f"pool {self.name}: workers: {self.workers} needs {self.workers} nodes (one worker serves "
                f"one node); it has {len(self.nodes)}: {', '.join(names)}"
            )
        return self

    def worker_nodes(self) -> list[str | None]:
        """The node each of the pool's ``workers`` serves (None: the whole pool, for an executor that
        allocates devices itself)."""
        if self.executor.allocates_devices:
            return [None] * self.workers
        return [n.name for n in self.nodes[: self.workers]]

    def served_node(self, node: str | None) -> str:
        """The node a worker asked to serve ``node`` (None: the default) serves and holds its lease on:
        that node, the pool's first by default; for an executor that allocates devices itself, the whole
        pool, named after the executor's kind."""
        if self.executor.allocates_devices:
            return node or self.executor.kind
        return self.node(node).name

    @property
    def node_capacity(self) -> int:
        return max(len(n.devices) for n in self.nodes)

    @property
    def visible_devices_var(self) -> str | None:
        return VISIBLE_DEVICES_VAR[self.device]

    def harness_pool_name(self) -> str:
        return self.harness_pool or self.device

    @property
    def on_device(self) -> bool:
        """Whether a pass here can prove ``device-verified``: a cuda/npu pool whose harness runs on the
        device, not the cpu interpreter (a device pool with ``harness_pool: cpu`` screens at best)."""
        return self.device != "cpu" and self.harness_pool_name() != "cpu"

    def task_root(self) -> Path:
        return (self.tasks_dir or CATALOGUE_TASKS).resolve()

    def node(self, name: str | None) -> NodeConfig:
        if name is None:
            return self.nodes[0]
        for node in self.nodes:
            if node.name == name:
                return node
        raise ValueError(f"pool {self.name} has no node {name!r}; nodes: {[n.name for n in self.nodes]}")

    def default_device_count(self) -> int:
        if self.default_devices is not None:
            return self.default_devices
        if self.rules.allowed_device_counts:
            return min(self.rules.allowed_device_counts)
        return 1

    def unit(self) -> str:
        """What the pool's devices are called in a message: slots (cpu) or devices."""
        return "slots" if self.device == "cpu" else "devices"


def worker_principal(pool: str) -> str:
    """The worker principal of a pool (``worker-<pool>``); a pool name that is no principal name
    (``_``, too long) gets a short hash, so that two pools never share one."""
    if re.fullmatch(r"[a-z0-9-]{1,32}", pool):
        return f"worker-{pool}"
    tag = hashlib.sha256(pool.encode()).hexdigest()[:6]
    return f"worker-{re.sub(r'[^a-z0-9-]', '-', pool)[:24].strip('-')}-{tag}"


def default_pools() -> list[PoolConfig]:
    return [PoolConfig(name="cpu")]


def load_pools(path: Path) -> list[PoolConfig]:
    """Pools from a YAML or JSON file: a list, or a mapping with ``pools:`` (a swarm.yaml works)."""
    raw = (
        yaml.safe_load(path.read_text()) if path.suffix in (".yaml", ".yml") else json.loads(path.read_text())
    )
    if isinstance(raw, dict):
        raw = raw.get("pools", [])
    if not isinstance(raw, list):
        raise ValueError(f"{path}: expected a list of pools or a mapping with 'pools'")
    return [PoolConfig.model_validate(p) for p in raw]
