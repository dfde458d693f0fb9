"""Forge configuration (environment prefix ``KSWARM_FORGE_``); the embedded forge needs none."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


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
    diff_max_chars: int = Field(20_000, description="Longest diff pr_view returns to an agent.")

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
