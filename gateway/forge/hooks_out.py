"""The embedded forge's repository webhooks, delivered as Gitea delivers them.

A hook (``POST /api/v1/repos/{o}/{r}/hooks``, type ``gitea``, JSON) gets the repository's forge events
(``ks:forge:events``, consumer group ``hooks``) as Gitea's payloads: ``push``, ``pull_request``
(opened, synchronized, closed), ``pull_request_approved`` / ``_rejected`` / ``_comment`` (reviews) and
``status``, with Gitea's headers: ``X-Gitea-Event`` (and ``X-Gitea-Event-Type``), ``X-Gitea-Delivery``
(a UUID), ``X-Gitea-Signature`` (hex HMAC-SHA256 of the body with the hook's secret) and its GitHub
twin ``X-Hub-Signature-256: sha256=<hex>``. Delivery is best effort with a short timeout, like
Gitea's (a receiver that misses one relies on its sweep).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import logging
import time
import uuid
from typing import Any

import httpx
from pydantic import BaseModel, Field

from gateway.cancellation import nap, rounds
from gateway.forge import keys
from gateway.redis_compat import stream_gone
from gateway.redis_facade import StrRedis

log = logging.getLogger("kswarm.forge.hooks")
GROUP = "hooks"
HOOK_EVENTS: tuple[str, ...] = (
    "push",
    "pull_request",
    "pull_request_sync",
    "pull_request_review_approved",
    "pull_request_review_rejected",
    "pull_request_review_comment",
    "status",
)
REVIEW_HOOKS = {
    "APPROVED": ("pull_request_review_approved", "pull_request_approved"),
    "REQUEST_CHANGES": ("pull_request_review_rejected", "pull_request_rejected"),
    "COMMENT": ("pull_request_review_comment", "pull_request_comment"),
}


def signature(secret: str, body: bytes) -> str:
    """Gitea's ``X-Gitea-Signature``: hex HMAC-SHA256 of the raw body."""
    return hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def hooks_key(repo: str) -> str:
    return f"{keys.PREFIX}hooks:{repo}"


class Hook(BaseModel):
    id: int
    repo: str
    url: str
    secret: str = Field("", exclude=True)
    events: list[str]
    active: bool = True
    branch_filter: str = ""
    created: float = Field(default_factory=time.time)

    def public(self) -> dict[str, Any]:
        """Gitea's ``Hook`` (the secret is never shown)."""
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.created))
        return {
            "id": self.id,
            "type": "gitea",
            "branch_filter": self.branch_filter,
            "config": {"url": self.url, "content_type": "json", "http_method": "post"},
            "events": self.events,
            "authorization_header": "",
            "active": self.active,
            "updated_at": stamp,
            "created_at": stamp,
        }


class HookStore:
    def __init__(self, redis: StrRedis) -> None:
        self.redis = redis

    async def add(
        self, repo: str, url: str, secret: str, events: list[str], active: bool, branch_filter: str
    ) -> Hook:
        hook_id = int(await self.redis.incr(f"{keys.PREFIX}seq:hook"))
        hook = Hook(
            id=hook_id, repo=repo, url=url, secret=secret, events=events, active=active,
            branch_filter=branch_filter,
        )  # fmt: skip
        await self.redis.hset(
            hooks_key(repo), str(hook_id), json.dumps({**hook.model_dump(), "secret": secret})
        )
        return hook

    async def list(self, repo: str) -> list[Hook]:
        raw = await self.redis.hgetall(hooks_key(repo))
        return sorted((Hook.model_validate_json(v) for v in raw.values()), key=lambda h: h.id)

    async def delete(self, repo: str, hook_id: int) -> bool:
        return bool(await self.redis.hdel(hooks_key(repo), str(hook_id)))


def payload_of(
    fields: dict[str, str], repo_json: dict[str, Any], pr_json: dict[str, Any] | None
) -> tuple[str, str, dict[str, Any]] | None:
    """(hook event type, X-Gitea-Event, payload) of a forge event, or None (not a Gitea event)."""
    kind = fields.get("type", "")
    sender = {"login": fields.get("actor", ""), "username": fields.get("actor", "")}
    common = {"repository": repo_json, "sender": sender}
    if kind == "push":
        ref = fields.get("ref", "")
        return "push", "push", {
            "ref": ref, "before": fields.get("old") or "0" * 40, "after": fields.get("sha", ""),
            "commits": [], "pusher": sender, **common,
        }  # fmt: skip
    if pr_json is None:
        if kind == "status":
            return "status", "status", {
                "sha": fields.get("sha", ""), "context": fields.get("context", ""),
                "state": fields.get("state", ""), "description": "", "target_url": "", **common,
            }  # fmt: skip
        return None
    number = pr_json["number"]
    if kind == "pr_opened":
        return (
            "pull_request",
            "pull_request",
            {"action": "opened", "number": number, "pull_request": pr_json, **common},
        )
    if kind == "merged":
        return (
            "pull_request",
            "pull_request",
            {"action": "closed", "number": number, "pull_request": pr_json, **common},
        )
    if kind == "review" and fields.get("state") in REVIEW_HOOKS:
        event_type, header = REVIEW_HOOKS[fields["state"]]
        review = {"type": event_type, "content": ""}
        return (
            event_type,
            header,
            {"action": "reviewed", "number": number, "pull_request": pr_json, "review": review, **common},
        )
    return None


def wants(hook: Hook, event_type: str) -> bool:
    if not hook.active:
        return False
    if event_type in hook.events:
        return True
    return (
        event_type.startswith("pull_request")
        and "pull_request" in hook.events
        and event_type != "pull_request_sync"
    )


class HookDeliverer:
    """Delivers the forge's events to the repositories' hooks (one per gateway; a consumer group)."""

    def __init__(self, redis: StrRedis, render: Any, timeout_s: float = 5.0) -> None:
        self.redis = redis
        self.store = HookStore(redis)
        self.render = render  # async (repo, fields) -> (repo_json, pr_json | None)
        self.consumer = f"hooks-{uuid.uuid4().hex[:12]}"
        self.timeout_s = timeout_s

    async def ensure_group(self) -> None:
        with contextlib.suppress(Exception):  # BUSYGROUP: it exists
            await self.redis.xgroup_create(keys.EVENTS, GROUP, id="$", mkstream=True)

    async def deliver(self, http: httpx.AsyncClient, fields: dict[str, str]) -> int:
        repo = fields.get("repo", "")
        hooks = await self.store.list(repo) if repo else []
        if not hooks:
            return 0
        repo_json, pr_json = await self.render(repo, fields)
        shaped = payload_of(fields, repo_json, pr_json)
        if shaped is None:
            return 0
        event_type, header, payload = shaped
        body = json.dumps(payload).encode()
        sent = 0
        for hook in hooks:
            if not wants(hook, event_type):
                continue
            digest = signature(hook.secret, body) if hook.secret else ""
            headers = {
                "Content-Type": "application/json",
                "X-Gitea-Event": header,
                "X-Gitea-Event-Type": event_type,
                "X-Gitea-Delivery": str(uuid.uuid4()),
                "X-Gitea-Signature": digest,
                "X-Hub-Signature-256": f"sha256={digest}" if digest else "",
                "User-Agent": "Go-http-client/1.1",
            }
            try:
                await http.post(hook.url, content=body, headers=headers, timeout=self.timeout_s)
                sent += 1
            except httpx.HTTPError as exc:
                log.warning("hook %s of %s: %s", hook.id, repo, exc)
        return sent

    async def run(self) -> None:
        await self.ensure_group()
        async with httpx.AsyncClient() as http:
            for _ in rounds():
                try:
                    reply = await self.redis.xreadgroup(
                        GROUP, self.consumer, {keys.EVENTS: ">"}, count=50, block=1000
                    )
                    entries: list[tuple[str, dict[str, str]]] = reply[0][1] if reply else []
                    for entry_id, fields in entries:
                        try:
                            await self.deliver(http, fields)
                        except Exception:
                            log.exception("hook delivery of %s failed", entry_id)
                        await self.redis.xack(keys.EVENTS, GROUP, entry_id)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    if stream_gone(exc):
                        log.warning("hooks: events stream gone (%s); recreating the consumer group", exc)
                        await self.ensure_group()
                        continue
                    log.exception("hook loop error")
                    await nap(1)
