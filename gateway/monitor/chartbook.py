"""The charts the UI shows, built from the series: which series, how they combine, and as JSON or SVG.

| chart | series | shown as |
|---|---|---|
| ``tokens`` | ``tokens:agent:<a>`` | stacked bars per agent (the stack is the swarm) |
| ``cost`` | ``cost:agent:<a>`` (USD) | stacked bars per agent |
| ``messages`` | ``messages:kind:<kind>`` | stacked bars per kind (chat, pr, job, gate, ops) |
| ``queue`` | ``jobs:queued:<pool>``, ``jobs:running:<pool>`` (gauges) | lines per pool |
| ``jobs`` | ``jobs:finished:<pool>`` | stacked bars per pool |
| ``pass-rate`` | ``verdicts:task:<t>:pass`` / ``:total`` | a line per task: passing verdicts per bucket (%) |
| ``gate`` | ``gate:<action>`` | stacked bars per decision (blocked, merged, merge-failed) |
| ``agent-tokens:<a>``, ``agent-cost:<a>`` | that agent's series | bars |
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from gateway.monitor.charts import Line, render_chart
from gateway.monitor.models import Series, SeriesPoint
from gateway.monitor.series import Point, SeriesStore, resample

MAX_LINES = 12
DEFAULT_WINDOW_S = 6 * 3600


@dataclass(frozen=True)
class ChartSpec:
    chart: str
    title: str
    prefix: str
    kind: str = "bars"
    unit: str = ""
    gauge: bool = False
    suffix: str = ""


CHARTS: dict[str, ChartSpec] = {
    "tokens": ChartSpec("tokens", "Tokens per agent", "tokens:agent:"),
    "cost": ChartSpec("cost", "Cost per agent (USD)", "cost:agent:", unit=" $"),
    "messages": ChartSpec("messages", "Messages by kind", "messages:kind:"),
    "queue": ChartSpec("queue", "Jobs queued and running per pool", "jobs:", kind="line", gauge=True),
    "jobs": ChartSpec("jobs", "Jobs finished per pool", "jobs:finished:"),
    "pass-rate": ChartSpec("pass-rate", "Pass rate per task", "verdicts:task:", kind="line", unit=" %"),
    "gate": ChartSpec("gate", "Gate decisions", "gate:"),
}
AGENT_CHARTS = {
    "agent-tokens": ("Tokens of {agent}", "tokens:agent:{agent}", ""),
    "agent-cost": ("Cost of {agent} (USD)", "cost:agent:{agent}", " $"),
}


def default_step(window_s: float) -> float:
    """Buckets: ~72 per chart, at least a minute."""
    return max(60.0, round(window_s / 72 / 60) * 60)


class ChartBook:
    def __init__(self, series: SeriesStore) -> None:
        self.series = series

    async def lines(
        self, chart: str, since: float | None = None, until: float | None = None, step: float | None = None
    ) -> tuple[str, str, str, list[Line], float]:
        """(title, kind, unit, lines, step) of ``chart``; KeyError for an unknown chart."""
        until = until or time.time()
        since = since or until - DEFAULT_WINDOW_S
        step = step or default_step(until - since)
        if ":" in chart and chart.split(":", 1)[0] in AGENT_CHARTS:
            base, agent = chart.split(":", 1)
            title, name, unit = AGENT_CHARTS[base]
            points = await self.series.read(name.format(agent=agent), since, until)
            return (
                title.format(agent=agent),
                "bars",
                unit,
                [Line(agent, resample(points, since, until, step))],
                step,
            )
        spec = CHARTS[chart]
        names = await self.series.names(spec.prefix)
        if chart == "queue":
            names = [n for n in names if n.startswith(("jobs:queued:", "jobs:running:"))]
        if chart == "pass-rate":
            return spec.title, spec.kind, spec.unit, await self._pass_rates(names, since, until, step), step
        lines = []
        for name in names[:MAX_LINES]:
            points = resample(await self.series.read(name, since, until), since, until, step, spec.gauge)
            label = name[len(spec.prefix) :] if chart != "queue" else name.removeprefix("jobs:")
            lines.append(Line(label, points))
        return spec.title, spec.kind, spec.unit, lines, step

    async def _pass_rates(self, names: list[str], since: float, until: float, step: float) -> list[Line]:
        tasks = sorted({n[len("verdicts:task:") :].rsplit(":", 1)[0] for n in names if n.endswith(":total")})
        out = []
        for task in tasks[:MAX_LINES]:
            total = resample(
                await self.series.read(f"verdicts:task:{task}:total", since, until), since, until, step
            )
            passed = resample(
                await self.series.read(f"verdicts:task:{task}:pass", since, until), since, until, step
            )
            points = [
                Point(t.ts, 100.0 * p.value / t.value) for t, p in zip(total, passed, strict=True) if t.value
            ]
            out.append(Line(task, points))
        return out

    async def svg(self, chart: str, since: float | None = None, until: float | None = None) -> str:
        title, kind, unit, lines, _ = await self.lines(chart, since, until)
        return render_chart(title, lines, kind, unit, chart_id=chart)

    async def json(self, chart: str, since: float | None = None, until: float | None = None) -> list[Series]:
        _, _, _, lines, step = await self.lines(chart, since, until)
        gauge = chart in CHARTS and CHARTS[chart].gauge
        return [
            Series(
                name=line.label,
                step_s=step,
                gauge=gauge,
                points=[SeriesPoint(ts=p.ts, value=p.value) for p in line.points],
            )
            for line in lines
        ]
