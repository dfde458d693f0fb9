"""Who receives Attention alerts: the operator's targets (the spec's ``alerts:``, ``KSWARM_MONITOR_ALERTS``).

Models only, importing nothing of the server (no Redis, no HTTP client): the swarm spec embeds them,
and the spec is read by processes that have neither (a sandboxed agent's setup, ``kswarm validate``).
The sending is ``alerts.py``.
"""

from __future__ import annotations

from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, SecretStr, field_validator

from gateway.monitor.models import AttentionItem, Severity

SEVERITY_RANK: dict[str, int] = {"info": 0, "warning": 1, "critical": 2}


class AlertTarget(BaseModel):
    """One receiver of Attention alerts (the spec's ``alerts:`` entries, ``KSWARM_MONITOR_ALERTS``)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(
        pattern=r"^[a-z0-9][a-z0-9-]{0,38}$",
        description="What logs and metrics call this target (never its URL).",
    )
    kind: Literal["webhook", "slack"] = Field(
        description="webhook: POST the item as JSON; slack: a Slack incoming webhook ({text: ...})."
    )
    url: SecretStr = Field(
        description="http:// or https:// URL to POST to; a secret (shown as ********** everywhere)."
    )
    min_severity: Severity = Field("warning", description="Items at least this severe are sent.")
    per_minute: int = Field(
        10, ge=1, le=600, description="Messages per minute at most; the rest in one 'and K more'."
    )
    timeout_s: float = Field(5.0, gt=0, le=60, description="Longest one POST may take.")
    retries: int = Field(
        2, ge=0, le=5, description="Retries after a connection error, a timeout, a 429 or a 5xx."
    )

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: SecretStr) -> SecretStr:
        # Messages name the scheme only: the rest of the URL may be the secret.
        parts = urlsplit(url.get_secret_value().strip())
        if parts.scheme not in ("http", "https"):
            raise ValueError(f"an alert URL must be http:// or https:// (not {parts.scheme or 'no'} scheme)")
        if not parts.hostname:
            raise ValueError("an alert URL needs a host (http://host[:port]/path)")
        return SecretStr(url.get_secret_value().strip())

    def shown_url(self) -> str:
        """The URL as logs may show it: scheme, host and port; no credentials, path or query."""
        parts = urlsplit(self.url.get_secret_value())
        port = f":{parts.port}" if parts.port else ""
        return f"{parts.scheme}://{parts.hostname}{port}/…"

    def wants(self, item: AttentionItem) -> bool:
        return SEVERITY_RANK[item.severity] >= SEVERITY_RANK[self.min_severity]


def _unique_names(targets: list[AlertTarget]) -> list[AlertTarget]:
    names = [t.name for t in targets]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise ValueError(f"alert target {name!r} is defined twice")
    return targets


AlertTargets = Annotated[list[AlertTarget], AfterValidator(_unique_names)]
