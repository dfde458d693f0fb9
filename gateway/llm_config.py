"""LLM proxy configuration (pydantic-settings; environment prefix ``KSWARM_LLM_``).

The real model key lives only here, in the gateway's environment (``KSWARM_LLM_API_KEY`` or
``ANTHROPIC_API_KEY``). Agents hold their own gateway token and never this key.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pydantic import AliasChoices, BaseModel, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

# Environment variables that may carry the real key; whoever builds an agent's environment drops them.
SECRET_ENV_VARS = ("KSWARM_LLM_API_KEY", "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN")


class ModelPrice(BaseModel):
    """Prices of one model in USD per million tokens."""

    input: float = Field(description="Uncached input tokens, $/MTok.")
    output: float = Field(description="Output tokens, $/MTok.")
    cache_write: float = Field(description="Cache creation (write) input tokens, $/MTok (5-minute TTL rate).")
    cache_read: float = Field(description="Cache read (hit) input tokens, $/MTok.")

    def cost(self, input_tokens: int, output_tokens: int, cache_write: int, cache_read: int) -> float:
        """Estimated cost in USD of one request's usage."""
        return (
            input_tokens * self.input
            + output_tokens * self.output
            + cache_write * self.cache_write
            + cache_read * self.cache_read
        ) / 1_000_000


def _price(inp: float, out: float) -> ModelPrice:
    # Anthropic's published ratios: cache writes 1.25x input, cache reads 0.1x input.
    return ModelPrice(input=inp, output=out, cache_write=inp * 1.25, cache_read=inp * 0.1)


def default_prices() -> dict[str, ModelPrice]:
    """Anthropic list prices ($/MTok); keys are model-name prefixes, the longest match wins."""
    return {
        "default": _price(3.0, 15.0),
        "claude-opus-4-5": _price(5.0, 25.0),
        "claude-opus-4-6": _price(5.0, 25.0),
        "claude-opus-4": _price(15.0, 75.0),
        "claude-3-opus": _price(15.0, 75.0),
        "claude-sonnet-4": _price(3.0, 15.0),
        "claude-3-7-sonnet": _price(3.0, 15.0),
        "claude-3-5-sonnet": _price(3.0, 15.0),
        "claude-haiku-4-5": _price(1.0, 5.0),
        "claude-3-5-haiku": _price(0.8, 4.0),
        "claude-3-haiku": _price(0.25, 1.25),
    }


class LLMProxySettings(BaseSettings):
    """Everything the LLM proxy needs; one instance per app, passed down explicitly."""

    model_config = SettingsConfigDict(env_prefix="KSWARM_LLM_", extra="ignore", populate_by_name=True)

    upstream_url: str = Field(
        "https://api.anthropic.com",
        description="Base URL of the Anthropic-compatible upstream (Anthropic, vLLM, LiteLLM, Ollama).",
    )
    api_key: SecretStr | None = Field(
        None,
        validation_alias=AliasChoices("KSWARM_LLM_API_KEY", "ANTHROPIC_API_KEY", "api_key"),
        description="The real upstream key (KSWARM_LLM_API_KEY, else ANTHROPIC_API_KEY); None sends no key.",
    )
    key_header: Literal["x-api-key", "bearer"] = Field(
        "x-api-key", description="How the key goes upstream: x-api-key (Anthropic) or Authorization: Bearer."
    )
    anthropic_version: str = Field(
        "2023-06-01", description="anthropic-version sent upstream when the client sends none."
    )
    max_concurrency: int = Field(
        16, ge=1, description="Upstream /v1/messages requests in flight at once; the rest wait in a queue."
    )
    max_retries: int = Field(
        4, ge=0, description="Retries of an upstream 429/529/5xx or connection failure before giving up."
    )
    backoff_initial: float = Field(0.5, ge=0, description="First retry delay (s); doubles per retry.")
    backoff_max: float = Field(8.0, ge=0, description="Largest computed backoff delay (s).")
    retry_after_max: float = Field(
        30.0, ge=0, description="Largest upstream retry-after the proxy honours (s); longer waits are capped."
    )
    timeout: float = Field(
        600.0, gt=0, description="Upstream read timeout (s): the longest gap between response bytes."
    )
    connect_timeout: float = Field(10.0, gt=0, description="Upstream connect timeout (s).")
    trust_env: bool = Field(
        True, description="Honour HTTPS_PROXY/NO_PROXY/SSL_CERT_FILE from the environment for the upstream."
    )
    prices: dict[str, ModelPrice] = Field(
        default_factory=default_prices,
        description="$/MTok by model-name prefix (longest wins, else 'default'), merged over the built-ins.",
    )
    agent_budget_usd: float | None = Field(
        None, ge=0, description="Estimated spend (USD) after which an agent is refused; None = unlimited."
    )
    agent_budget_tokens: int | None = Field(
        None,
        ge=0,
        description="Tokens (input+output+cache) after which an agent is refused; None: unlimited.",
    )
    agent_budgets_usd: dict[str, float] = Field(
        default_factory=dict, description="Per-agent USD budgets overriding agent_budget_usd (JSON in env)."
    )
    swarm_budget_usd: float | None = Field(
        None, ge=0, description="Estimated spend (USD) of the whole swarm after which everyone is refused."
    )
    swarm_budget_tokens: int | None = Field(
        None, ge=0, description="Tokens of the whole swarm after which everyone is refused."
    )
    ops_channel: str = Field("ops", description="Channel where budget notices are posted.")

    @field_validator("prices", mode="after")
    @classmethod
    def _merge_prices(cls, prices: dict[str, ModelPrice]) -> dict[str, ModelPrice]:
        """Given entries replace or extend the built-in table; it is never emptied."""
        return {**default_prices(), **prices}

    def price_for(self, model: str | None) -> ModelPrice:
        """The price of ``model``: exact name, else the longest matching prefix, else ``default``."""
        if model:
            if model in self.prices:
                return self.prices[model]
            matches = [k for k in self.prices if k != "default" and model.startswith(k)]
            if matches:
                return self.prices[max(matches, key=len)]
        return self.prices["default"]

    def key(self) -> str | None:
        """The real key in clear text, for the one place that sends it upstream."""
        return self.api_key.get_secret_value() if self.api_key else None


def scrub_env(env: Mapping[str, str]) -> dict[str, str]:
    """A copy of ``env`` without the variables that may carry the real key (for agent processes)."""
    return {k: v for k, v in env.items() if k not in SECRET_ENV_VARS and not k.startswith("KSWARM_LLM_")}
