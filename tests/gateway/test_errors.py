"""One error hierarchy, answered in one place: the shape a prefix's clients expect over REST (with the
code), the same message (and its HTTP status) as an MCP tool error, the client's class picked by the
code, and nothing of an unexpected exception's text."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis as redis_sync
from fastapi import APIRouter
from pydantic import BaseModel, Field

from gateway.client import BadInput, GatewayClient, GatewayFailed, GatewayTarget, Refused
from gateway.context import GatewayContext
from gateway.errors import INTERNAL_MESSAGE, ChatError, ForgeError, GatewayError, ProxyError, RuleViolation
from gateway.plugin import Contribution, McpTools, NoSettings, Plugin
from gateway.plugins import default_plugins
from kstest.gateway import GatewayThread
from kstest.mcp_client import ToolFailed, call, mcp_session

HTML = {"Accept": "text/html"}
EVIL = "<script>alert(1)</script>"


class Strict(BaseModel):
    count: int = Field(ge=1)


class Refuser(Plugin[NoSettings]):
    """Routes under each prefix and tools that refuse the way components do, and one that crashes."""

    name = "refuser"
    settings_model = NoSettings

    def contribute(self, ctx: GatewayContext) -> Contribution:
        router, tools = APIRouter(), McpTools()
        for prefix in ("/api/refuser", "/api/v1/refuser", "/v1/refuser", "/ui/refuser"):

            @router.get(f"{prefix}/{{what}}")
            async def refuse(what: str) -> dict[str, Any]:
                if what == "rule":
                    raise RuleViolation("single_node", "8 devices do not fit one node")
                if what == "busy":
                    raise ChatError("slow down", 429, headers={"Retry-After": "3"})
                if what == "value":
                    raise ValueError("not a number: 'x'")
                if what == "echo":
                    raise ForgeError(f"no repo {EVIL}", 404)
                raise ProxyError("upstream unreachable: ConnectError", 502)

        @tools.tool(name="refuser_rule", description="Refuses by a pool rule.")
        async def refuser_rule() -> str:
            raise RuleViolation("single_node", "8 devices do not fit one node")

        @tools.tool(name="refuser_model", description="Builds a request model from its argument.")
        async def refuser_model(count: int) -> int:
            return Strict(count=count).count

        @tools.tool(name="refuser_crash", description="Crashes.")
        async def refuser_crash() -> str:
            raise RuntimeError("the database password is hunter2")

        return Contribution(routers=[router], tools=tools)


@pytest.fixture(scope="module")
def gw(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayThread]:
    client = redis_sync.Redis.from_url(redis_url)
    client.flushall()  # one gateway for the module, on an empty Redis
    client.close()

    class RefuserGateway(GatewayThread):
        def plugins(self) -> list[Plugin[Any]]:
            return [*default_plugins(), Refuser()]

    home: Path = tmp_path_factory.mktemp("errors") / "home"
    gateway = RefuserGateway(home, redis_url)
    gateway.start()
    try:
        yield gateway
    finally:
        gateway.stop()


def test_each_prefix_answers_in_its_clients_shape(gw: GatewayThread) -> None:
    with gw.client(gw.operator_token) as op:
        ours = op.get("/api/refuser/rule")
        gitea = op.get("/api/v1/refuser/rule")
        anthropic = op.get("/v1/refuser/rule")
    message = "refused by rule single_node: 8 devices do not fit one node"
    assert (ours.status_code, ours.json()) == (422, {"detail": message, "code": "rule_violation"})
    assert (gitea.status_code, gitea.json()) == (422, {"message": message, "url": ""})
    assert anthropic.status_code == 422
    assert anthropic.json() == {"type": "error", "error": {"type": "api_error", "message": message}}


def test_status_headers_and_value_errors(gw: GatewayThread) -> None:
    """A ``ValueError`` escaping a route is no refusal (bad input is refused on purpose): a 500 that
    repeats nothing of it, its traceback in the gateway's log."""
    with gw.client(gw.operator_token) as op:
        busy = op.get("/api/refuser/busy")
        value = op.get("/api/refuser/value")
        upstream = op.get("/v1/refuser/upstream")
    assert busy.status_code == 429 and busy.headers["retry-after"] == "3"
    assert busy.json() == {"detail": "slow down", "code": "rate_limited"}
    assert (value.status_code, value.json()) == (500, {"detail": INTERNAL_MESSAGE, "code": "internal"})
    assert upstream.status_code == 502 and upstream.json()["error"]["type"] == "api_error"


def test_the_client_picks_its_class_by_the_code(gw: GatewayThread) -> None:
    with GatewayClient(GatewayTarget(token=gw.operator_token, url=gw.url)) as client:
        with pytest.raises(BadInput) as rule:
            client.get("/api/refuser/rule")
        with pytest.raises(Refused) as busy:
            client.get("/api/refuser/busy")
        with pytest.raises(GatewayFailed) as value:
            client.get("/api/refuser/value")
    assert (rule.value.code, rule.value.status) == ("rule_violation", 422)
    assert (
        rule.value.line()
        == "bad input: refused by rule single_node: 8 devices do not fit one node (HTTP 422)"
    )
    assert (busy.value.code, value.value.code) == ("rate_limited", "internal")
    assert "not a number" not in value.value.line()


def test_real_routes_keep_their_answers(gw: GatewayThread) -> None:
    with gw.client(None) as anon:
        no_token = anon.get("/api/me")
        proxy = anon.post("/v1/messages", json={})
        forge = anon.get("/api/v1/user")
    assert no_token.status_code == 401
    assert no_token.json() == {"detail": "missing bearer token", "code": "unauthorized"}
    assert no_token.headers["www-authenticate"] == 'Bearer realm="kswarm"'
    assert proxy.status_code == 401 and proxy.json()["error"] == {
        "type": "authentication_error",
        "message": "missing bearer token",
    }
    assert forge.status_code == 401 and forge.json() == {"message": "missing bearer token", "url": ""}
    agent = gw.add_principal("errors-agent")
    with gw.client(agent) as a:
        refused = a.get("/api/principals")
        missing = a.get("/api/channels/nowhere/messages")
        basic = a.post("/api/v1/users/errors-agent/tokens", json={"name": "t"})
    assert refused.status_code == 403 and refused.json() == {
        "detail": "agent may not do this (needs operator)",
        "code": "forbidden",
    }
    assert missing.status_code == 404
    assert missing.json() == {"detail": "no channel 'nowhere'", "code": "not_found"}
    assert basic.status_code == 401 and basic.headers["www-authenticate"] == "Basic"
    assert basic.json() == {"message": "token creation needs Basic auth as the user", "url": ""}


def test_ui_refusals_are_pages_for_browsers_and_escape_what_they_echo(gw: GatewayThread) -> None:
    """Attack: a refusal whose message repeats the request (an unknown repo named by the attacker) is
    shown to the operator's browser; the page escapes it and forbids inline scripts."""
    with gw.client(gw.operator_token) as op:
        page = op.get("/ui/refuser/echo", headers=HTML)
        script = op.get("/ui/refuser/echo")
    assert page.status_code == 404 and page.headers["content-type"].startswith("text/html")
    assert EVIL not in page.text and "&lt;script&gt;alert(1)&lt;/script&gt;" in page.text
    assert "unsafe-inline" not in page.headers["content-security-policy"]
    assert script.status_code == 404 and script.json() == {"detail": f"no repo {EVIL}", "code": "not_found"}
    assert script.headers["x-content-type-options"] == "nosniff"
    with gw.client(None) as anon:  # not logged in: a browser is sent to the login form
        login = anon.get("/ui/chat", headers=HTML)
    assert login.status_code == 303 and login.headers["location"].startswith("/ui/login?next=/ui/chat")


async def test_tools_refuse_with_the_rest_message_and_hide_crashes(gw: GatewayThread) -> None:
    token = gw.add_principal("errors-tools")
    async with mcp_session(gw.url, token) as agent:
        with pytest.raises(ToolFailed) as rule:
            await call(agent, "refuser_rule")
        with pytest.raises(ToolFailed) as model:
            await call(agent, "refuser_model", count=0)
        with pytest.raises(ToolFailed) as crash:
            await call(agent, "refuser_crash")
        with pytest.raises(ToolFailed) as chat:
            await call(agent, "chat_post", channel="nowhere", text="hi")
    rule_text = "refused by rule single_node: 8 devices do not fit one node"
    assert str(rule.value) == f"Error executing tool refuser_rule: {rule_text} (HTTP 422)"
    assert "greater than or equal to 1" in str(model.value) and str(model.value).endswith("(HTTP 422)")
    assert str(crash.value) == "Error executing tool refuser_crash" and "hunter2" not in str(crash.value)
    assert str(chat.value) == "Error executing tool chat_post: no channel 'nowhere' (HTTP 404)"


def test_every_error_is_a_gateway_error_with_a_code() -> None:
    assert RuleViolation("kinds", "x").code == "rule_violation"
    assert ForgeError("gone", 404).code == "not_found" and ForgeError("gone", 404).status == 404
    assert GatewayError("odd", 418).code == "error"
    assert isinstance(ChatError("x"), GatewayError) and ChatError("x").status == 400


def test_the_proxy_answers_its_own_refusals_in_anthropic_shape(gw: GatewayThread) -> None:
    """The proxy answers its own refusals (it settles reservations first) through the same shape."""
    agent = gw.add_principal("errors-llm")
    with httpx.Client(base_url=gw.url, headers={"x-api-key": agent}, timeout=30) as client:
        reply = client.post("/v1/messages", content=b"{not json")
    assert reply.status_code == 400
    assert reply.json() == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": "the request body is not JSON"},
    }
