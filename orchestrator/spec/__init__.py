"""The swarm spec (``swarm.yaml``): its models (``models.py``) and the line-keeping YAML reader
(``yaml_lines.py``). Everything the rest of the tree uses is importable from ``orchestrator.spec``."""

from orchestrator.spec.models import (
    AgentEntry,
    AgentSpec,
    ChannelSpec,
    Defaults,
    DockerOptions,
    Lifecycle,
    ProcessOptions,
    RepoSpec,
    Resources,
    Role,
    RuntimeKind,
    RuntimeOptions,
    SwarmSpec,
    agent_models,
    load_spec,
    parse_size,
    parse_spec,
    spec_schema,
    template_text,
)
from orchestrator.spec.yaml_lines import SpecError

__all__ = [
    "AgentEntry",
    "AgentSpec",
    "ChannelSpec",
    "Defaults",
    "DockerOptions",
    "Lifecycle",
    "ProcessOptions",
    "RepoSpec",
    "Resources",
    "Role",
    "RuntimeKind",
    "RuntimeOptions",
    "SpecError",
    "SwarmSpec",
    "agent_models",
    "load_spec",
    "parse_size",
    "parse_spec",
    "spec_schema",
    "template_text",
]
