"""The embedded forge (the default): bare repositories on disk, PR metadata in Redis.

It implements the Forge protocol in-process (repository content in ``content.py``);
``git_http.py`` serves the repositories over smart HTTP and ``gitea_api*.py`` serve this class through
Gitea-shaped REST routes. Nothing outside the embedded forge touches its bare repositories.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from pathlib import Path

from gateway.errors import ForgeError
from gateway.forge.embedded.content import RepositoryContent
from gateway.forge.embedded.store import ForgeStore
from gateway.forge.event_feed import emit_event
from gateway.forge.gate.policy import ReviewPolicy, evaluate
from gateway.forge.models import (
    DIFF_MAX_BYTES,
    DIFF_MAX_FILE_BYTES,
    STATUS_STATES,
    ChangedFile,
    Comment,
    CommitStatus,
    ForgeUser,
    MergeResult,
    PullRequest,
    RepoInfo,
    Review,
)
from gateway.forge.names import SHA_RE, check_branch, check_name, check_text
from gateway.git.aio import BareRepo
from gateway.git.diffcut import CutDiff
from gateway.principals import Principal, PrincipalError, PrincipalKind, PrincipalStore
from gateway.redis_facade import StrRedis

CHANGE_STATUS = {"A": "added", "M": "modified", "D": "deleted"}


def review_state(event: str) -> str:
    """Gitea's review type for ``event``: its three verdict words, anything else PENDING (Gitea's
    ``preparePullReviewType``: GitHub's ``APPROVE`` is not an approval there)."""
    return event if event in ("APPROVED", "REQUEST_CHANGES", "COMMENT") else "PENDING"


def review_refusal(event: str, state: str, body: str, own: bool) -> str | None:
    """Gitea's refusals of a review, in its words (422)."""
    if own and state == "APPROVED":
        return "approve your own pull is not allowed"
    if own and state == "REQUEST_CHANGES":
        return "reject your own pull is not allowed"
    if state == "COMMENT" and not body.strip():
        return f"review event {event} requires a body or a comment"
    if state in ("REQUEST_CHANGES", "PENDING") and not body.strip():
        return f"review event {event} requires a body"
    return None


class EmbeddedForge(RepositoryContent):
    kind = "embedded"

    def __init__(
        self, redis: StrRedis, root: Path, principals: PrincipalStore, swarm: str, base_url: str
    ) -> None:
        self.redis = redis
        self.root = root
        self.principals = principals
        self.swarm = swarm
        self.base_url = base_url.rstrip("/")
        self.store = ForgeStore(redis)
        self._init_lock = asyncio.Lock()

    # -- helpers ----------------------------------------------------------------------------

    def bare(self, org: str, repo: str) -> BareRepo:
        return BareRepo(self.root / org / f"{repo}.git")

    def clone_url(self, org: str, repo: str) -> str:
        return f"{self.base_url}/git/{org}/{repo}.git"

    async def principal(self, name: str) -> Principal:
        principal = await self.principals.get(name)
        if principal is None or principal.disabled:
            raise ForgeError(f"unknown user {name!r}", 404)
        return principal

    async def repo_info(self, org: str, repo: str) -> RepoInfo:
        info = await self.store.get_repo(f"{org}/{repo}")
        if info is None:
            raise ForgeError(f"no repository {org}/{repo}", 404)
        return info

    async def protected_branches(self, org: str, repo: str) -> list[str]:
        return sorted(await self.store.protections(f"{org}/{repo}"))

    async def aclose(self) -> None:
        return None

    async def startup(self) -> None:
        """Re-install hooks (the interpreter path may have changed since the repos were made) and the
        receive settings (repos made before them get them)."""
        for info in await self.store.list_repos():
            bare = self.bare(info.org, info.name)
            if bare.exists():
                bare.install_hooks()
                await bare.configure_receive()

    # -- users, repos, protection -----------------------------------------------------------

    async def ensure_user(self, name: str, email: str, kind: str = "agent") -> ForgeUser:
        try:
            principal = await self.principals.get(name)
            if principal is None:
                try:
                    principal, token = await self.principals.create(name, PrincipalKind(kind), email or None)
                except PrincipalError as exc:
                    if exc.status != 409:  # else: lost a race with another creator
                        raise
                    principal = await self.principal(name)
                    token = await self.principals.issue_token(name)
            else:
                token = await self.principals.issue_token(name)
        except ValueError as exc:  # a bad name, e-mail or kind (PrincipalError too): Gitea answers 422
            raise ForgeError(str(exc), 422) from exc
        return ForgeUser(name=principal.name, email=principal.email, token=token)

    async def create_user(self, name: str, email: str, kind: str = "agent") -> Principal:
        """Gitea's admin user creation: 422 when the login exists."""
        try:
            principal, _ = await self.principals.create(name, PrincipalKind(kind), email or None)
        except ValueError as exc:  # a taken login is a 409 PrincipalError here, a 422 in Gitea
            raise ForgeError(str(exc), 422) from exc
        return principal

    async def ensure_repo(self, org: str, name: str, default_branch: str = "main") -> RepoInfo:
        check_name(org, "org")
        check_name(name, "repository")
        check_branch(default_branch)
        async with self._init_lock:
            existing = await self.store.get_repo(f"{org}/{name}")
            if existing is not None:
                return existing
            bare = self.bare(org, name)
            if not bare.exists():
                await bare.init(default_branch)
            if await bare.branch_sha(default_branch) is None:
                await bare.write_initial_commit(default_branch, f"{org}/{name}", "gate", self.gate_email())
            info = RepoInfo(
                org=org,
                name=name,
                default_branch=default_branch,
                clone_url=self.clone_url(org, name),
                created=time.time(),
            )
            await self.store.add_repo(info)
            if await self.store.get_protection(info.full_name, default_branch) is None:
                await self.store.set_protection(info.full_name, default_branch, ReviewPolicy())
            return info

    def gate_email(self) -> str:
        return f"gate@bots.{self.swarm}"

    async def list_repos(self, query: str = "") -> list[RepoInfo]:
        repos = await self.store.list_repos()
        return [r for r in repos if query.lower() in r.full_name.lower()]

    async def add_collaborator(self, org: str, repo: str, user: str, permission: str = "write") -> None:
        await self.repo_info(org, repo)
        await self.principal(user)
        if permission not in ("read", "write", "admin"):
            raise ForgeError(f"bad permission {permission!r}", 422)
        await self.store.set_collaborator(f"{org}/{repo}", user, permission)

    async def protect_branch(self, org: str, repo: str, branch: str, policy: ReviewPolicy) -> None:
        await self.repo_info(org, repo)
        check_branch(branch)
        await self.store.set_protection(f"{org}/{repo}", branch, policy)
        await emit_event(self.redis, "protection", f"{org}/{repo}", branch=branch)

    async def get_protection(self, org: str, repo: str, branch: str) -> ReviewPolicy | None:
        return await self.store.get_protection(f"{org}/{repo}", branch)

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
        author = await self.principal(actor)
        info = await self.repo_info(org, repo)
        base = base or info.default_branch
        check_branch(head, "head branch")
        check_branch(base, "base branch")
        check_text(title, body)
        if not title.strip():
            raise ForgeError("a PR needs a title", 422)
        if author.kind == PrincipalKind.agent and not head.startswith(f"{author.name}/"):
            raise ForgeError(
                f"agents open PRs from their own branches ({author.name}/...), not {head!r}", 422
            )
        bare = self.bare(org, repo)
        head_sha = await bare.branch_sha(head)
        if head_sha is None:
            raise ForgeError(f"head branch {head!r} does not exist in {org}/{repo}: push it first", 404)
        if await bare.branch_sha(base) is None:
            raise ForgeError(f"base branch {base!r} does not exist in {org}/{repo}", 404)
        if head == base:
            raise ForgeError("head and base are the same branch", 422)
        for existing in await self.store.list_prs(info.full_name):
            if existing.state == "open" and existing.head == head and existing.base == base:
                raise ForgeError(f"PR #{existing.number} already exists for {head} -> {base}", 409)
        requested = await self._check_reviewers(author.name, reviewers)
        pr = PullRequest(
            org=org,
            repo=repo,
            number=await self.store.next_pr_number(info.full_name),
            title=title.strip(),
            body=body,
            author=author.name,
            head=head,
            base=base,
            requested_reviewers=requested,
            created=time.time(),
        )
        await self.store.save_pr(pr)
        await emit_event(self.redis, "pr_opened", info.full_name, pr=pr.number, actor=actor)
        return await self.get_pr(org, repo, pr.number)

    async def _check_reviewers(self, author: str, reviewers: Sequence[str]) -> list[str]:
        out: list[str] = []
        for name in reviewers:
            if name == author:
                raise ForgeError("the author cannot review their own PR", 422)
            await self.principal(name)
            if name not in out:
                out.append(name)
        return out

    async def _stored(self, org: str, repo: str, number: int) -> PullRequest:
        pr = await self.store.get_pr(f"{org}/{repo}", number)
        if pr is None:
            raise ForgeError(f"no PR #{number} in {org}/{repo}", 404)
        return pr

    async def _fill_shas(self, pr: PullRequest) -> PullRequest:
        if pr.merged:
            pr.head_sha = pr.merged_head_sha
            pr.base_sha = pr.merge_base
            return pr
        bare = self.bare(pr.org, pr.repo)
        pr.head_sha = await bare.branch_sha(pr.head)
        pr.base_sha = await bare.branch_sha(pr.base)
        return pr

    async def list_prs(self, org: str, repo: str, state: str = "open") -> list[PullRequest]:
        """PRs with their shas and ``mergeable`` as the single view computes it (Gitea lists both)."""
        await self.repo_info(org, repo)
        prs = await self.store.list_prs(f"{org}/{repo}")
        wanted = [await self._fill_shas(p) for p in prs if state == "all" or p.state == state]
        for pr in wanted:
            await self._fill_mergeable(pr)
        return wanted

    async def _fill_mergeable(self, pr: PullRequest) -> None:
        if pr.state == "open" and pr.head_sha and pr.base_sha:
            pr.mergeable, _ = await self.bare(pr.org, pr.repo).merge_tree(pr.base_sha, pr.head_sha)

    async def get_pr(self, org: str, repo: str, number: int) -> PullRequest:
        pr = await self._fill_shas(await self._stored(org, repo, number))
        full = pr.full_name
        reviews = await self.store.reviews(full, number)
        for review in reviews:
            review.stale = review.commit_id != pr.head_sha
        pr.reviews = reviews
        if pr.head_sha:
            pr.statuses = await self.store.statuses(full, pr.head_sha)
        await self._fill_mergeable(pr)
        return pr

    async def pr_diff(
        self,
        org: str,
        repo: str,
        number: int,
        max_bytes: int = DIFF_MAX_BYTES,
        max_file_bytes: int = DIFF_MAX_FILE_BYTES,
    ) -> CutDiff:
        pr = await self._fill_shas(await self._stored(org, repo, number))
        if not pr.head_sha or not pr.base_sha:
            return CutDiff()
        span = f"{pr.base_sha[:12]}...{pr.head_sha[:12]}"
        hint = f"see the rest with: git fetch origin {pr.head} && git diff {span}"
        return await self.bare(org, repo).diff(pr.base_sha, pr.head_sha, max_bytes, max_file_bytes, hint)

    async def pr_patch(
        self, org: str, repo: str, number: int, max_bytes: int, max_file_bytes: int
    ) -> CutDiff:
        """The PR's commits as ``git format-patch`` mail (Gitea's ``.patch``; not in the protocol)."""
        pr = await self._fill_shas(await self._stored(org, repo, number))
        if not pr.head_sha or not pr.base_sha:
            return CutDiff()
        span = f"{pr.base_sha[:12]}..{pr.head_sha[:12]}"
        hint = f"see the rest with: git fetch origin {pr.head} && git format-patch {span}"
        return await self.bare(org, repo).patch(pr.base_sha, pr.head_sha, max_bytes, max_file_bytes, hint)

    async def pr_files(self, org: str, repo: str, number: int) -> list[ChangedFile]:
        pr = await self._fill_shas(await self._stored(org, repo, number))
        if not pr.head_sha or not pr.base_sha:
            return []
        return await self.compare_files(org, repo, pr.base_sha, pr.head_sha)

    async def compare_files(self, org: str, repo: str, base: str, head: str) -> list[ChangedFile]:
        await self.repo_info(org, repo)
        bare = self.bare(org, repo)
        for sha in (base, head):
            if not SHA_RE.fullmatch(sha) or await bare.rev_parse(sha) != sha:
                raise ForgeError(f"no commit {sha} in {org}/{repo}", 404)
        changes = await bare.changed_files(base, head)
        return [ChangedFile(path=path, status=CHANGE_STATUS[code]) for code, path in changes]

    async def request_reviewers(
        self, actor: str, org: str, repo: str, number: int, reviewers: Sequence[str]
    ) -> PullRequest:
        await self.principal(actor)
        pr = await self._stored(org, repo, number)
        for name in await self._check_reviewers(pr.author, reviewers):
            if name not in pr.requested_reviewers:
                pr.requested_reviewers.append(name)
        await self.store.save_pr(pr)
        return await self.get_pr(org, repo, number)

    async def review(
        self,
        actor: str,
        org: str,
        repo: str,
        number: int,
        event: str,
        body: str = "",
        commit_id: str = "",
        *,
        pin: bool = True,
    ) -> Review:
        """A review, with Gitea's rules (``review_refusal``; an unknown event is PENDING, which never
        counts). ``pin`` (kswarm's tools): a ``commit_id`` that is not the head is a 409, so a reviewer
        never approves what they did not read; unpinned (Gitea's API), the review is recorded on that
        commit and is stale."""
        check_text(body=body, what="review")
        reviewer = await self.principal(actor)
        state = review_state(event)
        pr = await self._fill_shas(await self._stored(org, repo, number))
        if pr.state != "open":
            raise ForgeError(f"PR #{number} is closed", 422)
        refused = review_refusal(event, state, body, reviewer.name == pr.author)
        if refused:
            raise ForgeError(refused, 422)
        if pr.head_sha is None:
            raise ForgeError(f"head branch {pr.head!r} is gone", 422)
        if pin and commit_id and commit_id != pr.head_sha:
            raise ForgeError(
                f"head moved to {pr.head_sha[:10]} (you reviewed {commit_id[:10]}): look again", 409
            )
        review = Review(
            id=0,
            user=reviewer.name,
            state=state,
            body=body,
            commit_id=commit_id or pr.head_sha,
            submitted=time.time(),
        )
        review = await self.store.add_review(pr.full_name, number, review)
        review.stale = review.commit_id != pr.head_sha
        await emit_event(self.redis, "review", pr.full_name, pr=number, actor=actor, state=state)
        return review

    async def comment(self, actor: str, org: str, repo: str, number: int, body: str) -> Comment:
        check_text(body=body, what="comment")
        await self.principal(actor)
        pr = await self._stored(org, repo, number)
        if not body.strip():
            raise ForgeError("empty comment", 422)
        return await self.store.add_comment(pr.full_name, number, actor, body)

    async def comments(self, org: str, repo: str, number: int) -> list[Comment]:
        pr = await self._stored(org, repo, number)
        return await self.store.comments(pr.full_name, number)

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
        setter = await self.principal(actor)
        if setter.kind not in (PrincipalKind.worker, PrincipalKind.gate):
            raise ForgeError(f"only job workers set commit statuses; {actor} is {setter.kind.value}", 403)
        if context.startswith("kswarm/") and setter.kind != PrincipalKind.gate:
            raise ForgeError(
                f"{context}: kswarm/ statuses are computed by the gateway from job results "
                "(a worker reports a result with POST /api/jobs/{id}/finish)",
                403,
            )
        if state not in STATUS_STATES:
            raise ForgeError(f"bad state {state!r}: one of {', '.join(STATUS_STATES)}", 422)
        if not context.strip():
            raise ForgeError("a status needs a context", 422)
        await self.repo_info(org, repo)
        full_sha = await self.bare(org, repo).rev_parse(sha) if SHA_RE.fullmatch(sha) else None
        if full_sha != sha:
            raise ForgeError(f"no commit {sha} in {org}/{repo}", 404)
        status = CommitStatus(
            sha=sha,
            context=context,
            state=state,
            description=description,
            target_url=target_url,
            creator=setter.name,
        )
        return await self.store.add_status(f"{org}/{repo}", status)

    async def statuses(self, org: str, repo: str, sha: str) -> list[CommitStatus]:
        await self.repo_info(org, repo)
        return await self.store.statuses(f"{org}/{repo}", sha)

    # -- merging ----------------------------------------------------------------------------

    async def merge(self, actor: str, org: str, repo: str, number: int, head_sha: str) -> MergeResult:
        merger = await self.principal(actor)
        if merger.kind != PrincipalKind.gate:
            raise ForgeError(f"only the review gate merges; {actor} is {merger.kind.value}", 405)
        pr = await self.get_pr(org, repo, number)
        if pr.merged:
            raise ForgeError(f"PR #{number} is already merged", 405)
        if pr.state != "open":
            raise ForgeError(f"PR #{number} is closed", 404)
        if pr.head_sha != head_sha:
            raise ForgeError(f"head out of date: head is {pr.head_sha}, not {head_sha}", 409)
        policy = await self.get_protection(org, repo, pr.base) or ReviewPolicy()
        # The forge enforces Gitea's part of the rule (reviews, checks); the gate adds reproduction.
        decision = evaluate(
            pr, policy.model_copy(update={"require_reproduction": False, "human_approvals": 0})
        )
        if not decision.mergeable:
            raise ForgeError(f"not mergeable: {decision.summary()}", 405)
        bare = self.bare(org, repo)
        if pr.base_sha is None:
            raise ForgeError(f"base branch {pr.base!r} does not exist", 409)
        clean, tree = await bare.merge_tree(pr.base_sha, head_sha)
        if not clean or tree is None:
            raise ForgeError(f"merge conflict between {pr.head} and {pr.base}", 409)
        message = (
            f"Merge PR #{number}: {pr.title}\n\nFrom {pr.head} by {pr.author}; merged by the review gate.\n"
        )
        merge_sha = await bare.commit_tree(tree, [pr.base_sha, head_sha], message, merger.name, merger.email)
        ref = f"refs/heads/{pr.base}"
        if not await bare.update_ref(ref, merge_sha, pr.base_sha, f"merge PR #{number} by {actor}"):
            raise ForgeError(f"merge push out of date: {pr.base} moved", 409)
        pr.state = "closed"
        pr.merged = True
        pr.merged_at = pr.closed_at = time.time()
        pr.merge_sha = merge_sha
        pr.merged_by = actor
        pr.merged_head_sha = head_sha
        pr.merge_base = pr.base_sha
        await self.store.save_pr(pr)
        await emit_event(self.redis, "merged", pr.full_name, pr=number, sha=merge_sha, actor=actor)
        await emit_event(self.redis, "push", pr.full_name, ref=ref, sha=merge_sha, actor=actor)
        return MergeResult(merged=True, merge_sha=merge_sha, message=f"merged {pr.ref} as {merge_sha[:10]}")

    # -- pushes -----------------------------------------------------------------------------

    async def on_push(self, org: str, repo: str, pusher: str, updates: list[tuple[str, str, str]]) -> None:
        """After an accepted push: dismiss approvals of moved PR heads and tell the gate."""
        full = f"{org}/{repo}"
        prs = [p for p in await self.store.list_prs(full) if p.state == "open"]
        for old, new, ref in updates:
            branch = ref.removeprefix("refs/heads/")
            for pr in prs:
                if pr.head != branch:
                    continue
                for review in await self.store.reviews(full, pr.number):
                    if review.state == "APPROVED" and not review.dismissed and review.commit_id != new:
                        review.dismissed = True
                        await self.store.update_review(full, pr.number, review)
            await emit_event(self.redis, "push", full, ref=ref, sha=new, old=old, actor=pusher)
