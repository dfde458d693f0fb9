"""The Gitea adapter: the Forge protocol over Gitea's REST v1 (httpx, async).

It acts for users with the admin token and ``Sudo: <user>``; a user's own token is created with that
user's Basic auth (Gitea refuses admin tokens there), after setting a random password. Repository
content is ``gitea_content.py``; kswarm's own branch rules live beside Gitea's protection
(``gitea_policy.py``); with a webhook URL and secret, every ensured repository gets a hook to the
gateway's receiver (``webhook.py``). The same code is tested against the embedded forge's
Gitea-shaped routes; docs/forge.md lists what has not been run against a live Gitea.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import Any

import httpx

from gateway.errors import ForgeError
from gateway.forge.gate.policy import ReviewPolicy
from gateway.forge.gitea import shapes
from gateway.forge.gitea.content import GiteaContent
from gateway.forge.gitea.policy import PolicyExtensions
from gateway.forge.gitea.webhook import repo_secret
from gateway.forge.hooks_out import HOOK_EVENTS
from gateway.forge.models import (
    DIFF_MAX_BYTES,
    DIFF_MAX_FILE_BYTES,
    DIFF_TRUNCATED_HEADER,
    ChangedFile,
    Comment,
    CommitStatus,
    ForgeUser,
    MergeResult,
    PullRequest,
    RepoInfo,
    Review,
)
from gateway.forge.names import check_text
from gateway.git.diffcut import CHUNK, CutDiff, DiffCutter
from gateway.redis_facade import StrRedis

TOKEN_SCOPES = ["write:repository", "write:issue", "read:user", "read:organization"]
PAGE = 50  # Gitea's default MAX_RESPONSE_ITEMS


class GiteaForge(GiteaContent):
    kind = "gitea"

    def __init__(
        self,
        base_url: str,
        admin_token: str,
        *,
        gate_user: str = "gate",
        gate_email: str = "gate@bots.kswarm",
        redis: StrRedis | None = None,
        webhook_url: str | None = None,
        webhook_secret: str | None = None,
        client: httpx.AsyncClient | None = None,
        timeout: float = 30.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.admin_token = admin_token
        self.gate_user = gate_user
        self.gate_email = gate_email
        self.extensions = PolicyExtensions(redis) if redis is not None else None
        self.webhook_url = webhook_url
        self.webhook_secret = webhook_secret
        self.http = client or httpx.AsyncClient(base_url=f"{self.base_url}/api/v1", timeout=timeout)

    async def aclose(self) -> None:
        await self.http.aclose()

    async def call(
        self,
        method: str,
        path: str,
        *,
        actor: str | None = None,
        ok: Sequence[int] = (200, 201, 204),
        auth: tuple[str, str] | None = None,
        **kwargs: Any,
    ) -> httpx.Response:
        headers = {} if auth else {"Authorization": f"token {self.admin_token}"}
        if actor:
            headers["Sudo"] = actor
        reply = await self.http.request(method, path, headers=headers, auth=auth, **kwargs)
        if reply.status_code not in ok:
            raise ForgeError(error_message(reply), reply.status_code)
        return reply

    # -- users, repos, protection -----------------------------------------------------------

    async def ensure_user(self, name: str, email: str, kind: str = "agent") -> ForgeUser:
        password = secrets.token_urlsafe(24)
        body = {
            "username": name,
            "email": email,
            "password": password,
            "must_change_password": False,
            "visibility": "public",
            "kswarm_kind": kind,  # ignored by Gitea; the embedded forge makes the principal this kind
        }
        reply = await self.call("POST", "/admin/users", json=body, ok=(201, 422))
        if reply.status_code == 422:  # exists: reset the password so that we can log in as the user
            await self.call(
                "PATCH",
                f"/admin/users/{name}",
                json={
                    "password": password,
                    "login_name": name,
                    "source_id": 0,
                    "must_change_password": False,
                },
            )
        user = (await self.call("GET", f"/users/{name}")).json()
        token = await self.call(
            "POST",
            f"/users/{name}/tokens",
            auth=(name, password),
            json={"name": f"kswarm-{secrets.token_hex(4)}", "scopes": TOKEN_SCOPES},
        )
        return ForgeUser(name=name, email=user.get("email") or email, token=token.json()["sha1"])

    async def ensure_gate(self) -> None:
        """The gate's Gitea account (no token: the gateway acts for it with Sudo)."""
        body = {
            "username": self.gate_user,
            "email": self.gate_email,
            "password": secrets.token_urlsafe(24),
            "must_change_password": False,
            "visibility": "private",
            "kswarm_kind": "gate",
        }
        await self.call("POST", "/admin/users", json=body, ok=(201, 422))

    async def ensure_hook(self, org: str, name: str) -> None:
        """One webhook to the gateway's receiver, with this repository's own secret."""
        if not self.webhook_url or not self.webhook_secret:
            return
        hooks = (await self.call("GET", f"/repos/{org}/{name}/hooks")).json()
        if any((h.get("config") or {}).get("url") == self.webhook_url for h in hooks):
            return
        body = {
            "type": "gitea",
            "config": {
                "url": self.webhook_url,
                "content_type": "json",
                "secret": repo_secret(self.webhook_secret, f"{org}/{name}"),
            },
            "events": list(HOOK_EVENTS),
            "active": True,
        }
        await self.call("POST", f"/repos/{org}/{name}/hooks", json=body)

    async def ensure_repo(self, org: str, name: str, default_branch: str = "main") -> RepoInfo:
        """The org, the repository (with an initial commit), the gate as its collaborator (the gate
        merges and seeds; Gitea wants write access for both) and the webhook."""
        await self.call("POST", "/orgs", json={"username": org, "visibility": "public"}, ok=(201, 422))
        reply = await self.call("GET", f"/repos/{org}/{name}", ok=(200, 404))
        if reply.status_code == 404:
            body = {
                "name": name,
                "default_branch": default_branch,
                "auto_init": True,
                "readme": "Default",
                "private": False,
            }
            reply = await self.call("POST", f"/orgs/{org}/repos", json=body, ok=(201, 409))
            if reply.status_code == 409:
                reply = await self.call("GET", f"/repos/{org}/{name}")
        info = shapes.parse_repo(reply.json())
        await self.ensure_gate()
        await self.add_collaborator(org, name, self.gate_user, "write")
        await self.ensure_hook(org, name)
        return info

    async def list_repos(self, query: str = "") -> list[RepoInfo]:
        out: list[RepoInfo] = []
        for page in range(1, 1000):
            reply = await self.call("GET", "/repos/search", params={"q": query, "page": page, "limit": PAGE})
            batch = reply.json().get("data", [])
            out.extend(shapes.parse_repo(x) for x in batch)
            if len(batch) < PAGE:
                break
        return out

    async def add_collaborator(self, org: str, repo: str, user: str, permission: str = "write") -> None:
        await self.call("PUT", f"/repos/{org}/{repo}/collaborators/{user}", json={"permission": permission})

    async def protect_branch(self, org: str, repo: str, branch: str, policy: ReviewPolicy) -> None:
        body = shapes.protection_json(branch, policy, self.gate_user)
        path = f"/repos/{org}/{repo}/branch_protections"
        exists = await self.call("GET", f"{path}/{branch}", ok=(200, 404))
        if exists.status_code == 404:
            await self.call("POST", path, json=body)
        else:
            body.pop("rule_name")
            body.pop("branch_name")
            await self.call("PATCH", f"{path}/{branch}", json=body)
        if self.extensions is not None:
            await self.extensions.save(f"{org}/{repo}", branch, policy)

    async def get_protection(self, org: str, repo: str, branch: str) -> ReviewPolicy | None:
        reply = await self.call("GET", f"/repos/{org}/{repo}/branch_protections/{branch}", ok=(200, 404))
        if reply.status_code != 200:
            return None
        gitea = shapes.parse_protection(reply.json())
        if self.extensions is None:
            return gitea
        return await self.extensions.merged(f"{org}/{repo}", branch, gitea)

    # -- pull requests ----------------------------------------------------------------------

    async def open_pr(
        self,
        actor: str,
        org: str,
        repo: str,
        head: str,
        base: str,
        title: str,
        body: str = "",
        reviewers: Sequence[str] = (),
    ) -> PullRequest:
        check_text(title, body)
        payload = {"head": head, "base": base, "title": title, "body": body, "reviewers": list(reviewers)}
        reply = await self.call("POST", f"/repos/{org}/{repo}/pulls", actor=actor, json=payload)
        return shapes.parse_pr(reply.json(), org, repo)

    async def list_prs(self, org: str, repo: str, state: str = "open") -> list[PullRequest]:
        out: list[PullRequest] = []
        for page in range(1, 1000):
            params = {"state": state, "page": page, "limit": PAGE}
            batch = (await self.call("GET", f"/repos/{org}/{repo}/pulls", params=params)).json()
            out.extend(shapes.parse_pr(x, org, repo) for x in batch)
            if len(batch) < PAGE:
                break
        return out

    async def get_pr(self, org: str, repo: str, number: int) -> PullRequest:
        base = f"/repos/{org}/{repo}"
        pr = shapes.parse_pr((await self.call("GET", f"{base}/pulls/{number}")).json(), org, repo)
        reviews = (await self.call("GET", f"{base}/pulls/{number}/reviews")).json()
        pr.reviews = [shapes.parse_review(x) for x in reviews]
        if pr.head_sha:
            combined = (await self.call("GET", f"{base}/commits/{pr.head_sha}/status")).json()
            pr.statuses = [shapes.parse_status(x, pr.head_sha) for x in combined.get("statuses") or []]
        return pr

    async def pr_diff(
        self,
        org: str,
        repo: str,
        number: int,
        max_bytes: int = DIFF_MAX_BYTES,
        max_file_bytes: int = DIFF_MAX_FILE_BYTES,
    ) -> CutDiff:
        """Gitea's ``.diff``, read streamed and cut as it comes: the connection is dropped once the
        cap is reached (or after ``DiffCutter.max_read`` bytes), never read whole."""
        hint = f"see the rest with: git fetch origin pull/{number}/head (or the PR's branch) and git diff"
        cutter = DiffCutter(max_bytes, max_file_bytes, hint)
        headers = {"Authorization": f"token {self.admin_token}"}
        async with self.http.stream(
            "GET", f"/repos/{org}/{repo}/pulls/{number}.diff", headers=headers
        ) as reply:
            if reply.status_code != 200:
                await reply.aread()  # an error body is small (Gitea's JSON message)
                raise ForgeError(error_message(reply), reply.status_code)
            cut_upstream = reply.headers.get(DIFF_TRUNCATED_HEADER, "").lower() == "true"
            async for chunk in reply.aiter_bytes(CHUNK):
                if not cutter.feed(chunk):
                    break
        diff = cutter.finish()
        diff.truncated = diff.truncated or cut_upstream
        return diff

    async def pr_files(self, org: str, repo: str, number: int) -> list[ChangedFile]:
        out: list[ChangedFile] = []
        for page in range(1, 1000):
            reply = await self.call(
                "GET", f"/repos/{org}/{repo}/pulls/{number}/files", params={"page": page, "limit": 50}
            )
            batch = reply.json()
            for item in batch:
                out.extend(shapes.parse_changed_file(item))
            if len(batch) < 50:
                break
        return out

    async def compare_files(self, org: str, repo: str, base: str, head: str) -> list[ChangedFile]:
        """Gitea's compare (``GET /repos/{o}/{r}/compare/{base}...{head}``): the files of its commits."""
        reply = await self.call("GET", f"/repos/{org}/{repo}/compare/{base}...{head}")
        return shapes.parse_compare_files(reply.json())

    async def request_reviewers(
        self, actor: str, org: str, repo: str, number: int, reviewers: Sequence[str]
    ) -> PullRequest:
        path = f"/repos/{org}/{repo}/pulls/{number}/requested_reviewers"
        await self.call("POST", path, actor=actor, json={"reviewers": list(reviewers)})
        return await self.get_pr(org, repo, number)

    async def review(
        self, actor: str, org: str, repo: str, number: int, event: str, body: str = "", commit_id: str = ""
    ) -> Review:
        """Gitea's events as they are (an unknown one is PENDING there). A ``commit_id`` pins the review:
        Gitea records a review on any commit (stale when it is not the head), so the adapter checks the
        head first and answers 409 as the embedded forge does; a push racing the check leaves a stale
        review, which never counts."""
        check_text(body=body, what="review")
        path = f"/repos/{org}/{repo}/pulls/{number}/reviews"
        if commit_id:
            current = shapes.parse_pr(
                (await self.call("GET", f"/repos/{org}/{repo}/pulls/{number}")).json(), org, repo
            )
            if current.head_sha and current.head_sha != commit_id:
                raise ForgeError(
                    f"head moved to {current.head_sha[:10]} (you reviewed {commit_id[:10]}): look again", 409
                )
        payload = {"event": event, "body": body, **({"commit_id": commit_id} if commit_id else {})}
        return shapes.parse_review((await self.call("POST", path, actor=actor, json=payload)).json())

    async def comment(self, actor: str, org: str, repo: str, number: int, body: str) -> Comment:
        check_text(body=body, what="comment")
        path = f"/repos/{org}/{repo}/issues/{number}/comments"
        return shapes.parse_comment((await self.call("POST", path, actor=actor, json={"body": body})).json())

    async def comments(self, org: str, repo: str, number: int) -> list[Comment]:
        reply = await self.call("GET", f"/repos/{org}/{repo}/issues/{number}/comments")
        return [shapes.parse_comment(x) for x in reply.json()]

    async def set_status(
        self,
        actor: str,
        org: str,
        repo: str,
        sha: str,
        state: str,
        context: str,
        description: str = "",
        target_url: str = "",
    ) -> CommitStatus:
        if context.startswith("kswarm/") and actor != self.gate_user:
            # Gitea would accept it; kswarm's own contexts are computed by the gateway (as the gate).
            raise ForgeError(f"{context}: kswarm/ statuses are computed by the gateway from job results", 403)
        payload = {"state": state, "context": context, "description": description, "target_url": target_url}
        reply = await self.call("POST", f"/repos/{org}/{repo}/statuses/{sha}", actor=actor, json=payload)
        return shapes.parse_status(reply.json(), sha)

    async def merge(self, actor: str, org: str, repo: str, number: int, head_sha: str) -> MergeResult:
        payload = {"Do": "merge", "head_commit_id": head_sha, "delete_branch_after_merge": False}
        await self.call("POST", f"/repos/{org}/{repo}/pulls/{number}/merge", actor=actor, json=payload)
        pr = shapes.parse_pr(
            (await self.call("GET", f"/repos/{org}/{repo}/pulls/{number}")).json(), org, repo
        )
        return MergeResult(merged=pr.merged, merge_sha=pr.merge_sha, message=f"merged {org}/{repo}#{number}")


def error_message(reply: httpx.Response) -> str:
    try:
        data = reply.json()
    except ValueError:
        return reply.text.strip() or reply.reason_phrase
    if isinstance(data, dict):
        return str(data.get("message") or data.get("detail") or data)
    return str(data)
