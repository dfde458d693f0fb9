"""The LLM proxy against the real test upstream, with the real anthropic SDK and a real Redis."""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import httpx2
import pytest
from redis.asyncio import Redis

from gateway.app import create_app
from gateway.config import GatewaySettings
from gateway.llm.config import LLMProxySettings, scrub_env
from gateway.llm.plugin import LLMProxyPlugin
from gateway.llm.sse_scrub import KeyScrubber, SSEUsage
from gateway.plugin import Plugin
from gateway.principals import PrincipalKind, PrincipalStore
from gateway.server import serve
from kstest.gateway import GatewayProcess, free_port
from kstest.mcp_client import call, mcp_session
from kstest.upstream import ScriptedUpstream, error_reply, text_reply, tool_reply

REAL_KEY = "sk-ant-test-" + secrets.token_hex(20)
MSG = [{"role": "user", "content": "hello"}]


class ProxyGateway:
    """The gateway app with the LLM proxy plugin, served (TCP and unix socket) from a thread."""

    def __init__(
        self, redis_url: str, home: Path, llm: LLMProxySettings, plugins: list[Plugin[Any]] | None = None
    ) -> None:
        self.settings = GatewaySettings(redis_url=redis_url, home=home, port=free_port(), swarm="test")
        self.llm = llm
        self.operator_token = asyncio.run(self._create("operator", PrincipalKind.operator, ensure=True))
        self.loop: asyncio.AbstractEventLoop | None = None
        self.stop_event: asyncio.Event | None = None
        ready = threading.Event()

        async def main() -> None:
            self.loop, self.stop_event = asyncio.get_running_loop(), asyncio.Event()
            app = create_app(self.settings, plugins=plugins or [LLMProxyPlugin(llm)])
            started = asyncio.Event()
            asyncio.get_running_loop().create_task(started.wait()).add_done_callback(lambda _: ready.set())
            await serve(app, self.settings, ready=started, stop=self.stop_event)

        self.thread = threading.Thread(target=asyncio.run, args=(main(),), daemon=True)
        self.thread.start()
        assert ready.wait(20), "gateway did not start"

    async def _create(self, name: str, kind: PrincipalKind, ensure: bool = False) -> str:
        redis = Redis.from_url(self.settings.redis_url, decode_responses=True)
        try:
            store = PrincipalStore(redis, "test")
            if ensure:
                await store.ensure(name, kind)
                return await store.issue_token(name)
            return (await store.create(name, kind))[1]
        finally:
            await redis.aclose()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.settings.port}"

    def add(self, name: str, kind: PrincipalKind = PrincipalKind.agent) -> str:
        return asyncio.run(self._create(name, kind))

    def api(self, token: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token or self.operator_token}"}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30, trust_env=False)

    def sdk(self, token: str, **kwargs: Any) -> anthropic.Anthropic:
        return anthropic.Anthropic(base_url=self.url, api_key=token, **kwargs)

    def ops_notices(self) -> list[dict[str, Any]]:
        with self.api() as client:
            messages = client.get("/api/channels/ops/messages").json()["messages"]
        return [m for m in messages if m["kind"] == "notice" and m["sender"] == "gateway"]

    def stop(self) -> None:
        """Stop the gateway (and wait for it); a second call does nothing."""
        if self.loop is not None and self.stop_event is not None and self.thread.is_alive():
            self.loop.call_soon_threadsafe(self.stop_event.set)
        self.thread.join(15)


class ProxyGateways:
    """Gateways started on demand, each with a home of its own under ``tmp``; all stopped on exit."""

    def __init__(self, redis_url: str, tmp: Path) -> None:
        self.redis_url, self.tmp = redis_url, tmp
        self.started: list[ProxyGateway] = []

    def start(self, llm: LLMProxySettings, plugins: list[Plugin[Any]] | None = None) -> ProxyGateway:
        gw = ProxyGateway(self.redis_url, self.tmp / f"gw{len(self.started)}", llm, plugins)
        self.started.append(gw)
        return gw

    def __enter__(self) -> ProxyGateways:
        return self

    def __exit__(self, *_: object) -> None:
        for gw in self.started:
            gw.stop()


@pytest.fixture
def upstream() -> Iterator[ScriptedUpstream]:
    with ScriptedUpstream(api_key=REAL_KEY) as up:
        yield up


@pytest.fixture
def make_gateway(
    clean_redis: str, short_tmp: Path, upstream: ScriptedUpstream
) -> Iterator[Callable[..., ProxyGateway]]:
    fields: dict[str, Any] = {"upstream_url": upstream.url, "api_key": REAL_KEY, "backoff_initial": 0.05}
    with ProxyGateways(clean_redis, short_tmp) as gateways:
        yield lambda **overrides: gateways.start(LLMProxySettings(**(fields | overrides)))


def assert_clean(text: str, *tokens: str) -> None:
    assert REAL_KEY not in text
    for token in tokens:
        assert token not in text


def test_non_streaming_records_usage_and_cost(make_gateway, upstream: ScriptedUpstream) -> None:
    gw = make_gateway()
    token = gw.add("alice")
    usage = {"input_tokens": 1000, "output_tokens": 200, "cache_creation_input_tokens": 300}
    upstream.script(text_reply("hi alice", usage={**usage, "cache_read_input_tokens": 4000}))
    reply = gw.sdk(token).messages.create(model="claude-sonnet-4-test", max_tokens=50, messages=MSG)
    assert reply.content[0].text == "hi alice"
    assert reply.usage.cache_read_input_tokens == 4000

    seen = upstream.requests()
    assert len(seen) == 1 and seen[0]["key"] == REAL_KEY
    assert seen[0]["headers"]["x-api-key"] == REAL_KEY and "authorization" not in seen[0]["headers"]
    assert seen[0]["body"]["messages"] == MSG
    assert token not in repr(seen[0])  # the agent token never travels upstream

    with gw.api(token) as client:
        mine = client.get("/api/usage").json()
    assert mine["swarm"] is None and list(mine["agents"]) == ["alice"]
    alice = mine["agents"]["alice"]
    assert (alice["input_tokens"], alice["output_tokens"]) == (1000, 200)
    assert (alice["cache_creation_input_tokens"], alice["cache_read_input_tokens"]) == (300, 4000)
    assert alice["requests"] == 1 and alice["total_tokens"] == 5500
    # claude-sonnet-4 prices: 3 in, 15 out, 3.75 cache write, 0.30 cache read ($/MTok)
    assert alice["cost_usd"] == pytest.approx((1000 * 3 + 200 * 15 + 300 * 3.75 + 4000 * 0.3) / 1e6)


def test_streaming_passes_events_and_records_usage(make_gateway, upstream: ScriptedUpstream) -> None:
    gw = make_gateway()
    token = gw.add("bob")
    usage = {"input_tokens": 50, "output_tokens": 70, "cache_read_input_tokens": 900}
    upstream.script(tool_reply("bash", {"command": "ls -la"}, text="let me look", usage=usage))
    with gw.sdk(token).messages.stream(model="claude-haiku-4-5-test", max_tokens=50, messages=MSG) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "let me look"
    assert final.stop_reason == "tool_use"
    assert final.content[1].name == "bash" and final.content[1].input == {"command": "ls -la"}
    assert (final.usage.input_tokens, final.usage.output_tokens) == (50, 70)

    with gw.api() as client:
        report = client.get("/api/usage").json()
    bob = report["agents"]["bob"]
    assert (bob["input_tokens"], bob["output_tokens"], bob["cache_read_input_tokens"]) == (50, 70, 900)
    assert bob["cost_usd"] == pytest.approx((50 * 1 + 70 * 5 + 900 * 0.1) / 1e6)
    assert report["swarm"]["total_tokens"] == 1020
    with gw.api() as client:
        metrics = client.get("/metrics").text
    assert 'kswarm_llm_tokens_total{agent="bob",type="cache_read"} 900.0' in metrics
    assert 'kswarm_llm_proxy_requests_total{status="200"} 1.0' in metrics


def test_stream_is_not_buffered(make_gateway, upstream: ScriptedUpstream) -> None:
    gw = make_gateway()
    token = gw.add("carol")
    upstream.script(text_reply("one two three four", chunk_delay=0.25, usage={"output_tokens": 9}))
    body = {"model": "m", "max_tokens": 5, "messages": MSG, "stream": True}
    started = time.monotonic()
    first_event = None
    with (
        httpx.Client(timeout=30, trust_env=False) as client,
        client.stream("POST", f"{gw.url}/v1/messages", json=body, headers={"x-api-key": token}) as r,
    ):
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        raw = b""
        for chunk in r.iter_bytes():
            if first_event is None and b"message_start" in chunk:
                first_event = time.monotonic() - started
            raw += chunk
    total = time.monotonic() - started
    # The upstream sleeps 0.25 s before each of its 5 content events: a buffering proxy would hand
    # over message_start only with the rest, at the end.
    assert first_event is not None and total > 1.0
    assert first_event + 0.75 < total, f"first event after {first_event:.2f}s of {total:.2f}s: buffered"
    assert raw.count(b"event: content_block_delta") == 4 and raw.endswith(b'{"type":"message_stop"}\n\n')


def test_client_going_away_mid_stream_frees_its_slot_and_is_billed(make_gateway, upstream) -> None:
    gw = make_gateway(max_concurrency=1)
    token = gw.add("sam")
    upstream.script(
        text_reply("a b c d e f g h", chunk_delay=0.5, usage={"input_tokens": 77}), text_reply("next")
    )
    body = {"model": "m", "max_tokens": 100, "messages": MSG, "stream": True}  # reserves its 77 + output
    with (
        httpx.Client(timeout=30, trust_env=False) as client,
        client.stream("POST", f"{gw.url}/v1/messages", json=body, headers={"x-api-key": token}) as r,
    ):
        assert b"message_start" in next(r.iter_raw())
    # The stream was abandoned after its first event; with one slot, the next request still runs.
    reply = gw.sdk(token, max_retries=0, timeout=10).messages.create(model="m", max_tokens=5, messages=MSG)
    assert reply.content[0].text == "next"
    with gw.api(token) as client:
        assert client.get("/api/usage/sam").json()["input_tokens"] >= 77


def test_agent_token_accepted_from_x_api_key_and_never_forwarded(make_gateway, upstream) -> None:
    gw = make_gateway()
    token = gw.add("dave")
    body = {"model": "m", "max_tokens": 5, "messages": MSG}
    with httpx.Client(base_url=gw.url, timeout=30, trust_env=False) as client:
        # Claude Code style: the agent token as x-api-key.
        assert client.post("/v1/messages", json=body, headers={"x-api-key": token}).status_code == 200
        # An agent trying to smuggle its own key upstream: the proxy replaces it.
        smuggle = {"authorization": f"Bearer {token}", "x-api-key": "sk-attacker", "anthropic-beta": "b1"}
        assert client.post("/v1/messages?beta=true", json=body, headers=smuggle).status_code == 200
    first, second = upstream.requests()
    for seen in (first, second):
        assert seen["key"] == REAL_KEY
        assert token not in repr(seen) and "sk-attacker" not in repr(seen)
    assert second["headers"]["anthropic-beta"] == "b1" and second["query"] == "beta=true"


def test_missing_bad_revoked_tokens_and_wrong_kinds_are_refused(make_gateway, upstream) -> None:
    gw = make_gateway()
    token = gw.add("erin")
    worker = gw.add("worker-1", PrincipalKind.worker)
    with gw.api() as op:
        assert op.delete("/api/principals/erin/tokens").json()["revoked"] == 1
    for key in ("ksw_not-a-token", "sk-ant-whatever", token):
        client = anthropic.Anthropic(base_url=gw.url, api_key=key, max_retries=0)
        with pytest.raises(anthropic.AuthenticationError) as err:
            client.messages.create(model="m", max_tokens=5, messages=MSG)
        assert err.value.status_code == 401 and err.value.body["error"]["type"] == "authentication_error"
    with pytest.raises(anthropic.PermissionDeniedError):
        gw.sdk(worker, max_retries=0).messages.create(model="m", max_tokens=5, messages=MSG)
    with httpx.Client(trust_env=False) as client:
        missing = client.post(f"{gw.url}/v1/messages", json={})
        assert missing.status_code == 401 and missing.json()["error"]["type"] == "authentication_error"
    assert upstream.requests(path=None) == []


def test_refusals_tell_clients_not_to_retry(make_gateway, upstream) -> None:
    """A bad token stays bad: the Claude Code CLI retried the 401 ten times over ~90 s until the proxy
    said ``x-should-retry: false`` (which it and the anthropic SDKs obey) in Anthropic's error shape."""
    gw = make_gateway()
    token = gw.add("erin")
    worker = gw.add("worker-1", PrincipalKind.worker)
    with gw.api() as op:
        op.delete("/api/principals/erin/tokens")
    with httpx.Client(base_url=gw.url, trust_env=False) as client:
        for headers, status, kind in (
            ({}, 401, "authentication_error"),
            ({"x-api-key": "ksw_forged-0000000000000000000000"}, 401, "authentication_error"),
            ({"x-api-key": token}, 401, "authentication_error"),
            ({"Authorization": f"Bearer {worker}"}, 403, "permission_error"),
        ):
            reply = client.post(
                "/v1/messages", json={"model": "m", "max_tokens": 5, "messages": MSG}, headers=headers
            )
            assert reply.status_code == status
            assert reply.headers.get("x-should-retry") == "false", headers
            body = reply.json()
            assert body["type"] == "error" and body["error"]["type"] == kind and body["error"]["message"]
    sent: list[httpx2.Request] = []
    counting = httpx2.Client(event_hooks={"request": [sent.append]}, trust_env=False)
    with pytest.raises(anthropic.AuthenticationError):
        gw.sdk(token, max_retries=5, http_client=counting).messages.create(
            model="m", max_tokens=5, messages=MSG
        )
    assert len(sent) == 1, "the SDK did not retry a refused token"
    assert upstream.requests(path=None) == []


def bundled_claude_cli() -> Path | None:
    try:
        import claude_agent_sdk
    except ImportError:
        return None
    path = Path(claude_agent_sdk.__file__).parent / "_bundled" / "claude"
    return path if path.is_file() else None


@pytest.mark.slow
def test_claude_code_cli_stops_at_a_revoked_token(make_gateway, upstream, short_tmp: Path) -> None:
    """The real Claude Code CLI with a revoked token reports it and exits (it retried ~90 s before)."""
    cli = bundled_claude_cli()
    if cli is None:
        pytest.skip("the Claude Code CLI is not installed (pip install claude-agent-sdk)")
    gw = make_gateway()
    token = gw.add("erin")
    with gw.api() as op:
        op.delete("/api/principals/erin/tokens")
    home = short_tmp / "cli-home"
    home.mkdir()
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": gw.url,
        "ANTHROPIC_API_KEY": token,
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }
    # The bound is far above a prompt refusal and far below the retries (ten over ~90 s) it replaces.
    done = subprocess.run(
        [str(cli), "-p", "say hi", "--output-format", "text"],
        env=env,
        cwd=home,
        capture_output=True,
        text=True,
        timeout=60,
    )
    said = done.stdout + done.stderr
    assert "invalid or revoked token" in said and "authenticate" in said.lower(), said
    assert upstream.requests(path=None) == []


def test_real_key_is_scrubbed_from_every_response(make_gateway, upstream, caplog) -> None:
    caplog.set_level(logging.DEBUG)
    gw = make_gateway()
    token = gw.add("mallory")
    echo = text_reply("key={api_key} headers={headers}")
    upstream.script(echo, echo, error_reply(400, "bad key {api_key}"), error_reply(401, "{headers}"))
    body = {"model": "m", "max_tokens": 5, "messages": MSG}
    with httpx.Client(base_url=gw.url, headers={"x-api-key": token}, timeout=30, trust_env=False) as c:
        answers = [
            c.post("/v1/messages", json=body),
            c.post("/v1/messages", json=body | {"stream": True}),
            c.post("/v1/messages", json=body),
            c.post("/v1/messages", json=body),
        ]
    assert [a.status_code for a in answers] == [200, 200, 400, 401]
    for answer in answers:
        assert_clean(answer.text + repr(answer.headers))
        assert "[redacted]" in answer.text
    assert len(upstream.requests()) == 4  # the upstream did see (and echo) the real key each time
    assert REAL_KEY not in caplog.text
    assert REAL_KEY not in repr(gw.llm) and REAL_KEY not in gw.llm.model_dump_json()


def test_key_scrubber_handles_every_split() -> None:
    secret = b"sk-secret-123"
    data = b'event: x\ndata: {"k":"sk-secret-123","again":"sk-secret-123sk-secret-12"}\n\n'
    for cut in range(len(data) + 1):
        for cut2 in range(cut, len(data) + 1, 7):
            scrubber = KeyScrubber(secret)
            out = scrubber.feed(data[:cut]) + scrubber.feed(data[cut:cut2]) + scrubber.feed(data[cut2:])
            out += scrubber.flush()
            assert out == data.replace(secret, b"[redacted]")
    scrubber = KeyScrubber(secret)
    assert scrubber.feed(b"data: one\n\n") == b"data: one\n\n"  # nothing held back at event ends


def test_sse_usage_parser_reads_split_events() -> None:
    stream = (
        b'event: message_start\ndata: {"type":"message_start","message":{"model":"claude-x",'
        b'"usage":{"input_tokens":5,"cache_creation_input_tokens":7,"output_tokens":1}}}\n\n'
        b'event: content_block_delta\ndata: {"type":"content_block_delta",'
        b'"delta":{"text":"message_delta"}}\n\n'
        b'event: message_delta\ndata: {"type":"message_delta","usage":{"output_tokens":42}}\n\n'
    )
    parser = SSEUsage()
    for i in range(0, len(stream), 3):
        parser.feed(stream[i : i + 3])
    assert parser.seen and parser.model == "claude-x"
    assert (parser.usage.input_tokens, parser.usage.output_tokens) == (5, 42)
    assert parser.usage.cache_creation_input_tokens == 7


def test_budget_exhaustion_refuses_without_retry_and_posts_one_notice(make_gateway, upstream) -> None:
    gw = make_gateway(budgets={"agent": {"usd": 0.001}, "agents": {"grace": {"usd": 1.0}}})
    token = gw.add("frank")
    other = gw.add("grace")
    spend = text_reply("ok", usage={"input_tokens": 1000, "output_tokens": 100})  # $0.0045
    upstream.script(spend, spend, default=text_reply("ok"))
    big = [{"role": "user", "content": "x" * 3300}]  # an input estimate that covers the 1000 tokens used
    client = gw.sdk(token)  # default SDK retries: the refusal must not be retried
    with gw.api() as op:  # room for one call, within what it reserves, then back to the configured $0.001
        op.put("/api/usage/frank/budget", json={"usd": 1.0}).raise_for_status()
        client.messages.create(model="claude-sonnet-4-test", max_tokens=100, messages=big)
        op.put("/api/usage/frank/budget", json={}).raise_for_status()
    for _ in range(3):
        with pytest.raises(anthropic.RateLimitError) as err:
            client.messages.create(model="claude-sonnet-4-test", max_tokens=5, messages=MSG)
        assert "budget exhausted" in err.value.message and "frank" in err.value.message
        assert err.value.response.headers["x-should-retry"] == "false"
        assert "retry-after" not in err.value.response.headers
    with pytest.raises(anthropic.RateLimitError):
        with client.messages.stream(model="m", max_tokens=5, messages=MSG) as stream:
            stream.get_final_message()
    assert len(upstream.requests()) == 1
    gw.sdk(other).messages.create(model="m", max_tokens=100, messages=big)  # others are unaffected
    notices = gw.ops_notices()
    assert len(notices) == 1, [n["text"] for n in notices]
    assert "frank" in notices[0]["text"] and "budget exhausted" in notices[0]["text"]

    with gw.api() as op:
        assert op.get("/api/usage/frank").json()["exhausted"] is True
        assert op.put("/api/usage/frank/budget", json={"usd": 1.0}).json()["exhausted"] is False
        client.messages.create(model="m", max_tokens=5, messages=MSG)
        assert op.put("/api/usage/frank/budget", json={"usd": 0.0001}).status_code == 200
    with pytest.raises(anthropic.RateLimitError):
        client.messages.create(model="m", max_tokens=5, messages=MSG)
    assert len(gw.ops_notices()) == 2  # a second crossing, a second notice
    with gw.api() as op:
        assert op.post("/api/usage/frank/reset").status_code == 200
        assert op.get("/metrics").text.count('kswarm_llm_budget_refusals_total{scope="agent"} 5.0') == 1
        # Reset: nothing used, but this request's worst case (input estimate + max_tokens) is still
        # more than $0.0001, so it does not fit; raised to $0.01 it does.
        with pytest.raises(anthropic.RateLimitError) as err:
            client.messages.create(model="m", max_tokens=5, messages=MSG)
        assert "would be exceeded: $0.0000 used + $0.0000 reserved" in err.value.message
        assert op.put("/api/usage/frank/budget", json={"usd": 0.01}).json()["exhausted"] is False
    client.messages.create(model="m", max_tokens=5, messages=MSG)


def test_swarm_token_budget_stops_everyone(make_gateway, upstream) -> None:
    gw = make_gateway(budgets={"swarm": {"tokens": 1500}})
    a, b = gw.add("hank"), gw.add("ivy")
    upstream.script(default=text_reply("ok", usage={"input_tokens": 900, "output_tokens": 100}))
    big = [{"role": "user", "content": "x" * 2700}]  # reserves about 920 + 200 tokens, books 1000
    gw.sdk(a).messages.create(model="m", max_tokens=200, messages=big)
    for token in (a, b):  # 1000 used: a request reserving over 500 does not fit, whoever makes it
        with pytest.raises(anthropic.RateLimitError) as err:
            gw.sdk(token).messages.create(model="m", max_tokens=600, messages=MSG)
        assert "the swarm's token budget (1500) would be exceeded: 1000 used" in err.value.message
    notices = gw.ops_notices()
    assert len(notices) == 1 and "swarm" in notices[0]["text"]
    with gw.api() as op:
        swarm = op.get("/api/usage").json()["swarm"]
    assert swarm["total_tokens"] == 1000 and swarm["budget_tokens"] == 1500


def test_upstream_429_and_529_are_retried_honouring_retry_after(make_gateway, upstream) -> None:
    gw = make_gateway(backoff_initial=0.01)
    token = gw.add("jack")
    upstream.script(error_reply(429, "slow down", retry_after=0.4), error_reply(529), text_reply("finally"))
    started = time.monotonic()
    reply = gw.sdk(token, max_retries=0).messages.create(model="m", max_tokens=5, messages=MSG)
    elapsed = time.monotonic() - started
    assert reply.content[0].text == "finally"
    assert len(upstream.requests()) == 3
    assert elapsed >= 0.4, "retry-after was not honoured"
    with gw.api() as op:
        metrics = op.get("/metrics").text
    assert 'kswarm_llm_upstream_retries_total{reason="429"} 1.0' in metrics
    assert 'kswarm_llm_upstream_retries_total{reason="529"} 1.0' in metrics
    upstream.script(error_reply(429, retry_after=3600), text_reply("capped"))
    gw2 = make_gateway(retry_after_max=0.2)
    started = time.monotonic()
    assert gw2.sdk(token, max_retries=0).messages.create(model="m", max_tokens=5, messages=MSG)
    assert time.monotonic() - started < 3


def test_upstream_error_passes_through_after_the_retries(make_gateway, upstream) -> None:
    gw = make_gateway(max_retries=2)
    token = gw.add("kate")
    upstream.script(*[error_reply(529, "overloaded {api_key}")] * 3, error_reply(400, "bad model"))
    with pytest.raises(anthropic.APIStatusError) as err:
        gw.sdk(token, max_retries=0).messages.create(model="m", max_tokens=5, messages=MSG)
    assert err.value.status_code == 529 and err.value.body["error"]["type"] == "overloaded_error"
    assert REAL_KEY not in err.value.message
    assert len(upstream.requests()) == 3
    with pytest.raises(anthropic.BadRequestError):  # 4xx are not retried
        gw.sdk(token, max_retries=0).messages.create(model="m", max_tokens=5, messages=MSG)
    assert len(upstream.requests()) == 4


def test_connection_failures_are_retried_until_the_upstream_is_up(make_gateway, upstream) -> None:
    late = ScriptedUpstream(api_key=REAL_KEY)
    gw = make_gateway(upstream_url=late.url, backoff_initial=0.2, max_retries=6)
    token = gw.add("liam")
    timer = threading.Timer(0.5, late.start)
    timer.start()
    try:
        reply = gw.sdk(token, max_retries=0).messages.create(model="m", max_tokens=5, messages=MSG)
        assert reply.content[0].text.startswith("Hello")
    finally:
        timer.join()
        late.close()
    gw2 = make_gateway(upstream_url=f"http://127.0.0.1:{free_port()}", max_retries=1)
    with pytest.raises(anthropic.APIStatusError) as err:
        gw2.sdk(token, max_retries=0).messages.create(model="m", max_tokens=5, messages=MSG)
    assert err.value.status_code == 502 and "unreachable" in err.value.message


def test_concurrency_limit_queues_instead_of_failing(make_gateway, upstream) -> None:
    gw = make_gateway(max_concurrency=1)
    token = gw.add("mia")
    upstream.script(default=text_reply("slow", delay=0.3, chunk_delay=0.05))
    started = time.monotonic()
    answers = asyncio.run(four_concurrent_requests(gw.url, token))
    assert answers == ["slow"] * 4
    assert time.monotonic() - started >= 1.2
    stats = upstream.stats()
    assert stats["max_in_flight"] == 1 and stats["requests"] == 4


async def four_concurrent_requests(url: str, token: str) -> list[str]:
    client = anthropic.AsyncAnthropic(base_url=url, api_key=token, max_retries=0)

    async def plain() -> str:
        reply = await client.messages.create(model="m", max_tokens=5, messages=MSG)
        return reply.content[0].text

    async def streamed() -> str:
        async with client.messages.stream(model="m", max_tokens=5, messages=MSG) as stream:
            return (await stream.get_final_message()).content[0].text

    try:
        return list(await asyncio.gather(plain(), plain(), streamed(), streamed()))
    finally:
        await client.close()


def test_count_tokens_is_proxied_and_not_billed(make_gateway, upstream) -> None:
    gw = make_gateway(budgets={"agent": {"tokens": 10}})  # a count books nothing: it needs no room
    token = gw.add("noah")
    counted = gw.sdk(token).messages.count_tokens(model="m", messages=MSG)
    assert counted.input_tokens > 0
    seen = upstream.requests("/v1/messages/count_tokens")
    assert len(seen) == 1 and seen[0]["key"] == REAL_KEY
    with gw.api(token) as client:
        assert client.get("/api/usage").json()["agents"]["noah"]["requests"] == 0


def test_usage_visibility(make_gateway, upstream) -> None:
    gw = make_gateway()
    a, b = gw.add("olga"), gw.add("pete")
    for token in (a, b):
        gw.sdk(token).messages.create(model="m", max_tokens=5, messages=MSG)
    with gw.api(a) as client:
        assert list(client.get("/api/usage").json()["agents"]) == ["olga"]
        assert client.get("/api/usage/pete").status_code == 403
        assert client.post("/api/usage/olga/reset").status_code == 403
    with gw.api() as op:
        report = op.get("/api/usage").json()
    assert sorted(report["agents"]) == ["olga", "pete"] and report["swarm"]["requests"] == 2


def test_unix_socket_and_mcp_usage_tool(make_gateway, upstream) -> None:
    gw = make_gateway()
    token = gw.add("rosa")
    upstream.script(text_reply("via the socket", usage={"input_tokens": 11, "output_tokens": 3}))
    transport = httpx2.HTTPTransport(uds=str(gw.settings.socket_path()))
    with httpx2.Client(transport=transport) as http:
        sdk = anthropic.Anthropic(base_url="http://kswarm", api_key=token, http_client=http)
        assert sdk.messages.create(model="m", max_tokens=5, messages=MSG).content[0].text == "via the socket"

    async def usage_tool() -> Any:
        async with mcp_session(gw.url, token, uds=gw.settings.socket_path()) as session:
            return await call(session, "llm_usage")

    mine = asyncio.run(usage_tool())
    assert mine["name"] == "rosa" and (mine["input_tokens"], mine["output_tokens"]) == (11, 3)


def test_settings_from_environment(monkeypatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-from-anthropic-var")
    monkeypatch.setenv("KSWARM_LLM_UPSTREAM_URL", "http://127.0.0.1:1")
    monkeypatch.setenv(
        "KSWARM_LLM_PRICES", '{"my-model": {"input": 1, "output": 2, "cache_write": 3, "cache_read": 4}}'
    )
    settings = LLMProxySettings()
    assert settings.key() == "sk-from-anthropic-var" and "sk-from" not in repr(settings)
    assert settings.upstream_url == "http://127.0.0.1:1"
    assert settings.price_for("my-model-v2").output == 2 and settings.price_for("other").input == 3.0
    monkeypatch.setenv("KSWARM_LLM_API_KEY", "sk-preferred")
    assert LLMProxySettings().key() == "sk-preferred"
    assert LLMProxySettings().price_for("claude-opus-4-5-20251101").input == 5.0
    assert LLMProxySettings().price_for("claude-opus-4-1-20250805").input == 15.0
    env = scrub_env({"ANTHROPIC_API_KEY": "x", "KSWARM_LLM_API_KEY": "y", "HOME": "/h"})
    assert env == {"HOME": "/h"}


def test_budget_settings_from_environment(monkeypatch) -> None:
    monkeypatch.setenv("KSWARM_LLM_BUDGETS__AGENT__USD", "2.5")
    monkeypatch.setenv("KSWARM_LLM_BUDGETS__SWARM__TOKENS_PER_DAY", "900")
    monkeypatch.setenv("KSWARM_LLM_BUDGETS__AGENTS", '{"alice": {"usd": null, "tokens": 7}}')
    budgets = LLMProxySettings().budgets
    assert budgets.agent.usd == 2.5 and budgets.swarm.tokens_per_day == 900
    alice = budgets.for_agent("alice")
    assert (alice.usd, alice.tokens) == (None, 7)  # null: unlimited, not the agent default
    assert budgets.for_agent("bob").usd == 2.5
    # A misspelt budget is an error, never an unlimited budget.
    monkeypatch.setenv("KSWARM_LLM_BUDGETS__AGENT__USDD", "1")
    with pytest.raises(ValueError, match="usdd"):
        LLMProxySettings()
    monkeypatch.delenv("KSWARM_LLM_BUDGETS__AGENT__USDD")
    # So is a variable of the previous releases: it names its replacement.
    monkeypatch.setenv("KSWARM_LLM_AGENT_BUDGET_USD", "1")
    with pytest.raises(ValueError, match="KSWARM_LLM_BUDGETS__AGENT__USD"):
        LLMProxySettings()
    monkeypatch.delenv("KSWARM_LLM_AGENT_BUDGET_USD")
    with pytest.raises(ValueError, match="agent_budget_usd"):
        LLMProxySettings(agent_budget_usd=1)  # the old keyword too


def test_python_m_gateway_serves_the_proxy(clean_redis: str, short_tmp: Path, upstream) -> None:
    env = {"KSWARM_LLM_UPSTREAM_URL": upstream.url, "KSWARM_LLM_API_KEY": REAL_KEY}
    gw = GatewayProcess(short_tmp / "home", clean_redis, extra_env=env)
    gw.start()
    try:
        token = gw.add_principal("quinn")
        reply = anthropic.Anthropic(base_url=gw.url, api_key=token).messages.create(
            model="m", max_tokens=5, messages=MSG
        )
        assert reply.content[0].text.startswith("Hello")
        assert upstream.requests()[0]["key"] == REAL_KEY
    finally:
        gw.stop()
    assert REAL_KEY not in gw.log_path.read_text()
