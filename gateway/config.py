"""Gateway configuration (pydantic-settings; environment prefix ``KSWARM_GATEWAY_``)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class GatewaySettings(BaseSettings):
    """Everything the gateway needs to run; one instance per app, passed down explicitly."""

    model_config = SettingsConfigDict(env_prefix="KSWARM_GATEWAY_", extra="ignore")

    redis_url: str = Field(
        "redis://127.0.0.1:6379/0", description="Redis URL (redis://, rediss:// or unix://)."
    )
    home: Path = Field(Path.home() / ".kswarm", description="Data dir (KSWARM_HOME): sockets, repos, tokens.")
    host: str = Field("127.0.0.1", description="TCP bind address; loopback only by design.")
    port: int = Field(8765, description="TCP port for the operator, the UI and local clients.")
    unix_socket: Path | None = Field(
        None, description="Unix socket path for agent containers; default <home>/run/gateway.sock."
    )
    redis_pool_size: int = Field(
        64,
        ge=2,
        description="Redis connections this gateway process may open (waits hold none; the hub has one).",
    )
    redis_pool_wait: float = Field(
        5.0, gt=0, description="Longest a request waits for a free Redis connection before a 503 (s)."
    )
    public_url: str | None = Field(None, description="URL printed for humans; default http://host:port.")
    swarm: str = Field("kswarm", description="Swarm name; agents' e-mails are <name>@agents.<swarm>.")
    max_message_bytes: int = Field(16 * 1024, description="Largest chat message accepted (UTF-8 bytes).")
    # A rate limit stops one looping agent from flooding every inbox and the event stream; 20/s is far
    # above what an agent that reads what it answers posts (docs/gateway.md, "Chat"). Benches raise it.
    rate_limit_per_sec: float = Field(
        20.0, ge=0, description="Sustained chat posts per second per sender (0: unlimited)."
    )
    rate_limit_burst: int = Field(
        40, ge=1, description="Chat posts a sender may make at once before the sustained rate applies."
    )
    inbox_max_wait: float = Field(
        60.0, description="Longest server-side inbox wait a client may ask for (s)."
    )
    max_waits_per_agent: int = Field(
        8, ge=1, description="Inbox waits and event streams one agent may hold open at once (per process)."
    )
    max_channels_per_agent: int = Field(
        20, ge=0, description="Channels one agent may create (DMs not counted); operators unlimited."
    )
    history_max_limit: int = Field(500, description="Largest page of chat history returned at once.")
    events_maxlen: int = Field(200_000, description="Approximate length cap of the global event stream.")
    channel_maxlen: int = Field(100_000, description="Approximate length cap of each channel stream.")
    inbox_maxlen: int = Field(10_000, description="Approximate length cap of each principal's inbox stream.")
    default_channels: list[str] = Field(
        default_factory=lambda: ["general", "ops", "reviews"], description="Channels created at start-up."
    )

    def socket_path(self) -> Path:
        """The unix socket agents connect to."""
        return self.unix_socket or (self.home / "run" / "gateway.sock")

    def url(self) -> str:
        """The TCP URL humans and local clients use."""
        return self.public_url or f"http://{self.host}:{self.port}"
