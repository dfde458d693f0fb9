"""Agent-written text is shown safely by every command that prints it (docs/security.md, docs/cli.md).

An agent (its own token, the real gateway) writes Rich markup and terminal escapes everywhere it can
write text: a chat message, a PR's title and body, a review, a comment, a task's title, its timeline, its
``doing``; a worker reports a job's error and log. Every command that prints that text must neither
crash on the markup nor hand the escapes to the operator's terminal: each control character is shown
as ``\\xNN``, each markup tag as the text it is. ``--json`` stays JSON (the encoder escapes them).
"""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import redis as redis_sync
from cli_kit import Kswarm, Ran
from fastapi import FastAPI

from gateway.client import GatewayClient
from gateway.input_text import ControlCharGuard
from gateway.monitor.plugin import MonitorPlugin
from gateway.monitor.settings import MonitorSettings
from gateway.plugin import Plugin
from gateway.plugins import default_plugins, replace_plugins
from kstest.gateway import GatewayThread

# What an agent writes: markup that crashes Rich ([/] closes nothing), markup that styles, and the
# escapes that clear the screen, retitle the window, hide a link, move the cursor, and the C1 CSI.
EVIL = (
    "[/] [bold red]x[/] \x1b[2J\x1b]0;owned\x07 "
    "\x1b]8;;http://evil\x1b\\click\x1b]8;;\x1b\\ \rfake\x9b31m \x00\x7f\u202e"
)
RAW = ["\x1b", "\x07", "\x9b", "\x00", "\x7f", "\r", "\u202e"]  # none may reach the terminal
SHOWN = [  # as the operator reads them: the tags as text, each control character as its escape
    *("[/]", "[bold red]x[/]", "\\x1b[2J", "\\x1b]0;owned\\x07", "\\x1b]8;;http://evil", "\\x0dfake", "\\x9b")
]


def assert_safe(ran: Ran, shown_at_least: list[str] = SHOWN) -> None:
    """The command ran, printed the agent's text, and printed it visibly, without a control character."""
    assert ran.code == 0, ran
    for raw in RAW:
        assert raw not in ran.stdout, f"{raw!r} reached the terminal: {ran.stdout!r}"
        assert raw not in ran.stderr, f"{raw!r} reached the terminal: {ran.stderr!r}"
    for shown in shown_at_least:
        assert shown in ran.stdout, f"{shown!r} not shown in {ran.stdout!r}"


class TextGateway(GatewayThread):
    """Every plugin; the monitor puts an open PR on Attention at once; no input guard.

    The gateway refuses control characters in text at input (``tests/gateway/test_input_text.py``). The
    CLI is the second defence, for text that is in the stores anyway: written before the guard existed,
    through a real Gitea, or a worker's report of a kernel's output. This gateway runs without the
    guard so that every kind of such text exists to be shown."""

    def build_app(self) -> FastAPI:
        app = super().build_app()
        app.user_middleware = [m for m in app.user_middleware if m.cls is not ControlCharGuard]
        return app

    def plugins(self) -> list[Plugin[Any]]:
        settings = MonitorSettings(pr_blocked_after_s=0.0, attention_every_s=0.3, sample_s=0.3, lease_s=5.0)
        return replace_plugins(default_plugins(), MonitorPlugin(settings))


@dataclass
class Written:
    """The gateway, and where the agent's text went."""

    gw: TextGateway
    tokens: dict[str, str] = field(default_factory=dict)
    repo: str = "kswarm/evil"
    pr: int = 0
    job: str = ""


def as_(gw: GatewayThread, token: str) -> httpx.Client:
    return gw.client(token)


def gitea(gw: GatewayThread, token: str) -> httpx.Client:
    return httpx.Client(base_url=f"{gw.url}/api/v1", headers={"Authorization": f"token {token}"}, timeout=30)


def ok(reply: httpx.Response) -> Any:
    assert reply.is_success, reply.text
    return reply.json() if reply.content else None


@pytest.fixture(scope="module")
def written(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Written]:
    client = redis_sync.Redis.from_url(redis_url)
    client.flushall()
    client.close()
    gw = TextGateway(tmp_path_factory.mktemp("h"), redis_url)
    gw.start()
    try:
        yield write_everything(Written(gw))
    finally:
        gw.stop()


def write_everything(w: Written) -> Written:
    gw = w.gw
    w.tokens = {n: gw.add_principal(n) for n in ("mallory", "eve")}
    mallory, eve = w.tokens["mallory"], w.tokens["eve"]
    org, name = w.repo.split("/")
    with as_(gw, gw.operator_token) as op:
        ok(op.post("/api/forge/repos", json={"org": org, "name": name}))
        ok(op.put("/api/tasks/leads/mallory"))
        worker = ok(op.post("/api/jobs/pools/cpu/workers"))["token"]
    with as_(gw, mallory) as c:
        ok(c.post("/api/channels/general/messages", json={"text": EVIL}))
        ok(c.post("/api/heartbeat", json={"state": "working", "doing": EVIL}))
        entries = [{"kind": "tool_call", "ts": time.time(), "summary": EVIL, "data": {}, "call_id": "c1"}]
        ok(c.post("/api/timeline", json={"entries": entries}))
        ok(c.post("/api/tasks", json={"id": "evil-task", "title": EVIL, "description": EVIL}))
    content = base64.b64encode(b"print('k')\n").decode()
    with gitea(gw, mallory) as api:
        files = [{"operation": "create", "path": "kernels/add/mallory.py", "content": content}]
        ok(api.post(f"/repos/{w.repo}/contents", json={"files": files, "new_branch": "mallory/evil"}))
        body = {"head": "mallory/evil", "base": "main", "title": EVIL, "body": EVIL}
        w.pr = ok(api.post(f"/repos/{w.repo}/pulls", json=body))["number"]
        ok(api.post(f"/repos/{w.repo}/issues/{w.pr}/comments", json={"body": EVIL}))
    with gitea(gw, eve) as api:
        ok(api.post(f"/repos/{w.repo}/pulls/{w.pr}/reviews", json={"event": "REQUEST_CHANGES", "body": EVIL}))
    with as_(gw, mallory) as c:
        job = {"kernel": "kernels/add/mallory.py", "ref": "mallory/evil", "repo": w.repo, "pool": "cpu"}
        w.job = ok(c.post("/api/jobs", json=job))["id"]
    with as_(gw, worker) as c:
        take = {"instance": "w1", "node": "local", "free_devices": 1, "wait_s": 5}
        assigned = ok(c.post("/api/jobs/pools/cpu/take", json=take))
        assert assigned["job"]["id"] == w.job
        finish = {"instance": "w1", "attempt": assigned["attempt"], "state": "failed", "error": EVIL}
        ok(c.post(f"/api/jobs/{w.job}/finish", json=finish | {"verdict": "fail", "log": EVIL}))
    return w


def op_run(kswarm: Kswarm, w: Written, *argv: str) -> Ran:
    return kswarm(*argv, url=w.gw.url, token=w.gw.operator_token)


def test_chat_tail(kswarm: Kswarm, written: Written) -> None:
    assert_safe(op_run(kswarm, written, "chat", "tail", "general"))


def test_chat_tail_follow(kswarm: Kswarm, written: Written, monkeypatch: pytest.MonkeyPatch) -> None:
    """``-f``: the message arrives over the real event stream while the command follows it; the stream is
    ended after that one message (the command would follow for ever)."""
    real = GatewayClient.follow_events

    def one_message(self: GatewayClient, *args: Any, **kwargs: Any) -> Iterator[tuple[str, dict[str, Any]]]:
        for event_id, data in real(self, *args, **kwargs):
            yield event_id, data
            if data.get("type") == "message":
                return

    done = threading.Event()

    def post_until_seen() -> None:  # again and again: the first may precede the command's subscription
        with as_(written.gw, written.tokens["eve"]) as c:
            for _ in range(60):
                if done.wait(0.5):
                    return
                ok(c.post("/api/channels/general/messages", json={"text": EVIL}))

    monkeypatch.setattr(GatewayClient, "follow_events", one_message)
    poster = threading.Thread(target=post_until_seen)
    poster.start()
    try:
        ran = op_run(kswarm, written, "chat", "tail", "general", "-f", "-n", "0")
    finally:
        done.set()
        poster.join()
    assert_safe(ran)
    assert "eve" in ran.stdout


def test_chat_tail_json_stays_json(kswarm: Kswarm, written: Written) -> None:
    ran = op_run(kswarm, written, "chat", "tail", "general", "--json")
    assert ran.code == 0 and "\x1b" not in ran.stdout
    assert EVIL in [json.loads(line)["text"] for line in ran.stdout.splitlines()]


def test_prs(kswarm: Kswarm, written: Written) -> None:
    assert_safe(op_run(kswarm, written, "prs", "--repo", written.repo))


def test_pr_show(kswarm: Kswarm, written: Written) -> None:
    ran = op_run(kswarm, written, "pr", "show", str(written.pr), "--repo", written.repo, "--diff")
    assert_safe(ran)
    assert "review @eve" in ran.stdout and "comment @mallory" in ran.stdout


def test_pr_show_json_stays_json(kswarm: Kswarm, written: Written) -> None:
    ran = op_run(kswarm, written, "pr", "show", str(written.pr), "--repo", written.repo, "--json")
    assert ran.code == 0 and "\x1b" not in ran.stdout
    pr = json.loads(ran.stdout)
    assert pr["title"] == EVIL and pr["body"] == EVIL


def test_pr_why(kswarm: Kswarm, written: Written) -> None:
    assert_safe(op_run(kswarm, written, "pr", "why", str(written.pr), "--repo", written.repo))


def test_agent_timeline(kswarm: Kswarm, written: Written) -> None:
    ran = op_run(kswarm, written, "agent", "timeline", "mallory")
    assert_safe(ran)
    assert ran.stdout.count("\\x1b[2J") == 2, "the doing line and the entry"


def test_agent_list(kswarm: Kswarm, written: Written) -> None:
    assert_safe(op_run(kswarm, written, "agent", "list"))


def test_attention(kswarm: Kswarm, written: Written) -> None:
    deadline = time.monotonic() + 20
    while True:
        ran = op_run(kswarm, written, "attention", "--json")
        items = json.loads(ran.stdout)["items"]
        if any(i["kind"] == "pr" for i in items):  # its title is the PR's
            break
        assert time.monotonic() < deadline, items
        time.sleep(0.3)
    assert_safe(op_run(kswarm, written, "attention"))


def test_tasks_list(kswarm: Kswarm, written: Written) -> None:
    assert_safe(op_run(kswarm, written, "tasks", "list"))


def test_jobs(kswarm: Kswarm, written: Written) -> None:
    assert_safe(op_run(kswarm, written, "jobs"), SHOWN[:4])  # the error's first 60 characters


def test_job_show(kswarm: Kswarm, written: Written) -> None:
    ran = op_run(kswarm, written, "job", "show", written.job, "--log")
    assert_safe(ran)
    assert ran.stdout.count("\\x1b[2J") == 2, "the error and the log"
