"""``MonitorPlugin`` (``monitor``): Attention, timelines, history and charts, cost per task, operator actions.

Provides ``MONITOR`` and ``LIVENESS`` (agents' liveness, with its stall threshold); uses the forge, the
gate, the job runner, the task board and the LLM proxy when
they are registered (each part of the monitor says so when its source is missing). Its lifespan runs the
feeder (``gateway.monitor.feeder``).
"""

from __future__ import annotations

from gateway.context import GatewayContext
from gateway.monitor import routes
from gateway.monitor.service import MONITOR, MonitorService
from gateway.monitor.settings import MonitorSettings
from gateway.plugin import Contribution, Plugin
from gateway.services import FORGE, JOB_SERVICE, LIVENESS, LLM_USAGE, REVIEW_GATE, TASK_BOARD


class MonitorPlugin(Plugin[MonitorSettings]):
    name = "monitor"
    settings_model = MonitorSettings
    provides = (MONITOR, LIVENESS)
    optional = (FORGE, REVIEW_GATE, JOB_SERVICE, TASK_BOARD, LLM_USAGE)

    def contribute(self, ctx: GatewayContext) -> Contribution:
        svc = MonitorService.build(ctx, self.settings)
        return Contribution(
            services={MONITOR: svc, LIVENESS: svc.liveness},
            routers=[routes.router],
            background={"kswarm-monitor-feeder": svc.feeder.run},
        )
