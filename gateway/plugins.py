"""The components that plug into the gateway app; one list used by every way of starting it."""

from __future__ import annotations

from gateway.app import GatewayPlugin


def default_plugins() -> list[GatewayPlugin]:
    from gateway.forge.plugin import forge_plugin
    from gateway.kb.plugin import kb_plugin
    from gateway.llm_proxy import llm_proxy_plugin
    from gateway.tasks.plugin import tasks_plugin
    from gateway.ui import ui_plugin
    from orchestrator.dataset.plugin import dataset_plugin
    from orchestrator.jobs.plugin import jobs_plugin

    # Order matters only for the UI, which shows whatever the others registered before it.
    return [forge_plugin, llm_proxy_plugin, jobs_plugin, tasks_plugin, kb_plugin, dataset_plugin, ui_plugin]
