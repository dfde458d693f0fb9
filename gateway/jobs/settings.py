"""The job runner's settings in the gateway (environment prefix ``KSWARM_JOBS_``): which pools it runs
(their models are the wire's, ``gateway/client/jobs/pools.py``), and its paces and bounds."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from gateway.client.jobs.pools import PoolConfig, default_pools, load_pools


class JobsSettings(BaseSettings):
    """Job-runner settings of the gateway (environment prefix ``KSWARM_JOBS_``)."""

    model_config = SettingsConfigDict(env_prefix="KSWARM_JOBS_", extra="ignore")

    pools_file: Path | None = Field(None, description="YAML/JSON with the pools (or a swarm.yaml).")
    pools: list[PoolConfig] = Field(default_factory=default_pools, description="Pools when no file is given.")
    default_repo: str | None = Field(None, description="org/name used when a submission names no repo.")
    claim_idle_s: float = Field(30.0, gt=0, description="Silence after which a running job is reclaimed.")
    reclaim_every_s: float = Field(5.0, gt=0, description="How often the gateway looks for dead workers.")
    log_max_bytes: int = Field(1 << 20, ge=1024, description="Log bytes kept per job.")
    recent_kept: int = Field(200, ge=10, description="Finished jobs listed per pool.")

    def pool_list(self) -> list[PoolConfig]:
        pools = load_pools(self.pools_file) if self.pools_file else self.pools
        names = [p.name for p in pools]
        if len(set(names)) != len(names):
            raise ValueError(f"pool names repeat: {names}")
        return pools
