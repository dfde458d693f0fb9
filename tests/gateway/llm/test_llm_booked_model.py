"""The model an agent's usage is booked under is the upstream's answer, never the agent's say-so (issue 23).

An agent chooses its request's ``model`` (and any header) and reports its own timeline; the name the
gateway records — per agent in ``/api/usage``, for the cost report and the dataset card — is the
``model`` of the upstream's answer (a Messages answer, a stream's ``message_start``), and only a sane
one (``[A-Za-z0-9._:@/-]{1,100}``): anything else is booked as ``unknown``.

Real gateway (uvicorn), real Redis, the scripted upstream (the only fake), real HTTP.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from test_llm_proxy import MSG, REAL_KEY, ProxyGateway

from gateway.llm.config import LLMProxySettings
from gateway.llm.model_names import booked_model
from kstest.upstream import ScriptedUpstream, text_reply

HOSTILE = "claude</td><script>alert(1)</script>\n# Owned | x"


@pytest.fixture
def upstream() -> Iterator[ScriptedUpstream]:
    with ScriptedUpstream(api_key=REAL_KEY) as up:
        yield up


@pytest.fixture
def gw(clean_redis: str, short_tmp: Path, upstream: ScriptedUpstream) -> Iterator[ProxyGateway]:
    llm = LLMProxySettings(upstream_url=upstream.url, api_key=REAL_KEY)
    gateway = ProxyGateway(clean_redis, short_tmp / "gw", llm)
    try:
        yield gateway
    finally:
        gateway.stop()


def ask(gw: ProxyGateway, token: str, model: str, stream: bool = False) -> httpx.Response:
    """A Messages call as an agent makes it, asking for ``model`` and naming a model in a header too."""
    body: dict[str, Any] = {"model": model, "max_tokens": 500, "messages": MSG, "stream": stream}
    said = model.replace("\n", " ")  # a header holds no line break
    headers = {"x-api-key": token, "anthropic-model": said, "x-kswarm-model": said}
    with httpx.Client(base_url=gw.url, headers=headers, timeout=30, trust_env=False) as c:
        reply = c.post("/v1/messages", json=body)
    assert reply.status_code == 200, reply.text
    return reply


def booked(gw: ProxyGateway, name: str) -> dict[str, int]:
    with gw.api() as op:
        return dict(op.get("/api/usage").json()["agents"][name]["models"])


def test_the_booked_model_is_the_upstreams_answer_not_the_agents_request(
    gw: ProxyGateway, upstream: ScriptedUpstream
) -> None:
    token = gw.add("mallory")
    # She asks for a cheap-sounding model with markup in it; the upstream answers with what it ran.
    upstream.script(
        text_reply("ok", model="claude-sonnet-4-test", usage={"input_tokens": 100, "output_tokens": 20})
    )
    assert ask(gw, token, HOSTILE).json()["model"] == "claude-sonnet-4-test"
    upstream.script(
        text_reply("ok", model="claude-sonnet-4-test", usage={"input_tokens": 30, "output_tokens": 10})
    )
    ask(gw, token, "claude-haiku-4-5-test", stream=True)
    assert booked(gw, "mallory") == {"claude-sonnet-4-test": 160}
    # Her own view of her usage says the same.
    with gw.api(token) as me:
        assert me.get("/api/usage").json()["agents"]["mallory"]["models"] == {"claude-sonnet-4-test": 160}


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_an_upstream_model_name_with_markup_is_booked_as_unknown(
    gw: ProxyGateway, upstream: ScriptedUpstream, stream: bool
) -> None:
    token = gw.add("eve")
    upstream.script(text_reply("ok", model=HOSTILE, usage={"input_tokens": 40, "output_tokens": 2}))
    ask(gw, token, "claude-sonnet-4-test", stream=stream)
    assert booked(gw, "eve") == {"unknown": 42}
    with gw.api() as op:
        assert HOSTILE not in op.get("/api/usage").text and "<script>" not in op.get("/api/usage").text


def test_model_names_outside_the_pattern_are_unknown() -> None:
    for sane in ("claude-sonnet-4-5-20250929", "anthropic/claude-3.5:beta", "m@v1", "a" * 100):
        assert booked_model(sane) == sane
    for bad in (HOSTILE, "a|b", "a b", "x\ny", "", "a" * 101, "<b>", "[x](y)", None, 7, {"a": 1}):
        assert booked_model(bad) == "unknown"
