"""What a kernel cost: LLM usage attributed to the task its agent held while spending it.

The LLM proxy books every call per agent (``gateway.llm.usage``) and logs it in ``ks:llm:spent`` with
the tasks its agent held a claim on at that moment. The feeder books each logged call to those tasks
(split evenly when it holds several; to ``-`` when it holds none), at the call's own time: exact,
however short the claim (a scripted developer claims, works and finishes in one second). Kept twice:
all time in ``ks:mon:cost`` (integers: tokens and nano-USD per task and agent) and per minute in the
series ``cost-tokens:task:<task>:agent:<agent>`` / ``cost-usd:...`` (for windows such as one dataset
record's). Tokens and cost per agent and for the swarm over time are sampled from the proxy's totals.

A cost explains itself: where the model is ``scripted``, unknown or missing from the proxy's price table
(priced at its ``default`` rate), the answer says ``estimate: true`` and carries the rates it used.
"""

from __future__ import annotations

from collections import defaultdict

from gateway.llm.config import LLMProxySettings
from gateway.monitor import keys
from gateway.monitor.models import CostLine, CostPoint, CostReport, ModelRate
from gateway.monitor.series import SeriesStore
from gateway.redis_facade import StrRedis

NANO = 1_000_000_000
UNATTRIBUTED = "-"
UNKNOWN_MODEL = "unknown"


def estimate_rate(prices: LLMProxySettings | None, model: str | None) -> ModelRate | None:
    """The rate a cost of ``model`` was computed at when that cost is an estimate (the table has no price
    of its own for the model); None when the table prices it, or when there is no table at all."""
    if prices is None or prices.has_price(model):
        return None
    rate = prices.price_for(model)
    return ModelRate(input_per_mtok=rate.input, output_per_mtok=rate.output)


def rates_used(prices: LLMProxySettings | None, models: list[str | None]) -> dict[str, ModelRate]:
    """``{model: rate}`` for each of ``models`` whose cost is an estimate (``unknown`` for no model)."""
    out: dict[str, ModelRate] = {}
    for model in models:
        rate = estimate_rate(prices, model)
        if rate is not None:
            out[model or UNKNOWN_MODEL] = rate
    return out


def tokens_series(task: str, agent: str) -> str:
    return f"cost-tokens:task:{task}:agent:{agent}"


def usd_series(task: str, agent: str) -> str:
    return f"cost-usd:task:{task}:agent:{agent}"


def cost_field(task: str, agent: str, unit: str) -> str:
    return f"{task}|{agent}|{unit}"


class CostLedger:
    def __init__(self, redis: StrRedis, series: SeriesStore, prices: LLMProxySettings | None = None) -> None:
        self.redis = redis
        self.series = series
        self.prices = prices  # the LLM proxy's table (None: no proxy, nothing is booked)

    async def lines(self, models: dict[str, str] | None = None) -> list[CostLine]:
        raw = await self.redis.hgetall(keys.COST)
        sums: dict[tuple[str, str], dict[str, int]] = defaultdict(lambda: {"tokens": 0, "nusd": 0})
        for name, value in raw.items():
            task, _, rest = str(name).partition("|")
            agent, _, unit = rest.rpartition("|")
            if unit in ("tokens", "nusd") and agent:
                sums[(task, agent)][unit] += int(value)
        models = models or {}
        return [
            CostLine(
                task=t,
                agent=a,
                model=models.get(a),
                tokens=v["tokens"],
                cost_usd=v["nusd"] / NANO,
                estimate=estimate_rate(self.prices, models.get(a)) is not None,
            )
            for (t, a), v in sorted(sums.items())
        ]

    async def report(
        self, models: dict[str, str] | None = None, accepted: dict[str, int] | None = None
    ) -> CostReport:
        """Totals per task, agent and model and for the swarm; with ``accepted`` (task -> accepted kernels)
        also USD and tokens per accepted kernel."""
        lines = await self.lines(models)

        def table(key: str) -> dict[str, dict[str, float]]:
            out: dict[str, dict[str, float]] = defaultdict(lambda: {"tokens": 0.0, "cost_usd": 0.0})
            for line in lines:
                name = getattr(line, key) or "?"
                out[name]["tokens"] += line.tokens
                out[name]["cost_usd"] += line.cost_usd
            return dict(out)

        by_task = table("task")
        accepted = accepted or {}
        for task, row in by_task.items():
            n = accepted.get(task, 0)
            row["accepted"] = float(n)
            if n:
                row["usd_per_accepted"] = row["cost_usd"] / n
                row["tokens_per_accepted"] = row["tokens"] / n
        swarm = {
            "tokens": float(sum(x.tokens for x in lines)),
            "cost_usd": sum(x.cost_usd for x in lines),
            "attributed_usd": sum(x.cost_usd for x in lines if x.task != UNATTRIBUTED),
        }
        total_accepted = sum(accepted.values())
        if total_accepted:
            swarm["usd_per_accepted"] = swarm["attributed_usd"] / total_accepted
        prices = rates_used(self.prices, [x.model for x in lines if x.estimate])
        return CostReport(
            estimate=bool(prices),
            prices=prices,
            lines=lines,
            by_task=by_task,
            by_agent=table("agent"),
            by_model=table("model"),
            swarm=swarm,
            note="each model call booked to the tasks its agent held a claim on when the LLM proxy booked "
            "it; '-' is usage while holding no task",
        )

    async def window(
        self, task: str, agent: str, since: float, until: float, model: str | None = None
    ) -> CostPoint:
        """Tokens and USD ``agent`` spent on ``task`` from ``since`` (excluded) to ``until`` (included),
        within the retention: the calls themselves, by their own time (``(since, until]`` windows
        partition time, so two attempts within one minute each get their own calls)."""
        found = await self.redis.zrangebyscore(keys.spent(task, agent), f"({since!r}", repr(until))
        tokens = nusd = 0
        for member in found:
            _, t, n = str(member).split(" ")
            tokens, nusd = tokens + int(t), nusd + int(n)
        prices = rates_used(self.prices, [model]) if tokens else {}
        return CostPoint(
            ts=until,
            tokens=float(tokens),
            cost_usd=nusd / NANO,
            model=model,
            estimate=bool(prices),
            prices=prices,
        )
