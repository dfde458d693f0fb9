"""The swarm spec (``swarm.yaml``): the one source of truth for a swarm, checked strictly.

The spec embeds each component's own configuration model, so there is one model per concept and no
translation: ``pools:`` entries are the job runner's ``PoolConfig``, ``review:`` is the review gate's
``ReviewPolicy``, ``budgets:`` is the LLM proxy's ``BudgetSettings``, ``alerts:`` is the monitor's
list of ``AlertTarget``. Every field takes effect or is
refused: unknown keys at every level, keys given twice, a ``role`` that is not one of the roles, a
check that names no pool of the spec, a CPU share the process backend cannot apply.

Errors name the field and the line it is on (``swarm.yaml:12: agents[1].count: ...``): the YAML is
composed into nodes first (``orchestrator.spec.yaml_lines``), so every mapping key and list item keeps its
start line, and pydantic's error locations are mapped back onto them.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

from gateway.client.jobs.pools import PoolConfig
from gateway.counterexamples.settings import CounterexampleRules
from gateway.dataset.rules import DatasetRules
from gateway.forge.gate.evidence import parse_check_context
from gateway.forge.gate.policy import ReviewPolicy
from gateway.llm.config import BudgetSettings
from gateway.monitor.alert_targets import AlertTargets
from gateway.tasks.models import TaskRules
from orchestrator.spec.yaml_lines import Loc, SpecError, compose_with_lines, dotted, line_of

__all__ = ["AgentSpec", "Role", "SpecError", "SwarmSpec", "load_spec", "parse_spec", "template_text"]

NAME_RE = re.compile(r"^[a-z][a-z0-9-]{0,38}$")  # the gateway's principal names
RESERVED = {"all", "here", "everyone", "operator"}
SIZE_RE = re.compile(r"^(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?$", re.IGNORECASE)
# Never accepted in a spec's env: the agent holds only its own token; the gateway injects model keys.
FORBIDDEN_ENV = {"ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "KSWARM_TOKEN", "KSWARM_OPERATOR_TOKEN"}
Role = Literal["lead", "developer", "reviewer", "red-team"]
RuntimeKind = Literal["loop", "claude-code"]
DEFAULT_CPUS = 1.0
MIN_DISK = 32 * 1024 * 1024  # an ext4 image smaller than this holds little more than its journal
# Keys of earlier spec versions: refused like any unknown key, with what to write instead.
RENAMED = {
    ("review", "approvals"): "renamed required_approvals",
    ("review", "dismiss_on_push"): "not a setting: a new push always dismisses earlier approvals",
    ("pools", "cards_per_node"): "describe the nodes instead: nodes: [{name: node0, devices: [0, 1, ...]}]",
    ("repos", "protected"): "moved into the repo's policy: review: {protected_branches: [main]}",
}


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a typo is an error, not a silently ignored key


def parse_size(value: int | str) -> int:
    """``2g``, ``512m``, ``1.5GiB`` or a byte count -> bytes."""
    if isinstance(value, int):
        return value
    match = SIZE_RE.match(value.strip())
    if not match:
        raise ValueError(f"bad size {value!r}: use bytes or a number with k, m, g or t (e.g. 2g)")
    number, unit = float(match.group(1)), match.group(2).lower()
    return int(number * 1024 ** "_kmgt".index(unit or "_"))


class Resources(_Model):
    """Limits applied to one agent's runtime."""

    memory: int | str = Field("2g", description="Memory limit (rlimit AS for processes, cgroup for Docker).")
    cpus: float = Field(
        DEFAULT_CPUS, gt=0, description="CPU share (Docker nano_cpus); the docker backend only."
    )
    pids: int = Field(256, ge=8, description="Maximum processes/threads (RLIMIT_NPROC or pids cgroup).")
    cpu_time_s: int | None = Field(None, ge=1, description="CPU-seconds limit (RLIMIT_CPU); none by default.")
    disk_files: int = Field(4096, ge=64, description="Open file limit (RLIMIT_NOFILE).")
    disk: int | str = Field(
        "1g",
        description="Disk bound of the agent's dirs (home, work, memory, history): a loop-mounted image "
        "of this size where the orchestrator may mount, else a watchdog; RLIMIT_FSIZE for any one file.",
    )

    @field_validator("memory")
    @classmethod
    def _memory(cls, value: int | str) -> int | str:
        if parse_size(value) < 64 * 1024 * 1024:
            raise ValueError("memory below 64m cannot run the agent")
        return value

    @field_validator("disk")
    @classmethod
    def _disk(cls, value: int | str) -> int | str:
        if parse_size(value) < MIN_DISK:
            raise ValueError(f"disk {value!r} is below the smallest bound, 32m (e.g. disk: 1g)")
        return value

    def memory_bytes(self) -> int:
        return parse_size(self.memory)

    def disk_bytes(self) -> int:
        return parse_size(self.disk)


class RuntimeOptions(_Model):
    """How one agent's process is launched. ``runtime: claude-code`` is short for ``{kind: claude-code}``."""

    command: list[str] | None = Field(None, description="Argv; default: the Python interpreter -m agents.")
    env: dict[str, str] = Field(
        default_factory=dict, description="Extra environment (an allow-list adds it)."
    )
    heartbeat_s: float = Field(5.0, gt=0, description="Seconds between the agent's heartbeats.")
    kind: RuntimeKind = Field(
        "loop", description="loop = kswarm's agent loop; claude-code = the Claude Code CLI as the agent."
    )

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        if isinstance(data, str):
            if data not in get_args(RuntimeKind):
                choices = ", ".join(get_args(RuntimeKind))
                raise ValueError(f"runtime {data!r} is not one of {choices} (or a mapping with kind:)")
            return {"kind": data}
        return data

    @field_validator("env")
    @classmethod
    def _env(cls, env: dict[str, str]) -> dict[str, str]:
        bad = sorted(k for k in env if k in FORBIDDEN_ENV)
        if bad:
            raise ValueError(f"{', '.join(bad)} must not be given to agents (the gateway holds secrets)")
        return env


class AgentEntry(_Model):
    """One agent (``name``) or a family of them (``pattern`` with ``{i}`` and ``count``)."""

    name: str | None = Field(None, description="The agent's name: principal, git user.name, chat handle.")
    pattern: str | None = Field(None, description="Name pattern with {i}, e.g. dev-{i}; needs count.")
    count: int | None = Field(None, ge=1, le=512, description="How many agents the pattern makes.")
    start: int = Field(1, ge=0, description="First value of {i}.")
    role: Role = Field(
        "developer",
        description="lead (may post tasks on the board), developer, reviewer or red-team (attacks accepted "
        "kernels with counterexamples): the agent's prompt.",
    )
    model: str | None = Field(None, description="Model id; default: defaults.model.")
    prompt: str | None = Field(None, description="Prompt template path (relative to swarm.yaml) or text.")
    runtime: RuntimeOptions | None = Field(None, description="Launch options; default: defaults.runtime.")
    resources: Resources | None = Field(None, description="Limits; default: defaults.resources.")

    @model_validator(mode="after")
    def _one_of(self) -> AgentEntry:
        if (self.name is None) == (self.pattern is None):
            raise ValueError("give exactly one of name or pattern")
        if self.pattern is not None:
            if "{i}" not in self.pattern:
                raise ValueError("pattern needs {i}, e.g. dev-{i}")
            if self.count is None:
                raise ValueError("pattern needs count")
        elif self.count is not None:
            raise ValueError("count goes with pattern, not name")
        return self

    def names(self) -> list[str]:
        if self.name is not None:
            return [self.name]
        assert self.pattern is not None and self.count is not None
        return [self.pattern.replace("{i}", str(i)) for i in range(self.start, self.start + self.count)]


class Defaults(_Model):
    """Values every agent gets unless its entry says otherwise."""

    model: str = Field("scripted", description="Model id; 'scripted' is the offline deterministic model.")
    runtime: RuntimeOptions = Field(default_factory=RuntimeOptions, description="Default launch options.")
    resources: Resources = Field(default_factory=Resources, description="Default limits.")


class ChannelSpec(_Model):
    """A chat channel created at start-up (general, ops and reviews always exist)."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]{0,63}$", description="Channel name.")
    topic: str = Field("", description="Channel topic.")


class RepoSpec(_Model):
    """A forge repository the swarm works in, created under the swarm's name (``<swarm>/<name>``)."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]{0,63}$", description="Repository name.")
    kind: Literal["code", "dataset"] = Field(
        "code",
        description="dataset = curated accepted kernels: the gate's dataset rules apply to it, and the task "
        "board lives in it.",
    )
    description: str = Field("", description="One line for humans (kswarm validate, the banner).")
    review: ReviewPolicy | None = Field(
        None, description="This repo's merge policy (the gate's model); default: the swarm's review."
    )


class Lifecycle(_Model):
    """Reconcile-loop timing: restarts, crash loops, stalls (agents and job workers alike)."""

    reconcile_s: float = Field(1.0, gt=0, description="Seconds between reconcile passes.")
    backoff_base_s: float = Field(1.0, gt=0, description="First restart delay after a crash.")
    backoff_max_s: float = Field(60.0, gt=0, description="Largest restart delay.")
    crash_loop_after: int = Field(5, ge=1, description="Crashes within crash_window_s that mean crash-loop.")
    crash_window_s: float = Field(300.0, gt=0, description="Window for counting crashes.")
    stable_after_s: float = Field(60.0, gt=0, description="Uptime after which the crash count resets.")
    stall_after_s: float = Field(
        120.0, gt=0, description="Silence (no heartbeat) that marks an agent stalled."
    )
    disk_check_s: float = Field(
        10.0,
        gt=0,
        description="Seconds between measurements of an agent's disk use where no mount bounds it "
        "(the watchdog; docs/orchestrator.md).",
    )


class DockerOptions(_Model):
    """Docker-backend settings."""

    image: str = Field(
        "kswarm/empty", description="Agent image; production: built from infra/agent.Dockerfile."
    )
    host_shared: bool = Field(True, description="Run the host's Python and code via read-only bind mounts.")
    uid_base: int | None = Field(
        None, ge=1000, description="First agent uid (agent k: uid_base + k); unset: a block per home."
    )


class ProcessOptions(_Model):
    """Process-backend settings."""

    uid_base: int | None = Field(
        None, ge=1000, description="First agent uid as root (agent k: uid_base + k); unset: a block per home."
    )
    isolation: Literal["auto", "uid", "userns", "none"] = Field(
        "auto", description="auto: uid when root, else user namespaces where allowed, else none (warned)."
    )


def _default_pools() -> list[PoolConfig]:
    return [PoolConfig(name="cpu")]


def _default_review(data: dict[str, Any]) -> ReviewPolicy:
    """One approval and a passing verify job on the spec's first pool, for every changed kernel."""
    pools: list[PoolConfig] = data.get("pools") or []
    return ReviewPolicy(required_checks=[f"kswarm/verify:{pools[0].name}"] if pools else [])


class SwarmSpec(_Model):
    """A whole swarm: who runs, where they talk, what they work on, and the rules."""

    swarm: str = Field(
        pattern=r"^[a-z][a-z0-9-]{0,38}$",
        description="Swarm name; the forge org of its repos; e-mails: <agent>@agents.<swarm>.",
    )
    backend: Literal["process", "docker"] = Field("process", description="Default runtime backend.")
    defaults: Defaults = Field(default_factory=Defaults, description="Per-agent defaults.")
    agents: list[AgentEntry] = Field(min_length=1, description="Agents, by name or by pattern × count.")
    channels: list[ChannelSpec] = Field(default_factory=list, description="Extra channels.")
    repos: list[RepoSpec] = Field(default_factory=list, description="Forge repositories.")
    pools: list[PoolConfig] = Field(
        default_factory=_default_pools,
        description="Job pools (the job runner's PoolConfig): where kernels are verified, and the "
        "worker processes `kswarm up -f` runs for each.",
    )
    review: ReviewPolicy = Field(
        default_factory=_default_review,
        description="The gate's merge policy of the spec's repos (a repo's own review: wins).",
    )
    budgets: BudgetSettings = Field(
        default_factory=BudgetSettings, description="Model spend limits, enforced by the gateway's LLM proxy."
    )
    tasks: TaskRules = Field(
        default_factory=TaskRules, description="The task board's rules for agents (claims, done)."
    )
    counterexamples: CounterexampleRules = Field(
        default_factory=CounterexampleRules,
        description="What red-team agents may attack (targets: merged | merged-and-open) and how many "
        "counterexamples one agent may have pending.",
    )
    alerts: AlertTargets = Field(
        default_factory=list,
        description="Where the monitor pushes Attention items as they appear (webhook, Slack): the "
        "monitor's own AlertTarget list.",
    )
    dataset: DatasetRules = Field(
        default_factory=DatasetRules,
        description="What `kswarm dataset build` publishes: the rejected records' timeline excerpts "
        "(opt-out) and their bound.",
    )
    lifecycle: Lifecycle = Field(default_factory=Lifecycle, description="Restart and stall timing.")
    docker: DockerOptions = Field(default_factory=DockerOptions, description="Docker backend options.")
    process: ProcessOptions = Field(default_factory=ProcessOptions, description="Process backend options.")
    _source: Path | None = PrivateAttr(None)

    @property
    def source(self) -> Path | None:
        """The file it was loaded from (set by the loader), if any."""
        return self._source

    @source.setter
    def source(self, path: Path | None) -> None:
        self._source = path

    @model_validator(mode="after")
    def _coherent(self) -> SwarmSpec:
        seen: set[str] = set()
        for i, entry in enumerate(self.agents):
            for name in entry.names():
                if not NAME_RE.match(name) or name in RESERVED:
                    raise _ItemError(
                        ("agents", i), f"bad agent name {name!r}: a-z, 0-9, '-', max 39, not reserved"
                    )
                if name in seen:
                    raise _ItemError(("agents", i), f"agent {name!r} is defined twice")
                seen.add(name)
        for name in self.budgets.agents:
            if name not in seen:
                raise _ItemError(
                    ("budgets", "agents", name),
                    f"no agent {name!r} in this spec (an agent added later gets its own budget with "
                    f"PUT /api/usage/{name}/budget)",
                )
        _unique([p.name for p in self.pools], "pools", "pool")
        _unique([r.name for r in self.repos], "repos", "repo")
        pools = [p.name for p in self.pools]
        policies: list[tuple[Loc, ReviewPolicy, bool]] = [(("review",), self.review, False)]
        policies += [
            (("repos", i, "review"), r.review, r.kind == "dataset")
            for i, r in enumerate(self.repos)
            if r.review is not None
        ]
        for loc, policy, is_dataset in policies:
            if policy.dataset and not is_dataset:
                raise _ItemError((*loc, "dataset"), "a repo is a dataset by its kind: dataset, not here")
            for check in policy.required_checks:
                parsed = parse_check_context(check)
                if parsed is not None and parsed[1] not in pools:
                    raise _ItemError(
                        (*loc, "required_checks"),
                        f"{check} names no pool of this spec (pools: {', '.join(pools) or 'none'}): "
                        "no job could ever set it",
                    )
            device_pools = {p.name for p in self.pools if p.on_device}
            named = {parsed[1] for c in policy.required_checks if (parsed := parse_check_context(c))}
            if policy.min_evidence == "device-verified" and not named & device_pools:
                raise _ItemError(
                    (*loc, "min_evidence"),
                    "device-verified needs a required check on a device pool (cuda/npu, harness not on "
                    "the cpu), e.g. kswarm/verify:<pool>; this policy's pools: "
                    f"{', '.join(sorted(named)) or 'none'}: no kernel could ever meet it",
                )
        if self.backend == "process":
            entries: list[tuple[Loc, Resources | None]] = [
                (("defaults", "resources"), self.defaults.resources)
            ]
            entries += [(("agents", i, "resources"), a.resources) for i, a in enumerate(self.agents)]
            for loc, res in entries:
                if res is not None and res.cpus != DEFAULT_CPUS:
                    raise _ItemError(
                        (*loc, "cpus"),
                        "the process backend cannot limit a CPU share (backend: docker can); "
                        "cpu_time_s limits CPU seconds",
                    )
        return self

    @property
    def name(self) -> str:
        """The swarm's name (alias of ``swarm``)."""
        return self.swarm

    def expand(self) -> list[AgentSpec]:
        """The concrete agents, in spec order, with defaults applied; index is stable in that order."""
        out: list[AgentSpec] = []
        for entry in self.agents:
            for name in entry.names():
                out.append(
                    AgentSpec(
                        name=name,
                        role=entry.role,
                        model=entry.model or self.defaults.model,
                        prompt=entry.prompt,
                        runtime=entry.runtime or self.defaults.runtime,
                        resources=entry.resources or self.defaults.resources,
                    )
                )
        return out

    def repo_policy(self, repo: RepoSpec) -> ReviewPolicy:
        """The policy the gate gets for ``repo``: its own review or the swarm's, dataset by its kind."""
        return (repo.review or self.review).model_copy(update={"dataset": repo.kind == "dataset"})

    def dataset_repo(self) -> str | None:
        """``<swarm>/<name>`` of the spec's dataset repo (the task board's), if it has one."""
        return next((f"{self.swarm}/{r.name}" for r in self.repos if r.kind == "dataset"), None)

    def leads(self) -> list[str]:
        return [a.name for a in self.expand() if a.role == "lead"]


class AgentSpec(BaseModel):
    """One concrete agent after expansion: what the runtimes get."""

    name: str = Field(description="Agent name.")
    role: Role = Field(description="Role.")
    model: str = Field(description="Model id.")
    prompt: str | None = Field(None, description="Prompt template path or text.")
    runtime: RuntimeOptions = Field(description="Launch options.")
    resources: Resources = Field(description="Limits.")


class _ItemError(ValueError):
    """Raised inside validators to point at a location deeper than the validator's own."""

    def __init__(self, loc: Loc, message: str) -> None:
        super().__init__(message)
        self.loc = loc


def _unique(names: list[str], section: str, what: str) -> None:
    for i, name in enumerate(names):
        if name in names[:i]:
            raise _ItemError((section, i), f"{what} {name!r} is defined twice")


# -- loading ------------------------------------------------------------------------------------


def _hint(loc: Loc) -> str | None:
    section = loc[0] if loc else None
    return RENAMED.get((str(section), str(loc[-1]))) if len(loc) >= 2 else None


def parse_spec(text: str, filename: str = "swarm.yaml") -> SwarmSpec:
    """Validate a spec's text; ``SpecError`` lists every problem as ``file:line: field: problem``."""
    data, lines = compose_with_lines(text, filename)
    if not isinstance(data, dict):
        raise SpecError([f"{filename}:1: the spec must be a mapping with swarm: and agents:"])
    try:
        return SwarmSpec.model_validate(data, extra="forbid")  # unknown keys in embedded models too
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            if err["type"] == "default_factory_not_called":
                continue  # a default that depends on a field with its own error: that error says it
            loc = tuple(err["loc"])
            cause = err.get("ctx", {}).get("error")
            if isinstance(cause, _ItemError):
                loc = cause.loc
            msg = err["msg"].removeprefix("Value error, ")
            hint = _hint(tuple(p for p in loc if not isinstance(p, int)))
            if err["type"] == "extra_forbidden" and hint:
                msg += f" ({hint})"
            problems.append(f"{filename}:{line_of(loc, lines)}: {dotted(loc)}: {msg}")
        raise SpecError(problems) from None


def load_spec(path: Path) -> SwarmSpec:
    """Load and validate a swarm.yaml; raises SpecError naming the field and line."""
    spec = parse_spec(path.read_text(), str(path))
    spec.source = path.resolve()
    return spec


def spec_schema() -> dict[str, Any]:
    """The JSON Schema of ``swarm.yaml`` (``kswarm schema``, for editors): unknown keys are refused at
    every level, and ``runtime:`` may be a kind's name."""
    schema = SwarmSpec.model_json_schema(mode="validation")

    def close(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("type") == "object" and "properties" in node:
                node.setdefault("additionalProperties", False)
            for value in node.values():
                close(value)
        elif isinstance(node, list):
            for value in node:
                close(value)

    close(schema)
    defs = schema.get("$defs", {})
    if "RuntimeOptions" in defs:
        runtime = defs["RuntimeOptions"]
        defs["RuntimeOptions"] = {
            "anyOf": [runtime, {"enum": list(get_args(RuntimeKind))}],
            "title": runtime.get("title", "RuntimeOptions"),
            "description": runtime.get("description", ""),
        }
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    return schema


def template_text() -> str:
    """The commented swarm.yaml that ``kswarm init`` writes."""
    return (Path(__file__).parents[1] / "templates" / "swarm.yaml").read_text()


def agent_models(home: Path | None) -> dict[str, str]:
    """Agent -> model from the running swarm's spec (``$KSWARM_HOME/swarm/swarm.json``), if any."""
    if home is None:
        return {}
    try:
        info = json.loads((home / "swarm" / "swarm.json").read_text())
        spec = SwarmSpec.model_validate(info.get("spec") or {})
        return {a.name: a.model for a in spec.expand()}
    except (OSError, ValueError, TypeError):
        return {}
