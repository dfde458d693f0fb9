"""LLM proxy configuration (pydantic-settings; environment prefix ``KSWARM_LLM_``).

The real model key lives only here, in the gateway's environment (``KSWARM_LLM_API_KEY`` or
``ANTHROPIC_API_KEY``). Agents hold their own gateway token and never this key.

``BudgetSettings`` is the one model of the proxy's spending limits: the proxy's settings hold it
(``KSWARM_LLM_BUDGETS__...`` in the environment) and the swarm spec embeds it as-is (``budgets:``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

# Environment variables that may carry the real key; whoever builds an agent's environment drops them.
SECRET_ENV_VARS = ("KSWARM_LLM_API_KEY", "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN")
AGENT_NAME_RE = re.compile(r"^[a-z][a-z0-9-]{0,38}$")  # the gateway's principal names
# Budget variables of earlier releases: refused with their new name, never silently ignored (an
# ignored budget is an unlimited one).
RETIRED_ENV_VARS = {
    "KSWARM_LLM_AGENT_BUDGET_USD": "KSWARM_LLM_BUDGETS__AGENT__USD",
    "KSWARM_LLM_AGENT_BUDGET_TOKENS": "KSWARM_LLM_BUDGETS__AGENT__TOKENS",
    "KSWARM_LLM_AGENT_BUDGETS_USD": 'KSWARM_LLM_BUDGETS__AGENTS=\'{"name": {"usd": 10}}\'',
    "KSWARM_LLM_SWARM_BUDGET_USD": "KSWARM_LLM_BUDGETS__SWARM__USD",
    "KSWARM_LLM_SWARM_BUDGET_TOKENS": "KSWARM_LLM_BUDGETS__SWARM__TOKENS",
}


class ModelPrice(BaseModel):
    """Prices of one model in USD per million tokens."""

    model_config = ConfigDict(extra="forbid")

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

    def worst_case(self, input_tokens: int, output_tokens: int) -> float:
        """The most ``input_tokens`` and ``output_tokens`` can cost: input at its dearest rate
        (a cache write costs more than plain input), output at the output rate."""
        dearest = max(self.input, self.cache_write, self.cache_read)
        return (input_tokens * dearest + output_tokens * self.output) / 1_000_000


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


class BudgetLimit(BaseModel):
    """The limits of one scope (an agent, or the swarm); unset or null = no limit of that kind.

    Tokens count all four kinds (input, output, cache write, cache read); USD is the estimate from
    the price table. ``*_per_day`` limits count the usage of requests started on the current UTC
    day (00:00 UTC to 00:00 UTC).
    """

    model_config = ConfigDict(extra="forbid")

    usd: float | None = Field(None, ge=0, description="Estimated spend (USD), all time.")
    tokens: int | None = Field(None, ge=0, description="Tokens, all time.")
    usd_per_day: float | None = Field(None, ge=0, description="Estimated spend (USD) per UTC day.")
    tokens_per_day: int | None = Field(None, ge=0, description="Tokens per UTC day.")

    def over(self, base: BudgetLimit) -> BudgetLimit:
        """``base`` with the fields given here (null included) replacing its own."""
        return base.model_copy(update={f: getattr(self, f) for f in self.model_fields_set})


class BudgetSettings(BaseModel):
    """Every spending limit the LLM proxy enforces; the swarm spec's ``budgets:`` is this model.

    A request is forwarded only if its worst-case cost fits in every limit that applies to it: its
    agent's (``agent``, with the agent's entry in ``agents`` over it) and the swarm's.
    """

    model_config = ConfigDict(extra="forbid")

    agent: BudgetLimit = Field(default_factory=BudgetLimit, description="Limits of every agent.")
    agents: dict[str, BudgetLimit] = Field(
        default_factory=dict,
        description="Per-agent limits by name; the fields given replace agent's (null: no limit).",
    )
    swarm: BudgetLimit = Field(default_factory=BudgetLimit, description="Limits of the whole swarm together.")

    @field_validator("agents")
    @classmethod
    def _names(cls, agents: dict[str, BudgetLimit]) -> dict[str, BudgetLimit]:
        bad = sorted(n for n in agents if not AGENT_NAME_RE.match(n))
        if bad:
            raise ValueError(f"not an agent name: {', '.join(map(repr, bad))} (a-z, 0-9, '-', max 39)")
        return agents

    def for_agent(self, name: str) -> BudgetLimit:
        """The limits that apply to agent ``name`` (before an operator's override in Redis)."""
        own = self.agents.get(name)
        return own.over(self.agent) if own is not None else self.agent

    def over(self, base: BudgetSettings) -> BudgetSettings:
        """``base`` with every field given here replacing its own, field by field (spec over env)."""
        agents = dict(base.agents)
        for name, limit in self.agents.items():
            agents[name] = limit.over(agents[name]) if name in agents else limit
        return BudgetSettings(
            agent=self.agent.over(base.agent), agents=agents, swarm=self.swarm.over(base.swarm)
        )

    def given(self, prefix: str = "budgets") -> dict[str, float | int | None]:
        """The fields that were set, by dotted path (``budgets.agent.usd``): for messages and warnings."""
        out: dict[str, float | int | None] = {}
        for scope in ("agent", "swarm"):
            limit: BudgetLimit = getattr(self, scope)
            out |= {f"{prefix}.{scope}.{f}": getattr(limit, f) for f in sorted(limit.model_fields_set)}
        for name, limit in sorted(self.agents.items()):
            out |= {f"{prefix}.agents.{name}.{f}": getattr(limit, f) for f in sorted(limit.model_fields_set)}
        return out


class LLMProxySettings(BaseSettings):
    """Everything the LLM proxy needs; one instance per app, passed down explicitly."""

    model_config = SettingsConfigDict(
        env_prefix="KSWARM_LLM_", env_nested_delimiter="__", extra="forbid", populate_by_name=True
    )

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
        16,
        ge=1,
        description="Upstream requests (/v1/messages and count_tokens) in flight at once; the rest wait "
        "in a queue.",
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
    budgets: BudgetSettings = Field(
        default_factory=BudgetSettings,
        description="Limits per agent and swarm, all time and per UTC day (KSWARM_LLM_BUDGETS__...).",
    )
    reservation_ttl: float = Field(
        120.0,
        ge=1,
        description="Seconds a request's reservation lives unless its gateway renews it (crash safety).",
    )
    budget_lease_requests: int = Field(
        8,
        ge=0,
        le=64,
        description="A budget lease (gateway/llm/leases.py) holds this many times the worst case of the "
        "request that asked for it, so that the agent's next requests through this gateway are admitted "
        "without a Redis round trip; 0: no leases, every request reserves in Redis.",
    )
    budget_lease_s: float = Field(
        10.0,
        gt=0,
        description="Seconds a budget lease admits requests, then what is left of it is given back.",
    )
    ops_channel: str = Field("ops", description="Channel where budget notices are posted.")

    @field_validator("prices", mode="after")
    @classmethod
    def _merge_prices(cls, prices: dict[str, ModelPrice]) -> dict[str, ModelPrice]:
        """Given entries replace or extend the built-in table; it is never emptied."""
        return {**default_prices(), **prices}

    @model_validator(mode="before")
    @classmethod
    def _no_retired_env(cls, data: object) -> object:
        for old, new in RETIRED_ENV_VARS.items():
            if old in os.environ:
                raise ValueError(f"{old} is no longer read: set {new} (see docs/llm-proxy.md)")
        return data

    def price_for(self, model: str | None) -> ModelPrice:
        """The price of ``model``: exact name, else the longest matching prefix, else ``default``."""
        if model:
            if model in self.prices:
                return self.prices[model]
            matches = [k for k in self.prices if k != "default" and model.startswith(k)]
            if matches:
                return self.prices[max(matches, key=len)]
        return self.prices["default"]

    def has_price(self, model: str | None) -> bool:
        """Whether the table prices ``model`` itself (its name or a prefix of it), not by ``default``:
        a cost of a model without a price (``scripted``, an unknown or local one) is an estimate."""
        if not model or model == "default":
            return False
        return model in self.prices or any(k != "default" and model.startswith(k) for k in self.prices)

    def key(self) -> str | None:
        """The real key in clear text, for the one place that sends it upstream."""
        return self.api_key.get_secret_value() if self.api_key else None


def scrub_env(env: Mapping[str, str]) -> dict[str, str]:
    """A copy of ``env`` without the variables that may carry the real key (for agent processes)."""
    return {k: v for k, v in env.items() if k not in SECRET_ENV_VARS and not k.startswith("KSWARM_LLM_")}
