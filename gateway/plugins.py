"""The components that plug into the gateway app; one list used by every way of starting it."""

from __future__ import annotations

from gateway.app import GatewayPlugin


def default_plugins() -> list[GatewayPlugin]:
    from gateway.forge.plugin import forge_plugin
    from gateway.llm_proxy import llm_proxy_plugin
    from gateway.ui import ui_plugin

    return [forge_plugin, llm_proxy_plugin, ui_plugin]
