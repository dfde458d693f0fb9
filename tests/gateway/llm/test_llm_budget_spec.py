"""The swarm spec's ``budgets:`` reach the LLM proxy that ``kswarm up -f`` builds, every budget field
takes effect, and a wrong key is refused with the file, line and field."""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis
from test_llm_proxy import REAL_KEY

from gateway.config import GatewaySettings
from gateway.llm.books import RESERVED, Reservation, Usage, day_key, utc_day
from gateway.llm.config import BudgetSettings, LLMProxySettings
from gateway.llm.refusals import BudgetRefusal
from gateway.llm.usage import UsageStore
from gateway.llm.usage_models import BudgetUpdate
from gateway.principals import PrincipalKind, PrincipalStore
from gateway.server import serve
from kstest.cli import Up, kswarm
from kstest.gateway import free_port
from kstest.upstream import ScriptedUpstream, text_reply
from orchestrator.local.launcher import Launcher, LaunchError
from orchestrator.spec import parse_spec, template_text
from orchestrator.swarm_dir.provision import SwarmLayout

SPEC = """\
swarm: test
agents:
  - name: lead
  - pattern: dev-{i}
    count: 2
budgets:
  agent:
    tokens: 50                # less than one request's worst case
  agents:
    lead: {tokens: null}      # the lead: no token limit
  swarm:
    usd: 100
"""
BODY = {"model": "m", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}]}


def wait_for(check: Callable[[], Any], what: str, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if found := check():
            return found
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def upstream() -> Iterator[ScriptedUpstream]:
    with ScriptedUpstream(api_key=REAL_KEY) as up:
        yield up


class LaunchedGateway:
    """The gateway app ``Launcher.run`` serves (``Launcher.gateway_app``), in a thread, minus the
    embedded Redis and the supervisor (agents) that ``run`` adds around it."""

    def __init__(self, launcher: Launcher, redis_url: str, home: Path) -> None:
        self.settings = GatewaySettings(redis_url=redis_url, home=home, port=free_port(), swarm="test")
        self.app = launcher.gateway_app(self.settings)
        self.loop: asyncio.AbstractEventLoop | None = None
        self.stop_event: asyncio.Event | None = None
        ready = threading.Event()

        async def main() -> None:
            self.loop, self.stop_event = asyncio.get_running_loop(), asyncio.Event()
            started = asyncio.Event()
            asyncio.get_running_loop().create_task(started.wait()).add_done_callback(lambda _: ready.set())
            await serve(self.app, self.settings, ready=started, stop=self.stop_event)

        self.thread = threading.Thread(target=asyncio.run, args=(main(),), daemon=True)
        self.thread.start()
        assert ready.wait(30), "gateway did not start"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.settings.port}"

    def stop(self) -> None:
        if self.loop is not None and self.stop_event is not None:
            self.loop.call_soon_threadsafe(self.stop_event.set)
        self.thread.join(30)


async def make_agent(redis_url: str, name: str) -> str:
    redis = Redis.from_url(redis_url, decode_responses=True)
    try:
        return (await PrincipalStore(redis, "test").create(name, PrincipalKind.agent))[1]
    finally:
        await redis.aclose()


def ask(url: str, token: str, body: dict[str, Any] = BODY) -> httpx.Response:
    with httpx.Client(base_url=url, headers={"x-api-key": token}, timeout=30, trust_env=False) as client:
        return client.post("/v1/messages", json=body)


def test_the_specs_budget_stops_an_agent_in_the_gateway_kswarm_up_builds(
    clean_redis: str, short_tmp: Path, upstream: ScriptedUpstream, monkeypatch
) -> None:
    monkeypatch.setenv("KSWARM_LLM_UPSTREAM_URL", upstream.url)
    monkeypatch.setenv("KSWARM_LLM_API_KEY", REAL_KEY)
    monkeypatch.setenv("KSWARM_LLM_BUDGETS__AGENT__TOKENS", "1000000")  # the spec's 50 wins
    monkeypatch.setenv("KSWARM_LLM_BUDGETS__SWARM__TOKENS", "900000")  # the spec leaves it: kept
    spec_file = short_tmp / "swarm.yaml"
    spec_file.write_text(SPEC)
    launcher = Launcher(short_tmp / "home", free_port(), spec_file)
    assert launcher.llm.budgets.agent.tokens == 50 and launcher.llm.budgets.swarm.tokens == 900000
    assert launcher.llm.budgets.swarm.usd == 100 and launcher.llm.upstream_url == upstream.url
    assert any("budgets.agent.tokens: the spec's 50 replaces 1000000" in w for w in launcher.warnings)
    gw = LaunchedGateway(launcher, clean_redis, short_tmp / "home")
    try:
        dev, lead = (asyncio.run(make_agent(clean_redis, n)) for n in ("dev-1", "lead"))
        refused = ask(gw.url, dev)
        assert refused.status_code == 429 and refused.headers["x-should-retry"] == "false"
        message = refused.json()["error"]["message"]
        assert "agent dev-1's token budget (50) would be exceeded: 0 used + 0 reserved" in message
        assert refused.headers["x-kswarm-budget"] == "agent.tokens"
        upstream.script(text_reply("for the lead"))
        answer = ask(gw.url, lead)  # the spec's per-agent entry lifts the limit for the lead
        assert answer.status_code == 200 and answer.json()["content"][0]["text"] == "for the lead"
        assert upstream.requests()[0]["key"] == REAL_KEY
    finally:
        gw.stop()


def test_a_wrong_budget_key_or_variable_stops_kswarm_up_with_a_clear_reason(short_tmp: Path) -> None:
    home = short_tmp / "home"
    bad = short_tmp / "swarm.yaml"
    bad.write_text(SPEC.replace("    tokens: 50 ", "    tokenz: 50 "))
    with pytest.raises(
        LaunchError, match=r"swarm\.yaml:8: budgets\.agent\.tokenz: Extra inputs are not permitted"
    ):
        Launcher(home, free_port(), bad)
    done = kswarm(home, "up", "-f", str(bad), "--port", str(free_port()))
    assert done.returncode != 0 and "budgets.agent.tokenz" in done.stderr + done.stdout
    assert not (home / "gateway.json").exists()
    good = short_tmp / "good.yaml"
    good.write_text(SPEC)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KSWARM_LLM_AGENT_BUDGET_USD", "5")  # the previous release's variable
        with pytest.raises(LaunchError, match="KSWARM_LLM_BUDGETS__AGENT__USD"):
            Launcher(home, free_port(), good)


def uncommented_budgets(template: str) -> str:
    """The template with the commented-out keys of its budgets: section switched on."""
    head, _, rest = template.partition("\nbudgets:\n")
    section, sep, tail = rest.partition("\n\n")
    section = re.sub(r"^(\s+)# (\w+: )", r"\1\2", section, flags=re.MULTILINE)
    return f"{head}\nbudgets:\n{section}{sep}{tail}"


def leaves(budgets: BudgetSettings) -> dict[str, Any]:
    return budgets.given()


def test_the_templates_budget_fields_are_every_field_and_are_accepted() -> None:
    spec = parse_spec(template_text())
    assert spec.budgets.agent.tokens_per_day == 2_000_000 and spec.budgets.swarm.usd_per_day == 50
    full = parse_spec(uncommented_budgets(template_text())).budgets
    limit_fields = {"usd", "tokens", "usd_per_day", "tokens_per_day"}
    expected = {f"budgets.{scope}.{f}" for scope in ("agent", "swarm") for f in limit_fields}
    assert expected <= set(leaves(full)), "the template should show every budget field"
    assert {p.split(".")[1] for p in leaves(full)} == set(BudgetSettings.model_fields)


def one_limit(path: str, value: float) -> BudgetSettings:
    """Settings with only ``path`` (``budgets.agent.usd``, ``budgets.agents.lead.tokens``) set."""
    parts = path.split(".")[1:]
    data: dict[str, Any] = {parts[-1]: value}
    for part in reversed(parts[:-1]):
        data = {part: data}
    return BudgetSettings.model_validate(data)


async def test_every_template_budget_field_takes_effect(clean_redis: str) -> None:
    """Each field of the template's budgets, set alone just below one request's worst case, refuses
    that request, naming itself; the template's own values admit it."""
    full = parse_spec(uncommented_budgets(template_text())).budgets
    redis = Redis.from_url(clean_redis, decode_responses=True)
    try:
        real = await UsageStore(redis, LLMProxySettings(budgets=full)).reserve("lead", "m", 300, 100)
        assert isinstance(real, Reservation)
        for path in leaves(full):
            budgets = one_limit(path, 0.0001 if ".usd" in path else 10)
            store = UsageStore(redis, LLMProxySettings(budgets=budgets))
            answer = await store.reserve("lead", "m", 300, 100)
            assert isinstance(answer, BudgetRefusal), f"{path} did not refuse"
            scope, field = path.split(".")[1], path.split(".")[-1]
            assert answer.budget == f"{'agent' if scope == 'agents' else scope}.{field}", path
            assert isinstance(await store.reserve("dev-1", "m", 300, 100), BudgetRefusal) == (
                scope != "agents"
            )
            await redis.flushall()
    finally:
        await redis.aclose()


async def test_daily_budgets_count_only_todays_usage(clean_redis: str) -> None:
    redis = Redis.from_url(clean_redis, decode_responses=True)
    try:
        llm = LLMProxySettings(budgets={"agent": {"tokens_per_day": 1000, "tokens": 1500}})
        store = UsageStore(redis, llm)
        first = await store.reserve("dev-1", "m", 2400, 100)  # reserves 800 + 100: what it books
        assert isinstance(first, Reservation)
        assert await store.settle(first, "m", Usage(input_tokens=800, output_tokens=100)) is None
        refused = await store.reserve("dev-1", "m", 300, 100)
        assert isinstance(refused, BudgetRefusal) and refused.budget == "agent.tokens_per_day"
        assert "or the day ends (00:00 UTC)" in refused.message() and refused.used == 900
        # The next UTC day: today's counters are yesterday's; only the all-time budget remembers.
        today = utc_day(time.time())
        await redis.rename(day_key(today), day_key(today - 1))
        again = await store.reserve("dev-1", "m", 300, 100)
        assert isinstance(again, Reservation), "yesterday's usage counted against today's budget"
        await store.settle(again, "m", None)
        usage = await store.get("dev-1")
        assert usage.today_tokens == 0 and usage.total_tokens == 900 and usage.reserved_tokens == 0
        assert await redis.hlen(RESERVED) == 0
        big = await store.reserve("dev-1", "m", 300, 700)  # 900 + 800 > 1500: all time still counts
        assert isinstance(big, BudgetRefusal) and big.budget == "agent.tokens"
    finally:
        await redis.aclose()


@pytest.mark.slow
def test_kswarm_up_f_enforces_the_specs_budget(short_tmp: Path, upstream: ScriptedUpstream) -> None:
    """The real thing: ``kswarm up -f`` in a subprocess, its agent provisioned, the agent's own token."""
    home = short_tmp / "home"
    spec_file = short_tmp / "swarm.yaml"
    spec_file.write_text("swarm: test\nagents:\n  - name: lead\nbudgets:\n  agent: {tokens: 50}\n")
    env = {"KSWARM_LLM_UPSTREAM_URL": upstream.url, "KSWARM_LLM_API_KEY": REAL_KEY}
    up = Up(home, free_port(), "-f", str(spec_file), "--backend", "process", env=env)
    try:
        up.wait_ready()
        token_file = SwarmLayout(home).token_file("lead")
        lead = wait_for(lambda: token_file.exists() and token_file.read_text().strip(), "the lead's token")
        refused = ask(up.url, lead)
        assert refused.status_code == 429, refused.text
        assert "agent lead's token budget (50) would be exceeded" in refused.json()["error"]["message"]
        operator = (home / "operator.token").read_text().strip()
        assert ask(up.url, operator).status_code == 429  # budgets.agent holds operators too ...
        with httpx.Client(base_url=up.url, timeout=30, trust_env=False) as op:
            op.headers["Authorization"] = f"Bearer {operator}"
            # ... until an operator's own override (Redis) lifts it: the proxy behind up -f works.
            op.put("/api/usage/operator/budget", json={"tokens": 100000}).raise_for_status()
            upstream.script(text_reply("through kswarm up"))
            answer = ask(up.url, operator)
            assert answer.status_code == 200 and answer.json()["content"][0]["text"] == "through kswarm up"
            assert op.get("/api/usage/lead").json()["budget_tokens"] == 50
        assert [r["key"] for r in upstream.requests()] == [REAL_KEY]
    finally:
        kswarm(home, "down", "--purge")
        up.stop()


async def test_an_operators_override_wins_per_field_and_null_falls_back(clean_redis: str) -> None:
    redis = Redis.from_url(clean_redis, decode_responses=True)
    try:
        llm = LLMProxySettings(budgets={"agent": {"tokens_per_day": 10, "usd": 1.0}})
        store = UsageStore(redis, llm)
        assert (await store.reserve("dev-1", "m", 300, 100)).budget == "agent.tokens_per_day"  # type: ignore[union-attr]
        await store.set_budget("dev-1", BudgetUpdate(tokens_per_day=100_000))
        admitted = await store.reserve("dev-1", "m", 300, 100)
        assert isinstance(admitted, Reservation)
        await store.settle(admitted, "m", None)
        usage = await store.get("dev-1")
        assert usage.budget_tokens_per_day == 100_000 and usage.budget_usd == 1.0  # usd: not overridden
        await store.set_budget("dev-1", BudgetUpdate(usd=0.0001))  # replaces the whole override
        refused = await store.reserve("dev-1", "m", 300, 100)
        assert isinstance(refused, BudgetRefusal) and refused.budget == "agent.usd"  # checked before daily
        usage = await store.get("dev-1")
        assert usage.budget_usd == 0.0001 and usage.budget_tokens_per_day == 10  # null: the configured one
    finally:
        await redis.aclose()
