"""The embedded forge's Gitea-v1-shaped REST routes under ``/api/v1`` (see docs/forge.md for the list).

Paths, field names, status codes and error words follow Gitea's (its swagger and its handlers) for the
endpoints kswarm uses, so the Gitea adapter (and any Gitea client) talks to the embedded forge
unchanged; every path and query parameter is checked once the caller is known (``gitea_params.py``:
a 400 naming it);
repository content (branches, commits, contents, trees, blobs, change-files) and webhooks are in
``content.py``. Auth: ``Authorization: token|Bearer``, ``Sudo: <user>`` for
operators (Gitea's admins), Basic user:password for token creation only. Where kswarm is stricter
than Gitea (docs/forge.md lists it) the stricter rule wins.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Response
from fastapi.responses import PlainTextResponse
from pydantic import BaseModel, ConfigDict, Field

from gateway.deps import Ctx
from gateway.errors import ForgeError
from gateway.forge.embedded.forge import EmbeddedForge
from gateway.forge.gate.policy import ReviewPolicy
from gateway.forge.gitea import shapes
from gateway.forge.gitea_api.auth import BASIC_CHALLENGE, Actor, Admin, Basic, Embedded
from gateway.forge.models import DIFF_TRUNCATED_HEADER
from gateway.forge.notices import notify_review_request
from gateway.forge.service import check_may_request_reviewers
from gateway.git.diffcut import CutDiff
from gateway.principals import PrincipalKind
from gateway.services import FORGE_SETTINGS


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore")


class CreateUser(_Body):
    username: str
    email: str = ""
    password: str = ""
    must_change_password: bool = False
    visibility: str = "public"
    kswarm_kind: str = Field("agent", description="kswarm extension: the principal kind.")


class EditUser(_Body):
    password: str | None = None
    email: str | None = None


class CreateToken(_Body):
    name: str
    scopes: list[str] = Field(default_factory=list)


class CreateOrg(_Body):
    username: str


class CreateRepo(_Body):
    name: str
    default_branch: str = "main"
    auto_init: bool = True


class Collaborator(_Body):
    permission: str = "write"


class CreatePull(_Body):
    head: str
    base: str = ""
    title: str
    body: str = ""
    reviewers: list[str] = Field(default_factory=list)


class Reviewers(_Body):
    reviewers: list[str] = Field(default_factory=list)


class CreateReview(_Body):
    event: str
    body: str = ""
    commit_id: str = ""


class CreateComment(_Body):
    body: str


class CreateStatus(_Body):
    state: str
    context: str = "default"
    description: str = ""
    target_url: str = ""


class Protection(_Body):
    """The fields of Gitea's ``CreateBranchProtectionOption`` that kswarm's gate reads; the push and
    merge whitelists are always the gate's (kswarm's rule), whatever a client sends."""

    rule_name: str | None = None
    branch_name: str | None = None
    required_approvals: int = Field(0, ge=0)  # as ReviewPolicy's: a negative one is bad input
    enable_status_check: bool = False
    status_check_contexts: list[str] = Field(default_factory=list)


class Merge(_Body):
    Do: str = "merge"
    head_commit_id: str = ""


def cut_response(cut: CutDiff) -> PlainTextResponse:
    return PlainTextResponse(cut.text, headers={DIFF_TRUNCATED_HEADER: "true" if cut.truncated else "false"})


router = APIRouter(prefix="/api/v1", tags=["gitea"])
R = "/repos/{owner}/{repo}"


@router.get("/version")
async def version(_: Actor) -> dict[str, str]:
    """Gitea's ``ServerVersion``: the Gitea API level these routes follow, as a version string
    (with a token: every kswarm route but /healthz needs one, as a Gitea with
    ``REQUIRE_SIGNIN_VIEW`` does)."""
    return {"version": shapes.GITEA_VERSION}


@router.get("/user")
async def me(actor: Actor) -> dict[str, Any]:
    return shapes.user_json(actor.name, actor.email, actor.kind == PrincipalKind.operator)


@router.get("/users/{username}")
async def get_user(forge: Embedded, username: str, _: Actor) -> dict[str, Any]:
    p = await forge.principal(username)
    return shapes.user_json(p.name, p.email, p.kind == PrincipalKind.operator)


@router.post("/admin/users", status_code=201)
async def create_user(forge: Embedded, body: CreateUser, _: Admin) -> dict[str, Any]:
    p = await forge.create_user(body.username, body.email, body.kswarm_kind)
    if body.password:
        await forge.store.set_password(p.name, body.password)
    return shapes.user_json(p.name, p.email)


@router.patch("/admin/users/{username}")
async def edit_user(forge: Embedded, username: str, body: EditUser, _: Admin) -> dict[str, Any]:
    p = await forge.principal(username)
    if body.password:
        await forge.store.set_password(p.name, body.password)
    return shapes.user_json(p.name, p.email)


@router.post("/users/{username}/tokens", status_code=201)
async def create_token(
    forge: Embedded, username: str, body: CreateToken, credentials: Basic
) -> dict[str, Any]:
    user, password = credentials
    if user != username or not await forge.store.check_password(username, password):
        raise ForgeError("wrong user name or password", 401, headers=BASIC_CHALLENGE)
    token = await forge.principals.issue_token(username)
    return {
        "id": await forge.store.next_token_id(),
        "name": body.name,
        "sha1": token,
        "token_last_eight": token[-8:],
        "scopes": body.scopes,
    }


@router.post("/orgs", status_code=201)
async def create_org(forge: Embedded, body: CreateOrg, _: Admin) -> dict[str, Any]:
    if not await forge.store.add_org(body.username):
        raise ForgeError(f"user already exists [name: {body.username}]", 422)
    return shapes.org_json(body.username)


@router.get("/orgs/{org}")
async def get_org(forge: Embedded, org: str, _: Actor) -> dict[str, Any]:
    if not await forge.store.org_exists(org):
        raise ForgeError(f"no organization {org!r}", 404)
    return shapes.org_json(org)


@router.post("/orgs/{org}/repos", status_code=201)
async def create_repo(forge: Embedded, org: str, body: CreateRepo, _: Admin) -> dict[str, Any]:
    if not await forge.store.org_exists(org):
        raise ForgeError(f"no organization {org!r}", 404)
    if await forge.store.get_repo(f"{org}/{body.name}") is not None:
        raise ForgeError(f"repository {org}/{body.name} already exists", 409)
    return shapes.repo_json(await forge.ensure_repo(org, body.name, body.default_branch), forge.base_url)


@router.get("/repos/search")
async def search(
    forge: Embedded,
    response: Response,
    _: Actor,
    q: str = "",
    page: Annotated[int, Query(ge=1)] = 1,
    limit: Annotated[int, Query(ge=1, le=50)] = 30,
) -> dict[str, Any]:
    repos = await forge.list_repos(q)
    response.headers["X-Total-Count"] = str(len(repos))
    chosen = repos[(page - 1) * limit : page * limit]
    return {"ok": True, "data": [shapes.repo_json(x, forge.base_url) for x in chosen]}


@router.get(R)
async def get_repo(forge: Embedded, owner: str, repo: str, _: Actor) -> dict[str, Any]:
    return shapes.repo_json(await forge.repo_info(owner, repo), forge.base_url)


@router.put(R + "/collaborators/{user}", status_code=204)
async def collaborator(
    forge: Embedded, owner: str, repo: str, user: str, body: Collaborator, _: Admin
) -> Response:
    await forge.add_collaborator(owner, repo, user, body.permission)
    return Response(status_code=204)


@router.get(R + "/pulls")
async def list_pulls(
    forge: Embedded,
    owner: str,
    repo: str,
    response: Response,
    _: Actor,
    state: Annotated[str, Query(pattern="^(open|closed|all)$")] = "open",
    page: Annotated[int, Query(ge=1)] = 1,
    limit: Annotated[int, Query(ge=1, le=50)] = 30,
) -> list[dict[str, Any]]:
    prs = sorted(await forge.list_prs(owner, repo, state), key=lambda p: -p.number)  # newest first
    response.headers["X-Total-Count"] = str(len(prs))
    return [shapes.pr_json(p, forge.base_url) for p in prs[(page - 1) * limit : page * limit]]


@router.post(R + "/pulls", status_code=201)
async def open_pull(
    forge: Embedded, owner: str, repo: str, body: CreatePull, actor: Actor, ctx: Ctx
) -> dict[str, Any]:
    pr = await forge.open_pr(
        actor.name, owner, repo, body.head, body.base, body.title, body.body, body.reviewers
    )
    await notify_review_request(ctx, actor, pr, pr.requested_reviewers)
    return shapes.pr_json(pr, forge.base_url)


@router.get(R + "/pulls/{index}.diff", response_class=PlainTextResponse)
async def pull_diff(
    forge: Embedded, owner: str, repo: str, index: int, _: Actor, ctx: Ctx
) -> PlainTextResponse:
    """The PR's diff, cut while it is read (``X-Kswarm-Diff-Truncated: true`` when it was)."""
    settings = ctx.services.get(FORGE_SETTINGS)
    return cut_response(
        await forge.pr_diff(owner, repo, index, settings.diff_max_bytes, settings.diff_max_file_bytes)
    )


@router.get(R + "/pulls/{index}.patch", response_class=PlainTextResponse)
async def pull_patch(
    forge: Embedded, owner: str, repo: str, index: int, _: Actor, ctx: Ctx
) -> PlainTextResponse:
    """The PR's commits as ``git format-patch`` mail, cut as the diff is."""
    settings = ctx.services.get(FORGE_SETTINGS)
    return cut_response(
        await forge.pr_patch(owner, repo, index, settings.diff_max_bytes, settings.diff_max_file_bytes)
    )


@router.get(R + "/pulls/{index}/files")
async def pull_files(
    forge: Embedded,
    owner: str,
    repo: str,
    index: int,
    _: Actor,
    page: Annotated[int, Query(ge=1)] = 1,
    limit: Annotated[int, Query(ge=1, le=50)] = 30,
) -> list[dict[str, Any]]:
    files = await forge.pr_files(owner, repo, index)
    return [shapes.changed_file_json(f) for f in files[(page - 1) * limit : page * limit]]


@router.get(R + "/compare/{basehead}")
async def compare(forge: Embedded, owner: str, repo: str, basehead: str, _: Actor) -> dict[str, Any]:
    base, sep, head = basehead.partition("...")
    if not sep or not base or not head:
        raise ForgeError("compare needs base...head", 422)
    base_sha, head_sha = await resolve(forge, owner, repo, base), await resolve(forge, owner, repo, head)
    files = await forge.compare_files(owner, repo, base_sha, head_sha)
    return shapes.compare_json(base_sha, head_sha, files)


@router.get(R + "/pulls/{index}")
async def get_pull(forge: Embedded, owner: str, repo: str, index: int, _: Actor) -> dict[str, Any]:
    return shapes.pr_json(await forge.get_pr(owner, repo, index), forge.base_url)


@router.post(R + "/pulls/{index}/requested_reviewers", status_code=201)
async def request_reviewers(
    forge: Embedded, owner: str, repo: str, index: int, body: Reviewers, actor: Actor, ctx: Ctx
) -> list[dict[str, Any]]:
    await check_may_request_reviewers(ctx, actor, await forge.get_pr(owner, repo, index))
    pr = await forge.request_reviewers(actor.name, owner, repo, index, body.reviewers)
    await notify_review_request(ctx, actor, pr, body.reviewers)
    return [shapes.review_request_json(n) for n in body.reviewers]


@router.get(R + "/pulls/{index}/reviews")
async def list_reviews(
    forge: Embedded, owner: str, repo: str, index: int, actor: Actor
) -> list[dict[str, Any]]:
    """As Gitea: a PENDING review is shown only to its reviewer and to admins."""
    pr = await forge.get_pr(owner, repo, index)
    admin = actor.kind == PrincipalKind.operator
    return [
        shapes.review_json(x) for x in pr.reviews if x.state != "PENDING" or admin or x.user == actor.name
    ]


@router.post(R + "/pulls/{index}/reviews")
async def create_review(
    forge: Embedded, owner: str, repo: str, index: int, body: CreateReview, actor: Actor
) -> dict[str, Any]:
    """Gitea's event words only: GitHub's ``APPROVE`` is no approval here (Gitea records it as a
    PENDING review when it has a body, and refuses it without one)."""
    review = await forge.review(
        actor.name, owner, repo, index, body.event, body.body, body.commit_id, pin=False
    )
    return shapes.review_json(review)


@router.get(R + "/pulls/{index}/merge")
async def is_merged(forge: Embedded, owner: str, repo: str, index: int, _: Actor) -> Response:
    pr = await forge.get_pr(owner, repo, index)
    if not pr.merged:
        raise ForgeError("not merged", 404)
    return Response(status_code=204)


@router.post(R + "/pulls/{index}/merge")
async def merge(forge: Embedded, owner: str, repo: str, index: int, body: Merge, actor: Actor) -> Response:
    if body.Do != "merge":
        raise ForgeError(f"merge style {body.Do!r} is not allowed; use merge", 405)
    head = body.head_commit_id or (await forge.get_pr(owner, repo, index)).head_sha or ""
    await forge.merge(actor.name, owner, repo, index, head)
    return Response(status_code=200)


@router.get(R + "/issues/{index}/comments")
async def list_comments(forge: Embedded, owner: str, repo: str, index: int, _: Actor) -> list[dict[str, Any]]:
    return [shapes.comment_json(c) for c in await forge.comments(owner, repo, index)]


@router.post(R + "/issues/{index}/comments", status_code=201)
async def create_comment(
    forge: Embedded, owner: str, repo: str, index: int, body: CreateComment, actor: Actor
) -> dict[str, Any]:
    return shapes.comment_json(await forge.comment(actor.name, owner, repo, index, body.body))


@router.post(R + "/statuses/{sha}", status_code=201)
async def create_status(
    forge: Embedded, owner: str, repo: str, sha: str, body: CreateStatus, actor: Actor
) -> dict[str, Any]:
    status = await forge.set_status(
        actor.name, owner, repo, sha, body.state, body.context, body.description, body.target_url
    )
    return shapes.status_json(status)


async def resolve(forge: EmbeddedForge, owner: str, repo: str, ref: str) -> str:
    sha = await forge.resolve_ref(owner, repo, ref)
    if sha is None:
        raise ForgeError(f"no commit {ref!r}", 404)
    return sha


@router.get(R + "/statuses/{ref}")
@router.get(R + "/commits/{ref}/statuses")
async def list_statuses(forge: Embedded, owner: str, repo: str, ref: str, _: Actor) -> list[dict[str, Any]]:
    sha = await resolve(forge, owner, repo, ref)
    return [shapes.status_json(s) for s in await forge.statuses(owner, repo, sha)]


@router.get(R + "/commits/{ref}/status")
async def combined(forge: Embedded, owner: str, repo: str, ref: str, _: Actor) -> dict[str, Any]:
    sha = await resolve(forge, owner, repo, ref)
    return shapes.combined_json(sha, await forge.statuses(owner, repo, sha))


@router.get(R + "/branch_protections")
async def list_protections(forge: Embedded, owner: str, repo: str, _: Actor) -> list[dict[str, Any]]:
    await forge.repo_info(owner, repo)
    rules = await forge.store.protections(f"{owner}/{repo}")
    return [shapes.protection_json(b, p) for b, p in sorted(rules.items())]


@router.get(R + "/branch_protections/{name}")
async def get_protection(forge: Embedded, owner: str, repo: str, name: str, _: Actor) -> dict[str, Any]:
    policy = await forge.get_protection(owner, repo, name)
    if policy is None:
        raise ForgeError(f"no branch protection {name!r}", 404)
    return shapes.protection_json(name, policy)


async def save_protection(
    forge: Embedded, owner: str, repo: str, branch: str, fields: dict[str, Any]
) -> dict[str, Any]:
    """Gitea's fields over the branch's current policy: kswarm's own rules (set through
    /api/forge) are not Gitea fields and stay as they were."""
    current = await forge.get_protection(owner, repo, branch) or ReviewPolicy(protected_branches=[branch])
    gitea = shapes.parse_protection({**fields, "rule_name": branch})
    policy = current.model_copy(
        update={"required_approvals": gitea.required_approvals, "required_checks": gitea.required_checks}
    )
    await forge.protect_branch(owner, repo, branch, policy)
    return shapes.protection_json(branch, policy)


@router.post(R + "/branch_protections", status_code=201)
async def create_protection(
    forge: Embedded, owner: str, repo: str, body: Protection, _: Admin
) -> dict[str, Any]:
    branch = body.rule_name or body.branch_name
    if not branch:
        raise ForgeError("rule_name is required", 422)
    if await forge.get_protection(owner, repo, branch) is not None:
        raise ForgeError(f"branch protection {branch!r} already exists", 403)
    return await save_protection(forge, owner, repo, branch, body.model_dump())


@router.patch(R + "/branch_protections/{name}")
async def edit_protection(
    forge: Embedded, owner: str, repo: str, name: str, body: Protection, _: Admin
) -> dict[str, Any]:
    current = await forge.get_protection(owner, repo, name)
    if current is None:
        raise ForgeError(f"no branch protection {name!r}", 404)
    fields = {**shapes.protection_json(name, current), **body.model_dump(exclude_unset=True)}
    return await save_protection(forge, owner, repo, name, fields)


@router.delete(R + "/branch_protections/{name}", status_code=204)
async def delete_protection(forge: Embedded, owner: str, repo: str, name: str, _: Admin) -> Response:
    if not await forge.store.delete_protection(f"{owner}/{repo}", name):
        raise ForgeError(f"no branch protection {name!r}", 404)
    return Response(status_code=204)
