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
| ``throughput`` | ``gate:merged`` | bars: kernels accepted per bucket |
| ``agent-tokens:<a>``, ``agent-cost:<a>`` | that agent's series | bars |

Each chart has a visible title, its y axis's measure and bucket (``tokens per 5 min``) and its window on
the x axis (``last 6 h``, or ``since the swarm started, 23 min ago`` when the swarm is younger).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from gateway.monitor.charts import Line, render_chart
from gateway.monitor.models import Series, SeriesPoint
from gateway.monitor.series import MINUTE_S, Point, SeriesStore, resample

MAX_LINES = 12
DEFAULT_WINDOW_S = 6 * 3600
StartedAt = Callable[[], Awaitable[float | None]]
PoolDepths = Callable[[], Awaitable[dict[str, dict[str, int]] | None]]


@dataclass(frozen=True)
class ChartSpec:
    chart: str
    title: str
    prefix: str
    measure: str  # what the y axis counts, said under the title with the bucket
    kind: str = "bars"
    unit: str = ""  # suffix of each value (" $", " %")
    gauge: bool = False


CHARTS: dict[str, ChartSpec] = {
    "tokens": ChartSpec("tokens", "Tokens per agent", "tokens:agent:", "tokens"),
    "cost": ChartSpec("cost", "Cost per agent (USD)", "cost:agent:", "USD", unit=" $"),
    "messages": ChartSpec("messages", "Messages by kind", "messages:kind:", "messages"),
    "queue": ChartSpec("queue", "Jobs queued and running per pool", "jobs:", "jobs", kind="line", gauge=True),
    "jobs": ChartSpec("jobs", "Jobs finished per pool", "jobs:finished:", "jobs finished"),
    "pass-rate": ChartSpec(
        "pass-rate", "Pass rate per task", "verdicts:task:", "% of verdicts passing", kind="line", unit=" %"
    ),
    "gate": ChartSpec("gate", "Gate decisions", "gate:", "decisions"),
    "throughput": ChartSpec(
        "throughput", "Kernels accepted (PRs merged by the gate)", "gate:merged", "kernels"
    ),
}
AGENT_CHARTS = {
    "agent-tokens": ("Tokens of {agent}", "tokens:agent:{agent}", "", "tokens"),
    "agent-cost": ("Cost of {agent} (USD)", "cost:agent:{agent}", " $", "USD"),
}


def default_step(window_s: float) -> float:
    """Buckets: ~72 per chart, at least a minute."""
    return max(60.0, round(window_s / 72 / 60) * 60)


def span_words(seconds: float) -> str:
    if seconds < 2 * 3600:
        return f"{max(1, round(seconds / 60))} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.3g} h"
    return f"{seconds / 86400:.3g} days"


@dataclass
class ChartData:
    """One chart over one window: what the SVG draws and the JSON answers."""

    title: str
    kind: str
    unit: str
    lines: list[Line]
    step: float
    axis: str  # the y axis: what it counts, per which bucket
    window: str  # the x axis: which time it covers


class ChartBook:
    """The charts over a window that fits the data: the one asked (6 h by default), cut at the swarm's
    start when it is younger (``started``). The queue chart's newest bucket is the job runner's depth
    now (``depths``, the overview's numbers), not the last sample: a chart never says 0 running while
    jobs run."""

    def __init__(
        self, series: SeriesStore, started: StartedAt | None = None, depths: PoolDepths | None = None
    ) -> None:
        self.series = series
        self.started = started
        self.depths = depths

    async def window(self, since: float | None, until: float | None) -> tuple[float, float, str]:
        until = until or time.time()
        asked = since or until - DEFAULT_WINDOW_S
        born = await self.started() if self.started is not None else None
        if born is not None and asked < born < until:
            since = float(int(born // MINUTE_S) * MINUTE_S)
            return since, until, f"since the swarm started, {span_words(until - born)} ago"
        return asked, until, f"last {span_words(until - asked)}"

    async def data(self, chart: str, since: float | None = None, until: float | None = None) -> ChartData:
        """``chart`` over the window; KeyError for an unknown chart."""
        since, until, window = await self.window(since, until)
        step = default_step(until - since)
        per = f"per {span_words(step)}"
        if ":" in chart and chart.split(":", 1)[0] in AGENT_CHARTS:
            base, agent = chart.split(":", 1)
            title, name, unit, measure = AGENT_CHARTS[base]
            points = await self.series.read(name.format(agent=agent), since, until)
            line = Line(agent, resample(points, since, until, step))
            axis = f"{measure} {per}"
            return ChartData(title.format(agent=agent), "bars", unit, [line], step, axis, window)
        spec = CHARTS[chart]
        names = await self.series.names(spec.prefix)
        if chart == "queue":
            names = [n for n in names if n.startswith(("jobs:queued:", "jobs:running:"))]
        if chart == "throughput":
            names = [n for n in names if n == spec.prefix]
        axis = f"{spec.measure} (sampled)" if spec.gauge else f"{spec.measure} {per}"
        if chart == "pass-rate":
            lines = await self._pass_rates(names, since, until, step)
            return ChartData(spec.title, spec.kind, spec.unit, lines, step, axis, window)
        lines = []
        for name in names[:MAX_LINES]:
            points = resample(await self.series.read(name, since, until), since, until, step, spec.gauge)
            label = name.removeprefix("jobs:") if chart == "queue" else name[len(spec.prefix) :] or "accepted"
            lines.append(Line(label, points))
        if chart == "queue":
            lines = await self._now_in_queue(lines, since, until, step)
        return ChartData(spec.title, spec.kind, spec.unit, lines, step, axis, window)

    async def _now_in_queue(self, lines: list[Line], since: float, until: float, step: float) -> list[Line]:
        """The newest bucket of each pool's queued and running lines is the depth now."""
        depths = await self.depths() if self.depths is not None else None
        if not depths:
            return lines
        by_label = {line.label: line for line in lines}
        for pool, depth in depths.items():
            for what in ("queued", "running"):
                label = f"{what}:{pool}"
                line = by_label.get(label) or Line(label, resample([], since, until, step, gauge=True))
                by_label[label] = line
                if line.points:
                    last = line.points[-1]
                    line.points[-1] = Point(last.ts, float(depth[what]))
        return sorted(by_label.values(), key=lambda line: line.label)[:MAX_LINES]

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
        d = await self.data(chart, since, until)
        return render_chart(d.title, d.lines, d.kind, d.unit, chart_id=chart, axis=d.axis, window=d.window)

    async def json(self, chart: str, since: float | None = None, until: float | None = None) -> list[Series]:
        d = await self.data(chart, since, until)
        gauge = chart in CHARTS and CHARTS[chart].gauge
        return [
            Series(
                name=line.label,
                step_s=d.step,
                gauge=gauge,
                points=[SeriesPoint(ts=p.ts, value=p.value) for p in line.points],
            )
            for line in d.lines
        ]
