"""The components that plug into the gateway app; one list used by every way of starting it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway.app import GatewayPlugin

if TYPE_CHECKING:
    from gateway.llm.config import LLMProxySettings


def default_plugins(llm: LLMProxySettings | None = None) -> list[GatewayPlugin]:
    """Every component; ``llm``: the LLM proxy's settings (default: from ``KSWARM_LLM_*``)."""
    from gateway.dataset.plugin import dataset_plugin
    from gateway.forge.plugin import forge_plugin
    from gateway.jobs.plugin import jobs_plugin
    from gateway.kb.plugin import kb_plugin
    from gateway.llm.proxy import llm_proxy_plugin, make_llm_proxy_plugin
    from gateway.tasks.plugin import tasks_plugin
    from gateway.ui import ui_plugin

    proxy = llm_proxy_plugin if llm is None else make_llm_proxy_plugin(llm)
    # Order matters only for the UI, which shows whatever the others registered before it.
    return [forge_plugin, proxy, jobs_plugin, tasks_plugin, kb_plugin, dataset_plugin, ui_plugin]
