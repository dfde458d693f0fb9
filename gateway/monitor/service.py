"""``MonitorService``: the monitor's parts for one app (``ctx.services.get(MONITOR)``)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from gateway import services
from gateway.context import GatewayContext
from gateway.llm.usage import UsageStore
from gateway.monitor import keys
from gateway.monitor.actions import OperatorActions
from gateway.monitor.attention import AttentionBuilder
from gateway.monitor.chartbook import ChartBook
from gateway.monitor.cost import CostLedger, estimate_rate
from gateway.monitor.feeder import MonitorFeeder
from gateway.monitor.models import ClaimWindow, ModelRate
from gateway.monitor.overview import OverviewBuilder
from gateway.monitor.series import SeriesStore
from gateway.monitor.settings import MonitorSettings
from gateway.monitor.timeline import Pricer, TimelineStore
from gateway.services import LLM_USAGE
from gateway.swarm.liveness import LivenessBook


def proxy_pricer(ctx: GatewayContext) -> Pricer | None:
    """The LLM proxy's price table (its public settings), to estimate what a reported model call cost:
    its cost and, when the table has no price of the model's own, the rate it was estimated at."""
    store = ctx.services.find(LLM_USAGE)
    if store is None:
        return None

    def price(model: str | None, counts: list[int]) -> tuple[float, ModelRate | None]:
        return float(store.settings.price_for(model).cost(*counts)), estimate_rate(store.settings, model)

    return price


@dataclass
class MonitorService:
    settings: MonitorSettings
    series: SeriesStore
    timeline: TimelineStore
    attention: AttentionBuilder
    cost: CostLedger
    actions: OperatorActions
    charts: ChartBook
    feeder: MonitorFeeder
    overview: OverviewBuilder
    liveness: LivenessBook
    usage: UsageStore | None = None  # the LLM proxy's books (None: no proxy in this gateway)

    @classmethod
    def build(cls, ctx: GatewayContext, settings: MonitorSettings) -> MonitorService:
        series = SeriesStore(ctx.redis, settings.retention_days)
        usage = ctx.services.find(LLM_USAGE)
        liveness = LivenessBook(ctx.redis, ctx.principals, settings.stall_after_s)
        attention = AttentionBuilder(ctx, settings, liveness)
        overview = OverviewBuilder(ctx, series, attention, liveness)
        return cls(
            settings=settings,
            series=series,
            timeline=TimelineStore(ctx.redis, settings.timeline_maxlen, proxy_pricer(ctx)),
            attention=attention,
            cost=CostLedger(ctx.redis, series, usage.settings if usage is not None else None),
            actions=OperatorActions(ctx, settings),
            # The queue chart's newest point and the overview's pools are one computation.
            charts=ChartBook(series, overview.started_at, overview.pool_depths),
            feeder=MonitorFeeder(ctx, settings, series, attention),
            overview=overview,
            liveness=liveness,
            usage=usage,
        )

    async def booked_models(self) -> dict[str, str]:
        """Agent -> the model the LLM proxy booked most of its tokens under (labels for cost per model):
        the upstream's answer, never what the agent reports in its timeline (docs/security.md)."""
        return await self.usage.main_models() if self.usage is not None else {}

    async def claims(self, task: str | None = None, limit: int = 200) -> list[ClaimWindow]:
        """Claim windows, newest first: the ones open now, then the closed ones."""
        redis = self.series.redis
        out: list[ClaimWindow] = []
        for raw in (await redis.hgetall(keys.CLAIMS_OPEN)).values():
            try:
                window = ClaimWindow.model_validate_json(raw)
            except ValueError:
                continue
            if task is None or window.task == task:
                out.append(window)
        out.sort(key=lambda w: w.since, reverse=True)
        upper = "+"
        while len(out) < limit:
            rows = await redis.xrevrange(keys.CLAIMS, upper, "-", 500)
            for _, fields in rows:
                try:
                    window = ClaimWindow.model_validate(json.loads(fields.get("json", "{}")))
                except ValueError:
                    continue
                if task is None or window.task == task:
                    out.append(window)
            if len(rows) < 500:
                break
            upper = f"({rows[-1][0]}"
        return out[:limit]


MONITOR = services.MONITOR  # listed with the built-in components' services (gateway/services.py)
