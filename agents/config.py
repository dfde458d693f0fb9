"""An agent's configuration: one pydantic model, from a mounted file and/or the environment.

Sources, later ones winning: the JSON/YAML file named by ``KSWARM_AGENT_CONFIG`` (what the
orchestrator mounts), the variables the orchestrator's runtimes already set (``KSWARM_AGENT``,
``KSWARM_ROLE``, ``KSWARM_MODEL``, ``KSWARM_WORK``, ``KSWARM_MEMORY``, ``KSWARM_HISTORY``,
``KSWARM_TOKEN_FILE``, ``KSWARM_GATEWAY_SOCKET`` / ``KSWARM_GATEWAY_URL``, ``KSWARM_HEARTBEAT_S``,
``KSWARM_SWARM``), then ``KSWARM_AGENT_<FIELD>`` for any field (e.g. ``KSWARM_AGENT_MAX_TURNS``).
The agent holds exactly one secret: its own gateway token.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

from gateway.client import GatewayTarget

CONFIG_FILE_ENV = "KSWARM_AGENT_CONFIG"
FIELD_ENV_PREFIX = "KSWARM_AGENT_"

# The orchestrator's variable names -> fields.
ORCHESTRATOR_ENV = {
    "KSWARM_AGENT": "name",
    "KSWARM_SWARM": "swarm",
    "KSWARM_ROLE": "role",
    "KSWARM_MODEL": "model",
    "KSWARM_WORK": "work_dir",
    "KSWARM_MEMORY": "memory_dir",
    "KSWARM_HISTORY": "history_dir",
    "KSWARM_TOKEN_FILE": "token_file",
    "KSWARM_GATEWAY_SOCKET": "gateway_socket",
    "KSWARM_GATEWAY_URL": "gateway_url",
    "KSWARM_HEARTBEAT_S": "heartbeat_s",
}


class AgentConfig(BaseModel):
    """Everything one agent process needs; built once at start and passed down explicitly."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="The agent's name: its principal, chat handle and git user.name.")
    swarm: str = Field(
        "", description="The swarm it belongs to (informational; identity comes from the token)."
    )
    role: str = Field("developer", description="Role named in the prompt: developer, reviewer, lead, ...")
    gateway_url: str | None = Field(None, description="Gateway base URL over TCP (when no socket is given).")
    gateway_socket: Path | None = Field(None, description="Gateway unix socket; preferred over gateway_url.")
    token: SecretStr | None = Field(None, description="The agent's own gateway token (else read token_file).")
    token_file: Path | None = Field(None, description="File holding the agent's own gateway token.")
    runtime: Literal["loop", "claude-code"] = Field(
        "loop", description="loop = kswarm's tool-use loop; claude-code = the Claude Code CLI."
    )
    model: str = Field("scripted", description="Model id sent to the proxy; 'scripted' = the offline policy.")
    model_kind: Literal["anthropic", "scripted"] | None = Field(
        None, description="Which Model implementation; default: scripted iff model == 'scripted'."
    )
    stream: bool = Field(True, description="Stream model responses (SSE) through the proxy.")
    prompt: str | None = Field(None, description="Role prompt template: a file path or the text itself.")
    work_dir: Path = Field(description="The only dir file tools and bash work in. Required (KSWARM_WORK).")
    memory_dir: Path = Field(description="Holds MEMORY.md and other memory files. Required (KSWARM_MEMORY).")
    history_dir: Path = Field(description="Holds the transcript and the context. Required (KSWARM_HISTORY).")
    heartbeat_s: float = Field(5.0, gt=0, description="Seconds between heartbeats, idle or working.")
    heartbeat_log_s: float = Field(
        300.0, gt=0, description="At most one heartbeat line in the log per this many seconds (a count)."
    )
    report_timeline: bool = Field(
        True, description="Report wakes, model calls and tool calls to the gateway (POST /api/timeline)."
    )
    inbox_wait_s: float = Field(30.0, gt=0, le=60, description="Server-side inbox wait per request (s).")
    max_turns: int = Field(30, ge=1, description="Model calls allowed per wake before the agent stops.")
    max_tokens: int = Field(8192, ge=1, description="max_tokens of each model response.")
    max_wake_tokens: int | None = Field(
        None, ge=1, description="Input+output tokens allowed per wake (None: unlimited)."
    )
    bash_timeout_s: float = Field(120.0, gt=0, description="Default and largest timeout of one bash call.")
    output_limit: int = Field(16_000, ge=200, description="Characters of tool output kept (head and tail).")
    compact_at_tokens: int = Field(
        120_000, ge=1000, description="Estimated context tokens above which older turns are summarised."
    )
    keep_messages: int = Field(8, ge=2, description="Most recent messages kept verbatim by compaction.")
    carry_context: bool = Field(True, description="Keep the conversation across wakes (and restarts).")
    home_dir: Path | None = Field(None, description="HOME of the Claude Code CLI; default: $HOME.")
    claude_cli: Path | None = Field(None, description="Claude Code binary; default: claude-agent-sdk's.")
    claude_timeout_s: float = Field(900.0, gt=0, description="Longest run of the Claude Code CLI per wake.")

    @model_validator(mode="after")
    def _check(self) -> AgentConfig:
        if self.gateway_socket is None and self.gateway_url is None:
            raise ValueError("give gateway_socket or gateway_url")
        return self

    # -- derived ----------------------------------------------------------------------------

    @property
    def kind(self) -> Literal["anthropic", "scripted"]:
        if self.model_kind is not None:
            return self.model_kind
        return "scripted" if self.model == "scripted" else "anthropic"

    def gateway_target(self, timeout: float = 30.0) -> GatewayTarget:
        """The gateway (socket preferred) with the agent's own token, read now (it may be rotated)."""
        return GatewayTarget(
            token=self.secret(), url=self.gateway_url, socket=self.gateway_socket, timeout=timeout
        )

    def base_url(self) -> str:
        """The gateway's base URL as HTTP clients use it (``http://kswarm`` over the socket)."""
        return GatewayTarget(token=None, url=self.gateway_url, socket=self.gateway_socket).base_url()

    def secret(self) -> str:
        """The agent's own token, from ``token`` or ``token_file`` (re-read: it may be rotated)."""
        if self.token is not None:
            return self.token.get_secret_value()
        if self.token_file is not None and self.token_file.exists():
            return self.token_file.read_text().strip()
        raise ValueError("no token: set token or token_file")

    def prompt_text(self) -> str | None:
        """The role template: the file's text if ``prompt`` names a file, else the text itself."""
        if not self.prompt:
            return None
        if "\n" not in self.prompt and len(self.prompt) < 4096:
            path = Path(self.prompt).expanduser()
            if path.is_file():
                return path.read_text()
        return self.prompt

    # -- loading ----------------------------------------------------------------------------

    @classmethod
    def load(cls, environ: Mapping[str, str] | None = None, path: Path | None = None) -> AgentConfig:
        """File (``path`` or ``$KSWARM_AGENT_CONFIG``), then the environment on top."""
        env = dict(os.environ if environ is None else environ)
        data: dict[str, Any] = {}
        file = path or (Path(env[CONFIG_FILE_ENV]) if env.get(CONFIG_FILE_ENV) else None)
        if file is not None:
            data.update(read_config_file(file))
        for var, field in ORCHESTRATOR_ENV.items():
            if env.get(var):
                data[field] = env[var]
        for field in cls.model_fields:
            var = FIELD_ENV_PREFIX + field.upper()
            if var != CONFIG_FILE_ENV and env.get(var) is not None:
                data[field] = env[var]
        if data.get("gateway_socket"):
            data.setdefault("gateway_url", None)
        return cls.model_validate(data)


def read_config_file(path: Path) -> dict[str, Any]:
    text = path.read_text()
    loaded = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise ValueError(f"{path}: expected a mapping of settings")
    return loaded
