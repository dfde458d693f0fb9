"""The plugin contract: declared dependencies decide the order, and plugins that do not fit together,
or that take a service another plugin provides, stop the gateway before it starts."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from gateway.app import create_app
from gateway.config import GatewaySettings
from gateway.context import GatewayContext
from gateway.errors import GatewayError, PluginError
from gateway.forge.embedded.forge import EmbeddedForge
from gateway.forge.gitea.webhook import HOOK_PATH
from gateway.forge.plugin import ForgePlugin
from gateway.forge.settings import ForgeSettings
from gateway.jobs.plugin import JobsPlugin
from gateway.kb.plugin import KBPlugin
from gateway.plugin import (
    STOP_WAIT_S,
    Contribution,
    Door,
    NoSettings,
    Plugin,
    background,
    bounded_stop,
    order_plugins,
)
from gateway.plugins import PLUGINS, default_plugins, get_plugin, replace_plugins, without_plugins
from gateway.services import FORGE, FORGE_SETTINGS, JOB_SERVICE, KNOWLEDGE_BASE, ServiceKey
from gateway.tasks.plugin import TasksPlugin

A_KEY: ServiceKey[str] = ServiceKey("a-service", "a")
B_KEY: ServiceKey[str] = ServiceKey("b-service", "b")


def probe(
    name: str,
    provides: tuple[ServiceKey[Any], ...] = (),
    requires: tuple[ServiceKey[Any], ...] = (),
    optional: tuple[ServiceKey[Any], ...] = (),
    actually_provides: tuple[ServiceKey[Any], ...] | None = None,
) -> Plugin[NoSettings]:
    """A plugin that declares what it is told and provides ``actually_provides`` (default: the declared)."""

    class Probe(Plugin[NoSettings]):
        settings_model = NoSettings

        def contribute(self, ctx: GatewayContext) -> Contribution:
            given = provides if actually_provides is None else actually_provides
            return Contribution(services={key: f"{name}'s {key.name}" for key in given})

    Probe.name = name
    Probe.provides, Probe.requires, Probe.optional = provides, requires, optional
    return Probe()


def names(plugins: list[Plugin[Any]]) -> list[str]:
    return [p.name for p in plugins]


def settings(tmp: Path) -> GatewaySettings:
    return GatewaySettings(home=tmp, redis_url="redis://127.0.0.1:1/0")  # never connected here


def test_providers_are_installed_before_their_users_whatever_the_list_order() -> None:
    user = probe("user", requires=(A_KEY,), optional=(B_KEY,))
    a, b = probe("a", provides=(A_KEY,)), probe("b", provides=(B_KEY,))
    assert names(order_plugins([user, b, a])) == ["b", "a", "user"]
    assert names(order_plugins([a, user, b])) == ["a", "b", "user"]
    # Unrelated plugins keep the order they were given in.
    assert names(order_plugins([probe("z"), probe("y"), a])) == ["z", "y", "a"]
    # The registered components, reversed: the forge still comes before everything that uses it.
    ordered = names(order_plugins(reversed(default_plugins())))
    for user_name in ("jobs", "tasks", "kb"):
        assert ordered.index("forge") < ordered.index(user_name), ordered


def test_a_missing_required_service_names_both_plugins(short_tmp: Path) -> None:
    with pytest.raises(PluginError) as refused:
        order_plugins([probe("user", requires=(A_KEY,))])
    assert (
        "'user'" in str(refused.value) and "'a'" in str(refused.value) and "a-service" in str(refused.value)
    )
    # The knowledge base is a repo in the forge: without the forge the gateway does not start.
    with pytest.raises(PluginError, match=r"plugin 'kb' requires the forge, which plugin 'forge' provides"):
        create_app(settings(short_tmp), plugins=[TasksPlugin(), KBPlugin()])


def test_an_optional_service_stays_optional(short_tmp: Path) -> None:
    """Jobs work without a forge (a full sha, a named repo); with one they use it."""
    alone = create_app(settings(short_tmp / "a"), plugins=[JobsPlugin()])
    assert alone.state.ctx.services.find(FORGE) is None
    assert alone.state.ctx.services.get(JOB_SERVICE).refs.forge is None
    both = create_app(settings(short_tmp / "b"), plugins=[JobsPlugin(), ForgePlugin()])
    assert isinstance(both.state.ctx.services.get(JOB_SERVICE).refs.forge, EmbeddedForge)


def test_a_dependency_cycle_is_refused_naming_it() -> None:
    a = probe("a", provides=(A_KEY,), requires=(B_KEY,))
    b = probe("b", provides=(B_KEY,), optional=(A_KEY,))
    with pytest.raises(PluginError, match=r"cycle: a -> b -> a"):
        order_plugins([a, b, probe("c")])


def test_a_plugin_cannot_take_over_a_service_another_provides(short_tmp: Path) -> None:
    """Attack: a second component that declares the forge would decide who may read which job (job access
    asks the forge who reviewed a PR). Declared or not, it is refused before the gateway starts."""
    rogue = probe("rogue", provides=(FORGE,))
    with pytest.raises(PluginError, match=r"forge is provided by both plugin 'forge' and plugin 'rogue'"):
        create_app(settings(short_tmp / "a"), plugins=[*default_plugins(), rogue])
    sneaky = probe("sneaky", actually_provides=(FORGE,))  # declares nothing, provides the forge
    with pytest.raises(PluginError, match="plugin 'sneaky': forge is already provided"):
        create_app(settings(short_tmp / "b"), plugins=[ForgePlugin(), sneaky])
    first = probe("first", actually_provides=(FORGE,))  # installed before the real forge
    with pytest.raises(
        PluginError, match=r"plugin 'first' did not provide what it declares.*undeclared: forge"
    ):
        create_app(settings(short_tmp / "c"), plugins=[first, ForgePlugin()])


def test_a_plugin_must_provide_what_it_declares(short_tmp: Path) -> None:
    liar = probe("liar", provides=(A_KEY,), actually_provides=())
    with pytest.raises(
        PluginError, match=r"plugin 'liar' did not provide what it declares \(missing: a-service"
    ):
        create_app(settings(short_tmp), plugins=[liar])


def test_two_plugins_of_one_name_are_refused() -> None:
    with pytest.raises(PluginError, match="two plugins are named 'forge'"):
        order_plugins([ForgePlugin(), ForgePlugin()])


def test_the_registry_builds_every_component_by_name(short_tmp: Path) -> None:
    plugins = default_plugins()
    assert names(plugins) == list(PLUGINS)
    assert {type(p) for p in plugins} == {type(get_plugin(n)) for n in PLUGINS}
    with pytest.raises(KeyError, match="no plugin 'nope'; plugins: forge"):
        get_plugin("nope")
    mine = TasksPlugin()
    swapped = replace_plugins(plugins, mine, probe("extra"))
    assert swapped[names(swapped).index("tasks")] is mine and names(swapped)[-1] == "extra"
    assert "jobs" not in names(without_plugins(plugins, "jobs"))
    # What needs the job runner goes with it; what only uses it when present stays.
    assert "counterexamples" not in names(without_plugins(plugins, "jobs"))
    assert "monitor" in names(without_plugins(plugins, "jobs"))
    app = create_app(settings(short_tmp), plugins=plugins)
    provided = set(app.state.ctx.services.keys())
    assert {FORGE, JOB_SERVICE, KNOWLEDGE_BASE} <= provided
    assert provided == {key for p in plugins for key in p.provides}


@pytest.mark.parametrize(
    ("variable", "value", "line"),
    [
        ("KSWARM_FORGE_GATE_SWEEP_S", "-1", "gateway: bad component settings: gate_sweep_s: Input should be"),
        ("KSWARM_JOBS_POOLS", "notjson", 'gateway: error parsing value for field "pools"'),
    ],
)
def test_python_m_gateway_refuses_a_bad_component_variable_in_one_line(
    short_tmp: Path, variable: str, value: str, line: str
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KSWARM_")}
    env.update({"KSWARM_GATEWAY_HOME": str(short_tmp), "KSWARM_GATEWAY_PORT": "1", variable: value})
    done = subprocess.run(
        [sys.executable, "-m", "gateway"], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith(line) and "Traceback" not in done.stderr and done.stderr.count("\n") == 1


def test_a_contribution_is_data_read_without_an_app(short_tmp: Path) -> None:
    """A plugin hands back what it adds; nothing is installed until ``create_app`` installs it."""
    ctx = GatewayContext.build(settings(short_tmp))
    forge = ForgePlugin().contribute(ctx)
    assert set(forge.services) == set(ForgePlugin.provides)
    for key, service in forge.services.items():
        ctx.services.provide(key, service)
    jobs = JobsPlugin().contribute(ctx)
    assert {t.name for t in jobs.tools} >= {"job_submit", "job_status", "job_logs", "job_cancel"}
    assert any(r.path.startswith("/api/jobs") for router in jobs.routers for r in router.routes)
    assert list(jobs.background) == ["kswarm-jobs-reclaim"]
    assert forge.lifespan is not None and "kswarm-gate" in forge.background


def test_two_loops_of_one_name_are_refused(short_tmp: Path) -> None:
    class Looper(Plugin[NoSettings]):
        settings_model = NoSettings

        def contribute(self, ctx: GatewayContext) -> Contribution:
            return Contribution(background={"kswarm-loop": looping})

    async def looping() -> None:
        return None

    first, second = Looper(), Looper()
    first.name, second.name = "first", "second"  # type: ignore[misc]
    with pytest.raises(PluginError, match=r"'second'.*'kswarm-loop' exists already"):
        create_app(settings(short_tmp), plugins=[first, second])


async def test_an_app_without_background_loops_starts_and_stops() -> None:
    async with background({}):
        pass


def test_a_service_provided_behind_the_back_is_refused(short_tmp: Path) -> None:
    """Attack: a plugin that declares nothing and puts the forge into the services itself, bypassing
    the declared-provisions check, is refused before the gateway starts."""

    class Sneak(Plugin[NoSettings]):
        name = "sneak"
        settings_model = NoSettings

        def contribute(self, ctx: GatewayContext) -> Contribution:
            ctx.services.provide(FORGE, "not a forge")  # type: ignore[arg-type]
            return Contribution()

    with pytest.raises(PluginError, match="'sneak' provided services itself"):
        create_app(settings(short_tmp), plugins=[Sneak()])


def test_the_webhook_secret_is_read_once_from_its_file(short_tmp: Path) -> None:
    """The secret the Gitea hooks were made with is the one deliveries are checked against, for the
    gateway's life: a file changed or removed later changes neither (nor is read per delivery)."""
    secret_file = short_tmp / "hook-secret"
    secret_file.write_text("first-secret\n")
    forge_settings = ForgeSettings(
        gitea_url="http://127.0.0.1:9",
        gitea_admin_token="t",
        gitea_webhook_url="http://127.0.0.1:9/hook",
        gitea_webhook_secret_file=secret_file,
    )
    ctx = GatewayContext.build(settings(short_tmp))
    contribution = ForgePlugin(forge_settings).contribute(ctx)
    secret_file.unlink()
    assert contribution.services[FORGE_SETTINGS].webhook_secret() == "first-secret"
    assert any(r.path == HOOK_PATH for router in contribution.routers for r in router.routes)


async def test_a_plugin_whose_stop_hangs_does_not_hold_the_gateway(caplog: pytest.LogCaptureFixture) -> None:
    @contextlib.asynccontextmanager
    async def stuck() -> AsyncIterator[None]:
        yield
        await asyncio.Event().wait()  # a close waiting on something that never comes

    stopped = asyncio.Event()

    async def run() -> None:
        async with bounded_stop("stuck", stuck()):
            pass
        stopped.set()

    started = asyncio.get_running_loop().time()
    await asyncio.wait_for(run(), STOP_WAIT_S + 10)
    assert stopped.is_set() and asyncio.get_running_loop().time() - started >= STOP_WAIT_S
    assert "plugin stuck took over" in caplog.text


def test_the_routes_agents_call_every_turn_are_tried_first(short_tmp: Path) -> None:
    """The router tries routes in order: the LLM proxy (a plugin's
    ``hot_routers``) and the chat calls come before the forge's, the UI's and the rest, whatever the
    plugins' order. The OpenAPI document lists the paths in the order they are tried."""
    app = create_app(settings(short_tmp), plugins=list(reversed(default_plugins())))
    assert app.router.routes[0].path == "/mcp"  # type: ignore[attr-defined]
    paths = list(app.openapi()["paths"])
    assert paths[:7] == [
        "/v1/messages",
        "/v1/messages/count_tokens",
        "/api/channels/{channel}/messages",
        "/api/dms/{peer}/messages",
        "/api/inbox",
        "/api/inbox/ack",
        "/api/heartbeat",
    ]


def test_routes_added_flat_serve_and_document_as_included_ones(
    short_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The app adds each router's routes to its own list (``gateway.app.add_routes``) instead of
    FastAPI's lazy ``include_router`` entries: the same OpenAPI document, path for path and operation
    for operation, as the same app with every router included."""
    import gateway.app as app_module

    flat = create_app(settings(short_tmp), plugins=default_plugins())
    monkeypatch.setattr(app_module, "add_routes", lambda app, router: app.include_router(router))
    included = create_app(settings(short_tmp), plugins=default_plugins())
    assert all(type(r).__name__ != "_IncludedRouter" for r in flat.router.routes)
    assert any(type(r).__name__ == "_IncludedRouter" for r in included.router.routes)
    assert flat.openapi() == included.openapi()
    assert list(flat.openapi()["paths"]) == list(included.openapi()["paths"])


def door_plugin(name: str, path: str) -> Plugin[NoSettings]:
    """A plugin with one door at ``path`` for POST, which answers with the method and path it got."""

    async def answer(scope: Any, receive: Any, send: Any) -> None:
        body = f"door {scope['method']} {scope['path']}".encode()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body})

    class Doorway(Plugin[NoSettings]):
        settings_model = NoSettings

        def contribute(self, ctx: GatewayContext) -> Contribution:
            return Contribution(doors=[Door(path, answer, frozenset({"POST"}))])

    Doorway.name = name
    return Doorway()


async def test_a_door_takes_its_methods_at_its_path_and_the_router_the_rest(short_tmp: Path) -> None:
    """A plugin's door answers its methods at exactly its path, before the app's stack; another method,
    or the path with a slash more, goes to the router (here: no route, a 404 in the app's shape)."""
    app = create_app(settings(short_tmp), plugins=[door_plugin("doorway", "/x/door")])
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://kswarm") as client:
        served = await client.post("/x/door")
        assert (served.status_code, served.text) == (200, "door POST /x/door")
        assert (await client.get("/x/door")).status_code == 404
        assert (await client.post("/x/door/")).status_code == 404
    # The LLM proxy's doors are POST only: a GET reaches its route, which says which method it takes.
    proxied = create_app(settings(short_tmp), plugins=default_plugins())
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=proxied), base_url="http://kswarm"
    ) as client:
        refused = await client.get("/v1/messages")
    assert refused.status_code == 405 and refused.headers["allow"] == "POST"


def test_two_doors_at_one_path_are_refused(short_tmp: Path) -> None:
    with pytest.raises(PluginError, match=r"'second'.*door at /x/door exists already"):
        create_app(
            settings(short_tmp), plugins=[door_plugin("first", "/x/door"), door_plugin("second", "/x/door")]
        )
    with pytest.raises(PluginError, match=r"door at /mcp exists already"):
        create_app(settings(short_tmp), plugins=[door_plugin("first", "/mcp")])


def raising_door(name: str, path: str, exc: Exception) -> Plugin[NoSettings]:
    async def door(scope: Any, receive: Any, send: Any) -> None:
        raise exc

    class Raiser(Plugin[NoSettings]):
        settings_model = NoSettings

        def contribute(self, ctx: GatewayContext) -> Contribution:
            return Contribution(doors=[Door(path, door)])

    Raiser.name = name
    return Raiser()


async def test_what_escapes_a_door_is_answered_as_under_the_stack(short_tmp: Path) -> None:
    """A door that raises gets the app's exception handlers: Redis away is a 503 with Retry-After in the
    path's shape (Anthropic's under /v1/), a refusal its status, a crash a 500 raised for the log."""
    plugins = [
        raising_door("redis", "/v1/redis-away", RedisConnectionError("gone")),
        raising_door("refusal", "/x/refused", GatewayError("not here", 409)),
        raising_door("crash", "/x/crash", RuntimeError("a bug")),
    ]
    app = create_app(settings(short_tmp), plugins=plugins)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://kswarm") as client:
        away = await client.post("/v1/redis-away")
        refused = await client.post("/x/refused")
        crashed = await client.post("/x/crash")
    assert away.status_code == 503 and away.headers["retry-after"] == "1"
    assert away.json()["type"] == "error" and "Redis" in away.json()["error"]["message"]
    assert refused.status_code == 409 and refused.json()["detail"] == "not here"
    assert crashed.status_code == 500
