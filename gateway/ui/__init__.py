"""The operator's live web UI at /ui: chat, agents, jobs, PRs and dataset panels (see docs/ui.md)."""

from gateway.ui.plugin import ui_plugin

__all__ = ["ui_plugin"]
