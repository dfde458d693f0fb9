"""The gateway's components by name: one registry, used by every way of starting the gateway.

``PLUGINS`` maps a plugin's short name to its class (``module:Class``, imported only when asked for);
``get_plugin(name, settings)`` builds one. ``default_plugins`` is every registered component, and
``replace_plugins`` swaps some of them for differently configured ones (the demo, tests). The order of a
list does not matter: ``create_app`` installs each plugin after the ones it declares it depends on.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from gateway.plugin import Plugin

if TYPE_CHECKING:
    from gateway.llm.config import LLMProxySettings

PLUGINS: dict[str, str] = {
    "forge": "gateway.forge.plugin:ForgePlugin",
    "llm": "gateway.llm.plugin:LLMProxyPlugin",
    "jobs": "gateway.jobs.plugin:JobsPlugin",
    "tasks": "gateway.tasks.plugin:TasksPlugin",
    "kb": "gateway.kb.plugin:KBPlugin",
    "dataset": "gateway.dataset.plugin:DatasetPlugin",
    "ui": "gateway.ui.plugin:UiPlugin",
    "monitor": "gateway.monitor.plugin:MonitorPlugin",
    "search": "gateway.search.plugin:SearchPlugin",
    "counterexamples": "gateway.counterexamples.plugin:CounterexamplesPlugin",
}


def plugin_class(name: str) -> type[Plugin[Any]]:
    """The class registered as ``name``; KeyError naming the registered ones otherwise."""
    try:
        module, _, attr = PLUGINS[name].partition(":")
    except KeyError:
        raise KeyError(f"no plugin {name!r}; plugins: {', '.join(PLUGINS)}") from None
    cls: type[Plugin[Any]] = getattr(importlib.import_module(module), attr)
    return cls


def get_plugin(name: str, settings: BaseModel | None = None) -> Plugin[Any]:
    """The plugin ``name`` with ``settings`` (default: its settings model's, from the environment)."""
    return plugin_class(name)(settings)


def default_plugins(llm: LLMProxySettings | None = None) -> list[Plugin[Any]]:
    """Every component; ``llm``: the LLM proxy's settings (default: from ``KSWARM_LLM_*``)."""
    return [get_plugin(name, llm if name == "llm" else None) for name in PLUGINS]


def replace_plugins(plugins: Iterable[Plugin[Any]], *replacements: Plugin[Any]) -> list[Plugin[Any]]:
    """``plugins`` with each of ``replacements`` in place of the plugin of the same name (or added)."""
    mine = {p.name: p for p in replacements}
    out = [mine.pop(p.name, p) for p in plugins]
    return [*out, *mine.values()]


def without_plugins(plugins: Iterable[Plugin[Any]], *names: str) -> list[Plugin[Any]]:
    """``plugins`` less the ones named and those that require a service only those provided (a gateway
    without the job runner has no counterexamples either)."""
    kept = [p for p in plugins if p.name not in names]
    while True:
        offered = {key for p in kept for key in p.provides}
        able = [p for p in kept if all(key in offered for key in p.requires)]
        if len(able) == len(kept):
            return kept
        kept = able
