"""The embedded forge's metadata in Redis: repos, PRs, reviews, comments, statuses, protections."""

from __future__ import annotations

import hashlib
import secrets
import time

from gateway.forge import keys
from gateway.forge.event_feed import EVENTS_MAXLEN, event_fields
from gateway.forge.gate.policy import ReviewPolicy
from gateway.forge.models import STORED_PR_FIELDS, Comment, CommitStatus, PullRequest, RepoInfo, Review
from gateway.redis_facade import StrRedis


def _hash_password(password: str, salt: str) -> str:
    return hashlib.pbkdf2_hmac("sha256", password.encode(), salt.encode(), 100_000).hex()


class ForgeStore:
    """Typed access to the forge keys; no policy decisions here."""

    def __init__(self, redis: StrRedis) -> None:
        self.redis = redis

    # -- repos and orgs ---------------------------------------------------------------------

    async def add_repo(self, info: RepoInfo) -> bool:
        await self.redis.sadd(keys.ORGS, info.org)
        return bool(await self.redis.hsetnx(keys.REPOS, info.full_name, info.model_dump_json()))

    async def get_repo(self, full_name: str) -> RepoInfo | None:
        raw = await self.redis.hget(keys.REPOS, full_name)
        return RepoInfo.model_validate_json(raw) if raw else None

    async def list_repos(self) -> list[RepoInfo]:
        raw = await self.redis.hgetall(keys.REPOS)
        return sorted((RepoInfo.model_validate_json(v) for v in raw.values()), key=lambda r: r.full_name)

    async def add_org(self, org: str) -> bool:
        return bool(await self.redis.sadd(keys.ORGS, org))

    async def org_exists(self, org: str) -> bool:
        return bool(await self.redis.sismember(keys.ORGS, org))

    async def set_collaborator(self, repo: str, user: str, permission: str) -> None:
        await self.redis.hset(keys.collaborators(repo), user, permission)

    async def collaborators(self, repo: str) -> dict[str, str]:
        return await self.redis.hgetall(keys.collaborators(repo))

    # -- passwords (Gitea-style token creation with Basic auth) -----------------------------

    async def set_password(self, user: str, password: str) -> None:
        salt = secrets.token_hex(8)
        await self.redis.set(keys.password(user), f"{salt}${_hash_password(password, salt)}")

    async def check_password(self, user: str, password: str) -> bool:
        stored = await self.redis.get(keys.password(user))
        if not stored or "$" not in stored:
            return False
        salt, digest = stored.split("$", 1)
        return secrets.compare_digest(digest, _hash_password(password, salt))

    # -- pull requests ----------------------------------------------------------------------

    async def next_pr_number(self, repo: str) -> int:
        return int(await self.redis.incr(keys.pr_seq(repo)))

    async def save_pr(self, pr: PullRequest) -> None:
        pr.updated = time.time()
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.set(keys.pr(pr.full_name, pr.number), pr.model_dump_json(exclude=STORED_PR_FIELDS))
            pipe.zadd(keys.pr_index(pr.full_name), {str(pr.number): pr.number})
            await pipe.execute()

    async def get_pr(self, repo: str, number: int) -> PullRequest | None:
        raw = await self.redis.get(keys.pr(repo, number))
        return PullRequest.model_validate_json(raw) if raw else None

    async def list_prs(self, repo: str) -> list[PullRequest]:
        numbers = await self.redis.zrange(keys.pr_index(repo), 0, -1)
        if not numbers:
            return []
        raws = await self.redis.mget([keys.pr(repo, int(n)) for n in numbers])
        return [PullRequest.model_validate_json(r) for r in raws if r]

    # -- reviews and comments ---------------------------------------------------------------

    async def add_review(self, repo: str, number: int, review: Review) -> Review:
        review.id = int(await self.redis.incr(keys.REVIEW_SEQ))
        await self.redis.hset(keys.reviews(repo, number), str(review.id), review.model_dump_json())
        return review

    async def reviews(self, repo: str, number: int) -> list[Review]:
        raw = await self.redis.hgetall(keys.reviews(repo, number))
        return sorted((Review.model_validate_json(v) for v in raw.values()), key=lambda r: r.id)

    async def update_review(self, repo: str, number: int, review: Review) -> None:
        await self.redis.hset(keys.reviews(repo, number), str(review.id), review.model_dump_json())

    async def add_comment(self, repo: str, number: int, user: str, body: str) -> Comment:
        comment = Comment(
            id=int(await self.redis.incr(keys.COMMENT_SEQ)), user=user, body=body, created=time.time()
        )
        await self.redis.rpush(keys.comments(repo, number), comment.model_dump_json())
        return comment

    async def comments(self, repo: str, number: int) -> list[Comment]:
        return [
            Comment.model_validate_json(r)
            for r in await self.redis.lrange(keys.comments(repo, number), 0, -1)
        ]

    # -- statuses ---------------------------------------------------------------------------

    async def add_status(self, repo: str, status: CommitStatus) -> CommitStatus:
        """Store a status and announce it in one transaction, so that the latest stored status and
        the last status event always agree, however many workers set statuses at once."""
        status.id = int(await self.redis.incr(keys.STATUS_SEQ))
        status.created = time.time()
        event = event_fields(
            "status", repo, sha=status.sha, context=status.context, state=status.state, actor=status.creator
        )
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(keys.statuses(repo, status.sha), status.context, status.model_dump_json())
            pipe.xadd(keys.EVENTS, event, maxlen=EVENTS_MAXLEN, approximate=True)
            await pipe.execute()
        return status

    async def statuses(self, repo: str, sha: str) -> list[CommitStatus]:
        raw = await self.redis.hgetall(keys.statuses(repo, sha))
        return sorted((CommitStatus.model_validate_json(v) for v in raw.values()), key=lambda s: s.id)

    # -- protections ------------------------------------------------------------------------

    async def set_protection(self, repo: str, branch: str, policy: ReviewPolicy) -> None:
        await self.redis.hset(keys.protections(repo), branch, policy.model_dump_json())

    async def get_protection(self, repo: str, branch: str) -> ReviewPolicy | None:
        raw = await self.redis.hget(keys.protections(repo), branch)
        return ReviewPolicy.model_validate_json(raw) if raw else None

    async def protections(self, repo: str) -> dict[str, ReviewPolicy]:
        raw = await self.redis.hgetall(keys.protections(repo))
        return {b: ReviewPolicy.model_validate_json(v) for b, v in raw.items()}

    async def delete_protection(self, repo: str, branch: str) -> bool:
        return bool(await self.redis.hdel(keys.protections(repo), branch))

    async def next_token_id(self) -> int:
        return int(await self.redis.incr(keys.TOKEN_SEQ))
