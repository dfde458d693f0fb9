"""The Gitea webhook receiver (``POST /api/forge/gitea/hook``): Gitea's events make the gate act at once.

In Gitea mode the gateway registers one hook per repository it ensures (``GiteaForge.ensure_repo``),
with a secret of that repository's own: ``hex(HMAC-SHA256(KSWARM_FORGE_GITEA_WEBHOOK_SECRET,
"kswarm-hook:" + org/name))``. A delivery is accepted only when its ``X-Gitea-Signature`` is the hex
HMAC-SHA256 of the raw body under the secret of the repository the body names, that repository is one
of the forge's, and the same signed body has not been accepted before (a replay changes nothing).
Anything else is refused (401 unsigned or wrongly signed, 404 an unknown repository, 409 a replay)
and nothing is written. An accepted delivery becomes a forge event for the gate (``ks:forge:events``);
the gate then reads everything it decides on from Gitea itself, so a hook carries no authority
beyond "look at this PR now". The gate's sweep stays as the fallback for hooks that never arrive.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
from typing import Any

from fastapi import APIRouter, Request

from gateway.deps import Ctx
from gateway.errors import ForgeError
from gateway.forge import keys
from gateway.forge.event_feed import emit_event
from gateway.forge.protocol import Forge
from gateway.redis_facade import StrRedis
from gateway.services import FORGE, FORGE_SETTINGS

log = logging.getLogger("kswarm.forge.webhook")
HOOK_PATH = "/api/forge/gitea/hook"
SEEN_TTL_S = 7 * 86400
MAX_BODY = 4 << 20
REVIEW_STATES = {
    "pull_request_approved": "APPROVED",
    "pull_request_rejected": "REQUEST_CHANGES",
    "pull_request_comment": "COMMENT",
}


def repo_secret(master: str, repo: str) -> str:
    """The hook secret of one repository, derived from the gateway's: a secret leaked from one
    repository's hook settings signs nothing for another."""
    return hmac.new(master.encode(), f"kswarm-hook:{repo}".encode(), hashlib.sha256).hexdigest()


def signed_by(secret: str, body: bytes, given: str) -> bool:
    expected = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return bool(given) and hmac.compare_digest(expected, given.strip().lower())


def forge_event(event: str, payload: dict[str, Any]) -> dict[str, str] | None:
    """The gate's event for a Gitea delivery (None: nothing the gate decides on)."""
    sender = str((payload.get("sender") or {}).get("login") or "")
    if event == "push":
        return {
            "type": "push",
            "ref": str(payload.get("ref", "")),
            "sha": str(payload.get("after", "")),
            "old": str(payload.get("before", "")),
            "actor": sender,
        }
    if event == "status":
        return {
            "type": "status",
            "sha": str(payload.get("sha", "")),
            "context": str(payload.get("context", "")),
            "state": str(payload.get("state", "")),
            "actor": sender,
        }
    number = payload.get("number") or (payload.get("pull_request") or {}).get("number")
    if not isinstance(number, int):
        return None
    if event in REVIEW_STATES:
        return {"type": "review", "pr": str(number), "state": REVIEW_STATES[event], "actor": sender}
    if event == "pull_request":
        if payload.get("action") == "closed":
            return None
        kind = "pr_opened" if payload.get("action") == "opened" else "pr_changed"
        return {"type": kind, "pr": str(number), "actor": sender}
    return None


async def receive(redis: StrRedis, forge: Forge, master: str, request: Request) -> dict[str, Any]:
    body = await request.body()
    if len(body) > MAX_BODY:
        raise ForgeError("hook body too large", 413)
    given = request.headers.get("x-gitea-signature", "")
    if not given:
        raise ForgeError("unsigned hook: X-Gitea-Signature is required", 401)
    try:
        payload = json.loads(body)
        repo = str(payload["repository"]["full_name"])
    except (ValueError, KeyError, TypeError):
        raise ForgeError("hook body is not a Gitea payload with repository.full_name", 401) from None
    if not signed_by(repo_secret(master, repo), body, given):
        raise ForgeError(f"hook signature does not match {repo}'s secret", 401)
    org, _, name = repo.partition("/")
    if not any(r.full_name == repo for r in await forge.list_repos(name)):
        raise ForgeError(f"hook for {repo}, which is not one of this forge's repositories", 404)
    seen = f"{keys.PREFIX}hook-seen:{hashlib.sha256(given.encode() + body).hexdigest()}"
    if not await redis.set(seen, "1", nx=True, ex=SEEN_TTL_S):
        raise ForgeError("hook already delivered: a replay changes nothing", 409)
    event = request.headers.get("x-gitea-event", "")
    fields = forge_event(event, payload)
    if fields is None:
        return {"accepted": True, "event": event, "queued": False}
    kind = fields.pop("type")
    await emit_event(redis, kind, repo, source="gitea-hook", **fields)
    log.info("gitea hook %s on %s -> %s", event, repo, kind)
    return {"accepted": True, "event": event, "queued": True, "org": org}


router = APIRouter(tags=["forge"])  # included only when a webhook secret is configured


@router.post(HOOK_PATH, summary="Gitea webhook receiver (HMAC-signed; Gitea mode only)")
async def hook(request: Request, ctx: Ctx) -> dict[str, Any]:
    master = ctx.services.get(FORGE_SETTINGS).gitea_webhook_secret  # resolved once, at start
    if not master:
        raise ForgeError("no webhook secret is configured", 404)
    return await receive(ctx.redis, ctx.services.get(FORGE), master, request)
