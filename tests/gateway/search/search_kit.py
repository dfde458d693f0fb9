"""Test support for the search suite: a real gateway (uvicorn in a thread, real Redis) with the search
index plugin."""

from __future__ import annotations

from typing import Any

from gateway.plugin import Plugin
from gateway.plugins import default_plugins, replace_plugins
from gateway.search.plugin import SearchPlugin
from kstest.gateway import GatewayThread


class SearchGateway(GatewayThread):
    def plugins(self) -> list[Plugin[Any]]:
        return replace_plugins(default_plugins(), SearchPlugin())
