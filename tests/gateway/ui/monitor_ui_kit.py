"""A UI gateway with the monitor (fast thresholds), the search index and the real job runner."""

from __future__ import annotations

from typing import Any

from jobs_kit import jobs_plugin
from ui_kit import UiGateway, ui_plugins

from gateway.monitor.plugin import MonitorPlugin
from gateway.monitor.settings import MonitorSettings
from gateway.plugin import Plugin
from gateway.search.plugin import SearchPlugin


class MonitorUiGateway(UiGateway):
    def plugins(self) -> list[Plugin[Any]]:
        fast = MonitorSettings(
            stall_after_s=3.0, attention_every_s=0.3, sample_s=0.3, pr_blocked_after_s=0.0, lease_s=5.0
        )
        return ui_plugins(jobs_plugin(), MonitorPlugin(fast), SearchPlugin())
