"""Attacks on the dataset card (``README.md``) as agents would make them (issue 23): text an agent
controls must stay text in the card, and the card's model names must be what the LLM proxy saw.

mallory reports a model call in her own timeline under a model name made of HTML and a heading, asks
the proxy for that model too (body and header), pushes a kernel whose name would be emphasis and opens
her PR under a title of HTML and a heading; the upstream answers her with the model it ran. eve's
upstream answers under a name with markup. The card must hold no raw HTML from them, no new heading,
tables with their column counts, and the models the upstream answered with (``unknown`` for the one
with markup), never mallory's.

Real gateway (forge and gate, task board, job runner, LLM proxy, monitor), real Redis, real git pushes,
the scripted upstream (the only fake)."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from datasetkit import Lab
from forgekit import Swarm
from redis import Redis
from test_dataset_cost_e2e import UPSTREAM_KEY, CostGateway, wait_booked, wait_for

from gateway.dataset.build import build_dataset
from gateway.monitor import keys
from gateway.tasks.catalogue import solution_path
from kstest.upstream import ScriptedUpstream, text_reply

HOSTILE_MODEL = "claude</td><script>alert(1)</script>\n# Owned | x"
UPSTREAM_MODEL = "claude-cost-1"
EVIL_UPSTREAM_MODEL = "evil<img src=x onerror=alert(3)>|\n# Owned by the upstream"
KERNEL = "kernels/add/mallory__x__.py"  # the job API takes [A-Za-z0-9_.-] file names: emphasis at most
# One line: the forge refuses a title with a newline (a heading through a line break is covered by
# test_dataset_card_escaping.py, for text stored before that rule or from a real Gitea).
PR_TITLE = "<script>alert(4)</script> # Owned PR | [click](http://e)"
CELL_SPLIT = re.compile(r"(?<!\\)\|")


def spend(gw: CostGateway, who: str, upstream: ScriptedUpstream, answered: str, tokens_in: int) -> None:
    """One model call through the proxy as the agent's SDK makes it, asking for the hostile model by
    name (body and header); the upstream answers under ``answered``."""
    upstream.script(text_reply("ok", model=answered, usage={"input_tokens": tokens_in, "output_tokens": 10}))
    body = {
        "model": HOSTILE_MODEL,
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "x" * 3 * tokens_in}],
    }
    headers = {"x-api-key": gw.tokens[who], "anthropic-model": HOSTILE_MODEL.replace("\n", " ")}
    with httpx.Client(base_url=gw.url, headers=headers, timeout=30, trust_env=False) as c:
        reply = c.post("/v1/messages", json=body)
    assert reply.status_code == 200, reply.text


def tables(card: str) -> list[list[str]]:
    """Every Markdown table of the card: its consecutive lines that start with ``|``."""
    found: list[list[str]] = []
    previous = False
    for line in card.splitlines():
        is_row = line.startswith("|")
        if is_row and previous:
            found[-1].append(line)
        elif is_row:
            found.append([line])
        previous = is_row
    return found


@pytest.mark.slow
def test_agent_text_and_agent_reported_models_cannot_inject_markup_into_the_card(
    clean_redis: str, short_tmp: Path
) -> None:
    with ScriptedUpstream(api_key=UPSTREAM_KEY) as upstream:
        CostGateway.upstream_url = upstream.url
        gw = CostGateway(short_tmp / "home", clean_redis)
        gw.start()
        try:
            gw.tokens = {n: gw.add_principal(n) for n in ("mallory", "bob", "eve")}
            gw.tokens["worker1"] = gw.add_principal("worker1", "worker")
            with gw.op() as op:
                assert op.post("/api/tasks/seed", json={"post_tasks": False}).status_code == 200
                policy = {"required_approvals": 1, "required_checks": ["kswarm/verify:cpu"]}
                assert op.put("/api/forge/repos/kswarm/dataset/policy", json=policy).status_code == 200
                assert op.post("/api/tasks", json={"id": "add", "title": "Add"}).status_code == 201
            with gw.client(gw.tokens["mallory"]) as mallory:
                assert mallory.post("/api/tasks/add/claim").status_code == 200
                entry = {
                    "kind": "model",
                    "ts": time.time(),
                    "summary": "a model call",
                    "data": {"model": HOSTILE_MODEL, "usage": {"input_tokens": 10, "output_tokens": 1}},
                }
                assert mallory.post("/api/timeline", json={"entries": [entry]}).status_code == 200
            watching = Redis.from_url(gw.redis_url, decode_responses=True)
            wait_for(lambda: watching.hexists(keys.USAGE_LAST, keys.USAGE_WATCHING), "the monitor sampling")
            watching.close()
            spend(gw, "mallory", upstream, UPSTREAM_MODEL, 100)
            spend(gw, "eve", upstream, EVIL_UPSTREAM_MODEL, 50)
            wait_booked(gw, "add", "mallory", 110)
            wait_booked(gw, "-", "eve", 60)

            swarm = Swarm(gw, short_tmp / "git", "kswarm", "dataset", gw.tokens)
            lab, work = Lab(gw, swarm), {}
            lab.push("mallory", "mallory/add", KERNEL, solution_path("add").read_text(), work)
            job = lab.verify("mallory", "add", KERNEL, "mallory/add", True)
            with swarm.api("mallory") as api:
                body: dict[str, Any] = {
                    "head": "mallory/add",
                    "base": "main",
                    "title": PR_TITLE,
                    "reviewers": ["bob"],
                }
                opened = api.post("/repos/kswarm/dataset/pulls", json=body)
            assert opened.status_code == 201, opened.text
            pr = opened.json()["number"]
            assert swarm.review("bob", pr, "APPROVED").status_code == 200
            swarm.wait_merged(pr)

            out = short_tmp / "ds"
            report = build_dataset(
                gw.url, gw.operator_token, "kswarm/dataset", out, mirror_dir=short_tmp / "m.git"
            )
        finally:
            gw.stop()

    [record] = report.rows
    assert record["record_id"] == job and record["accepted"] and record["kernel_path"] == KERNEL
    assert record["pr_title"] == PR_TITLE  # the data keeps the agent's text as it is; the card escapes it
    assert record["author_model"] == UPSTREAM_MODEL, "the model the upstream answered with, not her report"
    cost = json.loads((out / "summary.json").read_text())["cost"]
    assert set(cost["by_model"]) == {UPSTREAM_MODEL, "unknown"}, cost["by_model"]

    card = (out / "README.md").read_text()
    lowered = card.lower()
    assert "<script" not in lowered and "</td>" not in lowered and "<img" not in lowered, card
    assert "alert(1)" not in card and "owned by the upstream" not in lowered, "an agent's or a bad name"
    headings = [line for line in card.splitlines() if line.lstrip().startswith("#")]
    assert not [h for h in headings if "owned" in h.lower() or "alert" in h], headings
    assert not re.search(r"(?<!\\)\]\(", card), "no link from an agent's text"
    for table in tables(card):
        columns = len(CELL_SPLIT.split(table[0]))
        assert all(len(CELL_SPLIT.split(row)) == columns for row in table), table
    assert f"| add | `{KERNEL}` |" in card, "a path in a code span: no emphasis"
    assert f"| {UPSTREAM_MODEL} | 110 |" in card and "| unknown | 60 |" in card, card
