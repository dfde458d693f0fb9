"""The counterexample service's rules (the swarm spec's ``counterexamples:``) and settings
(environment prefix ``KSWARM_COUNTEREXAMPLES_``)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

CounterexampleTargets = Literal["merged", "merged-and-open"]


class CounterexampleRules(BaseModel):
    """What a red-team agent may attack, and how much of the job runner it may hold at once."""

    model_config = ConfigDict(extra="forbid")

    targets: CounterexampleTargets = Field(
        "merged",
        description="merged: only accepted kernels (the head of a PR merged into main, with a passing "
        "verification there); merged-and-open: also an open PR's head.",
    )
    max_pending_per_agent: int = Field(
        3,
        ge=1,
        le=100,
        description="Counterexamples one agent may have pending (each costs a job); more are refused (429) "
        "until one is decided.",
    )


class CounterexampleSettings(BaseSettings, CounterexampleRules):
    """Counterexample settings (environment prefix ``KSWARM_COUNTEREXAMPLES_``)."""

    model_config = SettingsConfigDict(env_prefix="KSWARM_COUNTEREXAMPLES_", extra="ignore")

    dataset_repo: str = Field("kswarm/dataset", description="org/name of the dataset repo kernels are in.")
    base: str = Field("main", description="The dataset repo's branch accepted kernels are merged into.")
