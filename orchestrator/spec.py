"""The swarm spec (``swarm.yaml``): pydantic models, a line-aware loader and agent expansion.

Errors name the field and the line it is on (``swarm.yaml:12: agents[1].count: ...``): the YAML is
composed into nodes first, so every mapping key and list item keeps its start line, and pydantic's
error locations are mapped back onto them.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from gateway.llm.config import BudgetSettings

NAME_RE = re.compile(r"^[a-z][a-z0-9-]{0,38}$")  # the gateway's principal names
RESERVED = {"all", "here", "everyone", "operator"}
SIZE_RE = re.compile(r"^(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?$", re.IGNORECASE)
# Never accepted in a spec's env: the agent holds only its own token; the gateway injects model keys.
FORBIDDEN_ENV = {"ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "KSWARM_TOKEN", "KSWARM_OPERATOR_TOKEN"}


class SpecError(ValueError):
    """A swarm.yaml that does not parse or validate; the message lists ``file:line: field: problem``."""


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
        1.0, gt=0, description="CPU share (Docker nano_cpus); ignored by the process backend."
    )
    pids: int = Field(256, ge=8, description="Maximum processes/threads (RLIMIT_NPROC or pids cgroup).")
    cpu_time_s: int | None = Field(None, ge=1, description="CPU-seconds limit (RLIMIT_CPU); none by default.")
    disk_files: int = Field(4096, ge=64, description="Open file limit (RLIMIT_NOFILE).")

    @field_validator("memory")
    @classmethod
    def _memory(cls, value: int | str) -> int | str:
        if parse_size(value) < 64 * 1024 * 1024:
            raise ValueError("memory below 64m cannot run the agent")
        return value

    def memory_bytes(self) -> int:
        return parse_size(self.memory)


class RuntimeOptions(_Model):
    """How one agent's process is launched."""

    command: list[str] | None = Field(None, description="Argv; default: the Python interpreter -m agents.")
    env: dict[str, str] = Field(
        default_factory=dict, description="Extra environment (an allow-list adds it)."
    )
    heartbeat_s: float = Field(5.0, gt=0, description="Seconds between the agent's heartbeats.")
    kind: Literal["loop", "claude-code"] = Field(
        "loop", description="loop = kswarm's agent loop; claude-code = the Claude Code CLI as the agent."
    )

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
    role: str = Field("developer", description="Role named in the prompt (developer, reviewer, lead, ...).")
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
    """A forge repository the swarm works in."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]{0,63}$", description="Repository name.")
    kind: Literal["code", "dataset"] = Field("code", description="dataset = curated accepted kernels.")
    description: str = Field("", description="One line for humans.")
    protected: list[str] = Field(
        default_factory=lambda: ["main"], description="Branches only the gate merges."
    )


class PoolSpec(_Model):
    """A job pool of the swarm (the gateway's job runner serves it; docs/jobs.md)."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]{0,63}$", description="Pool (queue) name.")
    kind: Literal["local", "docker", "slurm"] = Field("local", description="Worker backend.")
    device: Literal["cpu", "cuda", "npu"] = Field("cpu", description="Device the jobs run on.")
    workers: int = Field(1, ge=0, description="Worker count (local/docker).")
    cards_per_node: int = Field(0, ge=0, description="Cards per node; a job takes a whole node.")
    timeout_s: int = Field(600, ge=1, description="Longest job.")


class ReviewPolicy(_Model):
    """What the gate requires before merging into the spec's repos (docs/forge.md)."""

    approvals: int = Field(1, ge=0, description="Approvals on the head commit, never by the author.")
    required_checks: list[str] = Field(
        default_factory=lambda: ["kswarm/verify:cpu"],
        description="Status contexts that must be success on the head (workers set kswarm/verify:<pool>).",
    )
    dismiss_on_push: bool = Field(True, description="A new push dismisses earlier approvals.")


class Lifecycle(_Model):
    """Reconcile-loop timing: restarts, crash loops, stalls."""

    reconcile_s: float = Field(1.0, gt=0, description="Seconds between reconcile passes.")
    backoff_base_s: float = Field(1.0, gt=0, description="First restart delay after a crash.")
    backoff_max_s: float = Field(60.0, gt=0, description="Largest restart delay.")
    crash_loop_after: int = Field(5, ge=1, description="Crashes within crash_window_s that mean crash-loop.")
    crash_window_s: float = Field(300.0, gt=0, description="Window for counting crashes.")
    stable_after_s: float = Field(60.0, gt=0, description="Uptime after which the crash count resets.")
    stall_after_s: float = Field(
        120.0, gt=0, description="Silence (no heartbeat) that marks an agent stalled."
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


class SwarmSpec(_Model):
    """A whole swarm: who runs, where they talk, what they work on, and the rules."""

    swarm: str = Field(
        pattern=r"^[a-z][a-z0-9-]{0,38}$", description="Swarm name; e-mails: <agent>@agents.<swarm>."
    )
    backend: Literal["process", "docker"] = Field("process", description="Default runtime backend.")
    defaults: Defaults = Field(default_factory=Defaults, description="Per-agent defaults.")
    agents: list[AgentEntry] = Field(min_length=1, description="Agents, by name or by pattern × count.")
    channels: list[ChannelSpec] = Field(default_factory=list, description="Extra channels.")
    repos: list[RepoSpec] = Field(default_factory=list, description="Forge repositories.")
    pools: list[PoolSpec] = Field(default_factory=lambda: [PoolSpec(name="cpu")], description="Job pools.")
    review: ReviewPolicy = Field(
        default_factory=ReviewPolicy, description="Merge policy of the spec's repos."
    )
    budgets: BudgetSettings = Field(
        default_factory=BudgetSettings, description="Model spend limits, enforced by the gateway's LLM proxy."
    )
    lifecycle: Lifecycle = Field(default_factory=Lifecycle, description="Restart and stall timing.")
    docker: DockerOptions = Field(default_factory=DockerOptions, description="Docker backend options.")
    process: ProcessOptions = Field(default_factory=ProcessOptions, description="Process backend options.")
    source: Path | None = Field(
        None, exclude=True, description="File it was loaded from (set by the loader)."
    )

    @model_validator(mode="after")
    def _unique_names(self) -> SwarmSpec:
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


class AgentSpec(BaseModel):
    """One concrete agent after expansion: what the runtimes get."""

    name: str = Field(description="Agent name.")
    role: str = Field(description="Role.")
    model: str = Field(description="Model id.")
    prompt: str | None = Field(None, description="Prompt template path or text.")
    runtime: RuntimeOptions = Field(description="Launch options.")
    resources: Resources = Field(description="Limits.")


class _ItemError(ValueError):
    """Raised inside validators to point at a location deeper than the validator's own."""

    def __init__(self, loc: tuple[Any, ...], message: str) -> None:
        super().__init__(message)
        self.loc = loc


# -- line-aware loading -------------------------------------------------------------------------


def _construct(node: yaml.Node, loc: tuple[Any, ...], lines: dict[tuple[Any, ...], int]) -> Any:
    """Node tree -> plain data, recording the 1-based start line of every key and item."""
    lines.setdefault(loc, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = yaml.safe_load(yaml.serialize(key_node))
            lines[(*loc, key)] = key_node.start_mark.line + 1
            out[key] = _construct(value_node, (*loc, key), lines)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_construct(item, (*loc, i), lines) for i, item in enumerate(node.value)]
    return yaml.safe_load(yaml.serialize(node))


def _line_of(loc: tuple[Any, ...], lines: dict[tuple[Any, ...], int]) -> int:
    # Pydantic inserts validator names into locations; drop non-data parts and walk up to a known key.
    clean = tuple(p for p in loc if isinstance(p, int) or not str(p).startswith(("function-", "union")))
    while clean and clean not in lines:
        clean = clean[:-1]
    return lines.get(clean, 1)


def _dotted(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def parse_spec(text: str, filename: str = "swarm.yaml") -> SwarmSpec:
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else 1
        raise SpecError(f"{filename}:{line}: not valid YAML: {exc.problem or exc}") from exc
    if node is None or not isinstance(node, yaml.MappingNode):
        raise SpecError(f"{filename}:1: the spec must be a mapping with swarm: and agents:")
    lines: dict[tuple[Any, ...], int] = {}
    data = _construct(node, (), lines)
    try:
        return SwarmSpec.model_validate(data)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            loc = tuple(err["loc"])
            cause = err.get("ctx", {}).get("error")
            if isinstance(cause, _ItemError):
                loc = cause.loc
            msg = err["msg"].removeprefix("Value error, ")
            problems.append(f"{filename}:{_line_of(loc, lines)}: {_dotted(loc)}: {msg}")
        raise SpecError("\n".join(problems)) from None


def load_spec(path: Path) -> SwarmSpec:
    """Load and validate a swarm.yaml; raises SpecError naming the field and line."""
    spec = parse_spec(path.read_text(), str(path))
    spec.source = path.resolve()
    return spec


def template_text() -> str:
    """The commented swarm.yaml that ``kswarm init`` writes."""
    return (Path(__file__).parent / "templates" / "swarm.yaml").read_text()


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
