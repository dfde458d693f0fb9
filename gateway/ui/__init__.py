"""The operator's live web UI at /ui: chat, agents, jobs, PRs and dataset panels (see docs/ui.md)."""

from gateway.ui.plugin import UiPlugin

__all__ = ["UiPlugin"]
