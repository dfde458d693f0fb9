"""The plugin contract: how a component (forge, jobs, LLM proxy, ...) joins the gateway app.

A plugin is an instance of a ``Plugin`` subclass: a ``name``, a ``settings_model`` (the component's own
pydantic settings class; an instance is passed in, or read from the environment on first use), the
services it ``provides``, ``requires`` and uses when present (``optional``), and ``contribute``, which
*returns* what the component adds -- a ``Contribution``: its services, routers, mounts, MCP tools,
background loops and a lifespan. ``create_app`` installs them; a plugin never sees the app or the MCP
server (the shape of the MCP SDK's ``Extension``: the component must not depend on the composition
layer, so its contribution is data that can be read and tested without building an app; what it
builds may be wired into the services it requires, never into the app).

``order_plugins`` is what ``create_app`` runs before installing anything: it refuses two plugins of one
name, a service provided by two plugins, a required service no plugin provides (naming both the plugin
that needs it and the plugin that provides it) and a dependency cycle; and it orders the plugins so each
contributes after those it requires or uses (otherwise in the order given). ``contribution_of`` then
checks that a plugin provided exactly what it declared. The plugins of a gateway are chosen by name
from the registry in ``gateway.plugins``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from pydantic import BaseModel

from gateway.cancellation import STOP_WAIT_S, stop_task
from gateway.errors import PluginError
from gateway.services import ServiceKey

if TYPE_CHECKING:
    from fastapi import APIRouter
    from starlette.routing import Mount
    from starlette.types import ASGIApp

    from gateway.context import GatewayContext

log = logging.getLogger("kswarm.gateway")
Lifespan = Callable[[], AbstractAsyncContextManager[None]]
Loop = Callable[[], Coroutine[Any, Any, None]]  # a background loop, started with the app
ToolFn = Callable[..., Awaitable[Any]]
S = TypeVar("S", bound=BaseModel)
F = TypeVar("F", bound=ToolFn)


@dataclass(frozen=True)
class McpTool:
    """One MCP tool a component offers: the function (its signature is the tool's input schema)."""

    fn: ToolFn
    name: str
    description: str


@dataclass(frozen=True)
class Door:
    """An ASGI app served at exactly ``path``, for ``methods`` (None: every method), before the app's
    middleware stack and router: for the calls agents make many times a turn (the MCP transport, the
    LLM proxy). What escapes it is answered by the app's exception handlers, as under the stack.
    Anything else at that path goes to the router, where a route of the same path keeps the OpenAPI
    document and answers other methods."""

    path: str
    app: ASGIApp
    methods: frozenset[str] | None = None


class McpTools(list[McpTool]):
    """A component's MCP tools, collected with ``@tools.tool(name=..., description=...)``."""

    def tool(self, *, name: str, description: str) -> Callable[[F], F]:
        def collect(fn: F) -> F:
            self.append(McpTool(fn, name, description))
            return fn

        return collect


@dataclass(frozen=True)
class Contribution:
    """What one plugin adds to the gateway, as data; ``create_app`` installs it.

    ``services``: the service each declared key stands for (exactly ``provides``); ``routers`` and
    ``mounts``: HTTP routes; ``hot_routers``: routes agents call on every turn (the LLM proxy), tried
    before all others on every request (so keep them few); ``doors``: handlers served before the
    app's middleware stack (``Door``); ``tools``: MCP tools; ``background``:
    loops (task name -> coroutine factory) run for the app's lifetime, started after every lifespan
    was entered and cancelled before any is left; ``lifespan``: set-up and tear-down around the
    app's lifetime."""

    services: Mapping[ServiceKey[Any], Any] = field(default_factory=dict)
    routers: Sequence[APIRouter] = ()
    hot_routers: Sequence[APIRouter] = ()
    mounts: Sequence[Mount] = ()
    doors: Sequence[Door] = ()
    tools: Sequence[McpTool] = ()
    background: Mapping[str, Loop] = field(default_factory=dict)
    lifespan: Lifespan | None = None


@contextlib.asynccontextmanager
async def background(loops: Mapping[str, Coroutine[Any, Any, None]]) -> AsyncIterator[None]:
    """The app's background loops (task name -> coroutine): started on entry, cancelled and awaited
    on exit, so a stopping gateway never waits on a loop blocked in a read. A loop that does not end
    within ``STOP_WAIT_S`` of its cancellation (one that swallowed it) is named in the log and left
    behind: the gateway stops all the same. No loops: nothing to start or stop."""
    tasks = [asyncio.create_task(loop, name=name) for name, loop in loops.items()]
    try:
        yield
    finally:
        await asyncio.gather(*(stop_task(task, f"background loop {task.get_name()}") for task in tasks))


@contextlib.asynccontextmanager
async def bounded_stop(name: str, lifespan: AbstractAsyncContextManager[None]) -> AsyncIterator[None]:
    """A plugin's lifespan whose tear-down may take at most ``STOP_WAIT_S``: one that takes longer (a
    close waiting on a stuck call) is cancelled and named in the log, and the gateway stops all the
    same -- as a loop that ignores its cancellation does not hold it either. (Not ``wait_for``: after
    its timeout it waits, unbounded, for the cancelled tear-down to end.)"""
    await lifespan.__aenter__()
    try:
        yield
    finally:
        closing = asyncio.create_task(lifespan.__aexit__(None, None, None), name=f"kswarm-stop-{name}")
        done, _ = await asyncio.wait({closing}, timeout=STOP_WAIT_S)
        if not done:
            closing.cancel()
            log.error("plugin %s took over %ss to stop; the gateway stops without it", name, STOP_WAIT_S)
        elif not closing.cancelled() and closing.exception() is not None:
            log.error("plugin %s failed to stop: %r", name, closing.exception())


class NoSettings(BaseModel):
    """The settings of a plugin that has none of its own."""


class Plugin(ABC, Generic[S]):
    """One component of the gateway; subclass it, set the class attributes, implement ``contribute``."""

    name: ClassVar[str]
    settings_model: type[S]
    provides: ClassVar[tuple[ServiceKey[Any], ...]] = ()
    requires: ClassVar[tuple[ServiceKey[Any], ...]] = ()
    optional: ClassVar[tuple[ServiceKey[Any], ...]] = ()

    def __init__(self, settings: S | None = None) -> None:
        self._settings = settings

    @property
    def settings(self) -> S:
        """The settings given, else the settings model's defaults and environment (read once)."""
        if self._settings is None:
            self._settings = self.settings_model()
        return self._settings

    @abstractmethod
    def contribute(self, ctx: GatewayContext) -> Contribution:
        """What this component adds: its services, routes, tools, loops and lifespan (see ``Contribution``).

        ``ctx.services`` already holds the services of the plugins this one requires or uses."""

    def __repr__(self) -> str:
        return f"<plugin {self.name}>"


def order_plugins(plugins: Iterable[Plugin[Any]]) -> list[Plugin[Any]]:
    """``plugins`` in an order that installs every provider before its users; PluginError if impossible."""
    given = list(plugins)
    by_name: dict[str, Plugin[Any]] = {}
    provider: dict[ServiceKey[Any], Plugin[Any]] = {}
    for plugin in given:
        if plugin.name in by_name:
            raise PluginError(
                f"two plugins are named {plugin.name!r}: {by_name[plugin.name]!r} and {plugin!r}"
            )
        by_name[plugin.name] = plugin
        for key in plugin.provides:
            if key in provider:
                raise PluginError(
                    f"{key.name} is provided by both plugin {provider[key].name!r} and plugin {plugin.name!r}"
                )
            provider[key] = plugin
    after: dict[str, set[str]] = {}
    for plugin in given:
        for key in plugin.requires:
            if key not in provider:
                raise PluginError(
                    f"plugin {plugin.name!r} requires the {key.name}, which plugin {key.provided_by!r} "
                    f"provides: add the {key.provided_by!r} plugin (or remove {plugin.name!r})"
                )
        needed = {provider[k].name for k in (*plugin.requires, *plugin.optional) if k in provider}
        after[plugin.name] = needed - {plugin.name}
    ordered: list[Plugin[Any]] = []
    placed: set[str] = set()
    while len(ordered) < len(given):
        # The first plugin (in the order given) whose providers are all placed: a stable topological order.
        ready = next((p for p in given if p.name not in placed and after[p.name] <= placed), None)
        if ready is None:
            raise PluginError(f"the plugins depend on each other in a cycle: {describe_cycle(after, placed)}")
        ordered.append(ready)
        placed.add(ready.name)
    return ordered


def describe_cycle(after: dict[str, set[str]], placed: set[str]) -> str:
    """One cycle among the unplaced plugins, as ``a -> b -> a`` (``a`` needs ``b``)."""
    start = min(name for name in after if name not in placed)
    path = [start]
    while True:
        nxt = min(n for n in after[path[-1]] if n not in placed)
        if nxt in path:
            return " -> ".join([*path[path.index(nxt) :], nxt])
        path.append(nxt)


def contribution_of(plugin: Plugin[Any], ctx: GatewayContext) -> Contribution:
    """``plugin``'s contribution, its services provided in ``ctx``; PluginError when it provides other
    services than it declared (or one another plugin provides)."""
    before = set(ctx.services.keys())
    contribution = plugin.contribute(ctx)
    if set(ctx.services.keys()) != before:  # services are returned, never provided behind the back
        raise PluginError(f"plugin {plugin.name!r} provided services itself instead of returning them")
    try:
        for key, service in contribution.services.items():
            ctx.services.provide(key, service)
    except PluginError as exc:  # a service provided twice: say by whom
        raise PluginError(f"plugin {plugin.name!r}: {exc}") from exc
    added, declared = set(contribution.services), set(plugin.provides)
    if added != declared:
        missing = ", ".join(sorted(k.name for k in declared - added)) or "none"
        extra = ", ".join(sorted(k.name for k in added - declared)) or "none"
        raise PluginError(
            f"plugin {plugin.name!r} did not provide what it declares "
            f"(missing: {missing}; undeclared: {extra})"
        )
    return contribution
