"""The demo's model behind the LLM proxy (``orchestrator.demo.upstream``), driven by the real Anthropic
SDK: it acts by the role the system prompt names, streams what it answers whole, and refuses a caller
that does not hold the run's key (anything that did not come through the gateway's proxy)."""

from __future__ import annotations

from typing import Any

import anthropic
import httpx

from agents.prompt import wake_message
from orchestrator.demo.steps import DemoPolicy
from orchestrator.demo.upstream import DemoUpstream, serving

KEY = "sk-demo-test-key"
POLICY = DemoPolicy(repo="kswarm/dataset", pool="cpu", reviewers=("rev-1",), faulty=frozenset({"softmax"}))
TOOLS = [
    {"name": n, "description": n, "input_schema": {"type": "object"}}
    for n in "whoami bash write_file chat_post task_post task_claim pr_open job_submit".split()
]
KICKOFF = {
    "reason": "dm",
    "sender": "operator",
    "channel": "dm:lead:operator",
    "message_id": "1-0",
    "text": "Kick-off: post these. Tasks: add. Developers: dev-1. Reviewers: rev-1. Go.",
}


def system(name: str, role: str) -> str:
    return f"You are {name}, a {role} agent of swarm demo. Your git identity is {name} <{name}@agents.demo>."


def request(role: str, identified: bool = False) -> dict[str, Any]:
    """The wake of a kick-off DM; ``identified``: after the ``whoami`` every plan starts with."""
    name = "lead" if role == "lead" else "dev-1"
    messages: list[dict[str, Any]] = [{"role": "user", "content": wake_message([KICKOFF])}]
    if identified:
        me = f'{{"name": "{name}", "kind": "agent", "email": "{name}@agents.demo"}}'
        messages += [
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t1", "name": "whoami", "input": {}}],
            },
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": me}]},
        ]
    return {
        "model": "scripted",
        "max_tokens": 1024,
        "system": system(name, role),
        "messages": messages,
        "tools": TOOLS,
    }


async def test_the_lead_acts_on_a_kickoff_and_a_stream_says_the_same_as_a_whole_reply() -> None:
    async with serving(DemoUpstream(POLICY, KEY)) as url:
        client = anthropic.AsyncAnthropic(api_key=KEY, base_url=url, max_retries=0)
        try:
            whole = await client.messages.create(**request("lead"))
            async with client.messages.stream(**request("lead")) as stream:
                streamed = await stream.get_final_message()
            lead_next = await client.messages.create(**request("lead", identified=True))
            developer_next = await client.messages.create(**request("developer", identified=True))
        finally:
            await client.close()
    assert whole.stop_reason == "tool_use" and whole.content[0].type == "tool_use"
    assert whole.usage.input_tokens > 0 and whole.usage.output_tokens > 0, "tokens are booked upstream"
    assert streamed.stop_reason == whole.stop_reason
    assert [(b.type, getattr(b, "name", None), getattr(b, "input", None)) for b in streamed.content] == [
        (b.type, getattr(b, "name", None), getattr(b, "input", None)) for b in whole.content
    ]
    assert streamed.usage.output_tokens == whole.usage.output_tokens
    # The role comes from the system prompt: the lead posts the kick-off's tasks; to a developer the
    # same DM is no kick-off, and it notes the DM in a file (the scripted defaults).
    assert [(b.type, getattr(b, "name", None)) for b in lead_next.content] == [("tool_use", "task_post")]
    assert [(b.type, getattr(b, "name", None)) for b in developer_next.content] == [
        ("tool_use", "write_file")
    ]


async def test_attack_a_caller_without_the_runs_key_is_refused_in_anthropics_shape() -> None:
    async with serving(DemoUpstream(POLICY, KEY)) as url:
        async with httpx.AsyncClient(base_url=url, trust_env=False) as http:
            for headers in (
                {},
                {"x-api-key": "sk-demo-guess"},
                {"x-api-key": KEY[:-1]},
                {"x-api-key": KEY + "x"},
                {"authorization": KEY},  # no scheme
                {"authorization": f"Basic {KEY}"},
                {"authorization": f"Bearer {KEY[:-1]}"},
            ):
                refused = await http.post("/v1/messages", json=request("lead"), headers=headers)
                assert refused.status_code == 401
                assert refused.json()["error"]["type"] == "authentication_error"
            for body in (
                b"{not json",
                b"[1]",
                b'{"max_tokens": "many", "messages": []}',
                b'{"messages": [7]}',
            ):
                bad = await http.post("/v1/messages", content=body, headers={"x-api-key": KEY})
                assert bad.status_code == 400 and bad.json()["type"] == "error", (body, bad.text)
            bad = await http.post(
                "/v1/messages/count_tokens", content=b"{not json", headers={"x-api-key": KEY}
            )
            assert bad.status_code == 400


def test_the_role_is_read_from_the_system_prompt_hyphen_included() -> None:
    from orchestrator.demo.upstream import role_of

    assert role_of("You are red-1, a red-team agent of the swarm demo.") == "red-team"
    assert role_of("You are rev-1, a reviewer agent.") == "reviewer"
