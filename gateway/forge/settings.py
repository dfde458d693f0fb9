"""Forge configuration (environment prefix ``KSWARM_FORGE_``); the embedded forge needs none."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from gateway.forge.models import DIFF_MAX_BYTES, DIFF_MAX_FILE_BYTES

MIB = 1024 * 1024


class ForgeSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="KSWARM_FORGE_", extra="ignore")

    gitea_url: str | None = Field(
        None, description="Use Gitea at this URL (e.g. http://gitea:3000) instead of the embedded forge."
    )
    gitea_admin_token: str | None = Field(None, description="Gitea admin token (acts for users via Sudo).")
    gitea_admin_token_file: Path | None = Field(None, description="File holding the admin token instead.")
    gitea_webhook_url: str | None = Field(
        None,
        description="The receiver's URL as Gitea reaches it (e.g. http://gateway:8765/api/forge/gitea/hook): "
        "every ensured repo gets a webhook to it.",
    )
    gitea_webhook_secret: str | None = Field(
        None, description="Secret the per-repo hook secrets are derived from (HMAC-SHA256)."
    )
    gitea_webhook_secret_file: Path | None = Field(None, description="File holding the webhook secret.")
    repos: list[str] = Field(
        default_factory=list, description='Repos ensured at start-up, e.g. ["kswarm/dataset"].'
    )
    default_repo: str | None = Field(
        None, description="org/name the agents' PR tools use when they name no repo (default: the only one)."
    )
    gate_enabled: bool = Field(True, description="Run the merge bot in this gateway.")
    gate_sweep_s: float = Field(
        30.0, gt=0, description="Re-evaluate every open PR this often (missed events)."
    )
    gate_lock_ttl_s: float = Field(60.0, gt=0, description="Longest a merge may hold its base's lock.")
    diff_max_chars: int = Field(
        20_000,
        ge=0,
        description="Longest diff MCP pr_view returns to an agent (bytes; within diff_max_bytes).",
    )
    # Every path that renders a diff (REST, /api/v1 .diff, MCP pr_view, the UI) cuts it while reading.
    diff_max_bytes: int = Field(
        DIFF_MAX_BYTES,
        ge=1024,
        description="Most bytes of one rendered diff; the rest is cut with a trailing '... diff cut' line.",
    )
    diff_max_file_bytes: int = Field(
        DIFF_MAX_FILE_BYTES,
        ge=1024,
        description="Most bytes of one file's diff; a larger one shows as 'file diff too large, N bytes'.",
    )
    # Push limits of the embedded forge's receive path (agents and workers; operators are exempt).
    # 0 turns a limit off.
    push_max_pack_bytes: int = Field(
        32 * MIB,
        ge=0,
        description="Largest pack one push may send (git's receive.maxInputSize; git refuses with "
        "'pack exceeds maximum allowed size').",
    )
    push_max_blob_bytes: int = Field(
        4 * MIB, ge=0, description="Largest file (blob) a push may bring in (the receive hook)."
    )
    push_max_files: int = Field(
        500, ge=0, description="Most distinct paths the pushed commits may change in one push."
    )
    max_branches_per_agent: int = Field(
        100, ge=0, description="Most branches (refs/heads/<agent>/...) one pusher may own in a repo."
    )

    def push_env(self, kind: str) -> dict[str, str]:
        """The environment ``git http-backend`` gets for a push by a principal of ``kind``: the
        pack limit and object check as git config parameters (``git -c``: they reach
        ``receive-pack`` and its ``index-pack``/``unpack-objects``), the others for the hook."""
        exempt = kind == "operator"
        config = {"receive.fsckObjects": "true"}
        if not exempt and self.push_max_pack_bytes:
            config["receive.maxInputSize"] = str(self.push_max_pack_bytes)
        env = {"GIT_CONFIG_COUNT": str(len(config))}
        for i, (key, value) in enumerate(config.items()):
            env[f"GIT_CONFIG_KEY_{i}"] = key
            env[f"GIT_CONFIG_VALUE_{i}"] = value
        for var, limit in (
            ("KSWARM_MAX_BLOB_BYTES", self.push_max_blob_bytes),
            ("KSWARM_MAX_FILES", self.push_max_files),
            ("KSWARM_MAX_BRANCHES", self.max_branches_per_agent),
        ):
            env[var] = "0" if exempt else str(limit)
        return env

    def admin_token(self) -> str | None:
        if self.gitea_admin_token:
            return self.gitea_admin_token
        if self.gitea_admin_token_file:
            return self.gitea_admin_token_file.read_text().strip() or None
        return None

    def webhook_secret(self) -> str | None:
        if self.gitea_webhook_secret:
            return self.gitea_webhook_secret
        if self.gitea_webhook_secret_file:
            return self.gitea_webhook_secret_file.read_text().strip() or None
        return None
