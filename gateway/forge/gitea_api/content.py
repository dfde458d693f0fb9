"""Gitea-shaped repository content and webhooks of the embedded forge, under ``/api/v1``.

Branches (``GET /repos/{o}/{r}/branches/{branch}``), commits (``GET …/git/commits/{sha}``), contents
(``GET …/contents/{path}?ref=``), trees (``GET …/git/trees/{sha}?recursive=``), blobs
(``GET …/git/blobs/{sha}``), change-files (``POST …/contents``) and repository webhooks
(``GET/POST …/hooks``, ``DELETE …/hooks/{id}``), with Gitea's fields, paging and error statuses.
Change-files applies Gitea's per-file rules (create fails on an existing path, update and delete need
the file's current blob sha) and then kswarm's push rules (``EmbeddedForge.commit_files``); an
``author`` or ``committer`` other than the caller is refused, where Gitea would record it.
"""

from __future__ import annotations

import base64
import binascii
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Response
from pydantic import BaseModel, ConfigDict, Field

from gateway.errors import ForgeError
from gateway.forge.embedded.forge import EmbeddedForge
from gateway.forge.gitea import content_shapes as cshapes
from gateway.forge.gitea_api.auth import Actor, Admin, Embedded
from gateway.forge.hooks_out import HOOK_EVENTS, HookStore
from gateway.forge.names import check_branch, check_path

TREE_PAGE_MAX = 1000  # Gitea's DEFAULT_GIT_TREES_PER_PAGE


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore")


class Identity(_Body):
    name: str = ""
    email: str = ""


class FileOperation(_Body):
    operation: Literal["create", "update", "upload", "rename", "delete"]
    path: str = Field(min_length=1, max_length=500)
    content: str = ""
    sha: str = ""
    from_path: str = ""


class ChangeFiles(_Body):
    files: list[FileOperation] = Field(min_length=1)
    message: str = ""
    branch: str = ""
    new_branch: str = ""
    author: Identity = Field(default_factory=Identity)
    committer: Identity = Field(default_factory=Identity)


class HookConfig(_Body):
    url: str
    content_type: str = "json"
    secret: str = ""
    http_method: str = "post"


class CreateHook(_Body):
    type: str
    config: HookConfig
    events: list[str] = Field(default_factory=lambda: ["push"])
    branch_filter: str = ""
    active: bool = False


def decode(content: str, path: str) -> bytes:
    try:
        return base64.b64decode(content, validate=True)
    except (binascii.Error, ValueError):
        raise ForgeError(f"illegal base64 data for {path}", 422) from None


router = APIRouter(prefix="/api/v1", tags=["gitea"])
R = "/repos/{owner}/{repo}"


async def commit_of(forge: EmbeddedForge, owner: str, repo: str, ref: str | None) -> str:
    ref = ref or (await forge.repo_info(owner, repo)).default_branch
    sha = await forge.resolve_ref(owner, repo, ref)
    if sha is None:
        raise ForgeError(f"object does not exist [id: {ref}, rel_path: ]", 404)
    return sha


@router.get(R + "/branches/{branch:path}")
async def get_branch(forge: Embedded, owner: str, repo: str, branch: str, _: Actor) -> dict[str, Any]:
    await forge.repo_info(owner, repo)
    sha = await forge.bare(owner, repo).branch_sha(branch)
    if sha is None:
        raise ForgeError(f"branch does not exist [name: {branch}]", 404)
    commit = await forge.get_commit(owner, repo, sha)
    policy = await forge.get_protection(owner, repo, branch)
    return cshapes.branch_json(branch, commit, policy, f"{forge.base_url}/{owner}/{repo}")


@router.get(R + "/git/commits/{sha}")
async def get_commit(forge: Embedded, owner: str, repo: str, sha: str, _: Actor) -> dict[str, Any]:
    found = await forge.resolve_ref(owner, repo, sha)
    if found is None:
        raise ForgeError(f"object does not exist [id: {sha}, rel_path: ]", 404)
    return cshapes.commit_json(await forge.get_commit(owner, repo, found), f"{forge.base_url}/{owner}/{repo}")


async def contents(forge: EmbeddedForge, owner: str, repo: str, path: str, ref: str | None) -> Any:
    """A file's ``ContentsResponse`` (base64 content), or a directory's listing (no content)."""
    sha = await commit_of(forge, owner, repo, ref)
    bare = forge.bare(owner, repo)
    path = path.strip("/")
    if path:
        entry = await bare.entry(sha, path)
        if entry is not None:
            (content,) = await bare.read_blobs([entry.sha])
            return cshapes.contents_json(entry, content, sha, forge.base_url, owner, repo)
    listing = await bare.tree_listing(sha, recursive=False, directory=path)
    if path and not listing:
        raise ForgeError(f"object does not exist [id: {sha}, rel_path: {path}]", 404)
    return [cshapes.listing_json(e, sha, forge.base_url, owner, repo) for e in listing]


@router.get(R + "/contents")
async def list_root(forge: Embedded, owner: str, repo: str, _: Actor, ref: str | None = None) -> Any:
    return await contents(forge, owner, repo, "", ref)


@router.get(R + "/contents/{filepath:path}")
async def get_contents(
    forge: Embedded, owner: str, repo: str, filepath: str, _: Actor, ref: str | None = None
) -> Any:
    return await contents(forge, owner, repo, filepath, ref)


@router.get(R + "/git/trees/{sha}")
async def get_tree(
    forge: Embedded,
    owner: str,
    repo: str,
    sha: str,
    _: Actor,
    recursive: bool = False,
    page: Annotated[int, Query(ge=1)] = 1,
    per_page: Annotated[int, Query(ge=1)] = TREE_PAGE_MAX,
) -> dict[str, Any]:
    bare = forge.bare(owner, repo)
    await forge.repo_info(owner, repo)
    kind = await bare.object_type(sha) if len(sha) >= 4 else None
    if kind not in ("commit", "tree"):
        raise ForgeError(f"sha not provided or not a tree: {sha}", 400 if kind else 404)
    entries = await bare.tree_listing(sha, recursive)
    size = min(per_page, TREE_PAGE_MAX)
    chosen = entries[(page - 1) * size : page * size]
    tree_sha = (await bare.git("rev-parse", f"{sha}^{{tree}}")).strip()
    return cshapes.tree_json(
        tree_sha, chosen, page, len(entries), page * size < len(entries), forge.base_url, owner, repo
    )


@router.get(R + "/git/blobs/{sha}")
async def get_blob(forge: Embedded, owner: str, repo: str, sha: str, _: Actor) -> dict[str, Any]:
    bare = forge.bare(owner, repo)
    await forge.repo_info(owner, repo)
    if await bare.object_type(sha) != "blob":
        raise ForgeError(f"object does not exist [id: {sha}, rel_path: ]", 404)
    (content,) = await bare.read_blobs([sha])
    return cshapes.blob_json(sha, content, forge.base_url, owner, repo)


@router.post(R + "/contents", status_code=201)
async def change_files(
    forge: Embedded, owner: str, repo: str, body: ChangeFiles, actor: Actor
) -> dict[str, Any]:
    for field, value in (("branch", body.branch), ("new_branch", body.new_branch)):
        if value:
            check_branch(value, field)
    for i, op in enumerate(body.files):
        check_path(op.path, f"files[{i}].path")
        if op.from_path:
            check_path(op.from_path, f"files[{i}].from_path")
    for who in (body.author, body.committer):
        if who.email and who.email.lower() != actor.email.lower():
            raise ForgeError(
                f"author and committer are the caller here (<{actor.email}>), not <{who.email}>", 422
            )
    branch = body.branch or (await forge.repo_info(owner, repo)).default_branch
    bare = forge.bare(owner, repo)
    head = await bare.branch_sha(branch)
    if head is None:
        raise ForgeError(f"branch does not exist [name: {branch}]", 404)
    changes: dict[str, bytes | None] = {}
    for op in body.files:
        current = await bare.entry(head, op.path)
        if op.operation == "create" and current is not None:
            raise ForgeError(f"repository file already exists [path: {op.path}]", 422)
        if op.operation in ("update", "delete", "rename"):
            source = op.from_path or op.path if op.operation != "delete" else op.path
            existing = await bare.entry(head, source)
            if existing is None:
                raise ForgeError(f"repository file does not exist [path: {source}]", 404)
            if not op.sha:
                raise ForgeError("a SHA or commit ID must be provided when updating a file", 422)
            if op.sha != existing.sha:
                raise ForgeError(f"sha does not match [given: {op.sha}, expected: {existing.sha}]", 422)
            if op.operation == "rename" or (op.from_path and op.from_path != op.path):
                changes[source] = None
        changes[op.path] = None if op.operation == "delete" else decode(op.content, op.path)
    message = body.message or "Update " + ", ".join(op.path for op in body.files)
    commit = await forge.commit_files(
        actor.name, owner, repo, branch, changes, message,
        expected_head=head, new_branch=body.new_branch or None,
    )  # fmt: skip
    info = await forge.get_commit(owner, repo, commit)
    written = [op.path for op in body.files if op.operation != "delete"]
    entries = [await bare.entry(commit, path) for path in written]
    return cshapes.files_json(info, [e for e in entries if e], forge.base_url, owner, repo)


@router.get(R + "/hooks")
async def list_hooks(forge: Embedded, owner: str, repo: str, _: Admin) -> list[dict[str, Any]]:
    await forge.repo_info(owner, repo)
    return [h.public() for h in await HookStore(forge.redis).list(f"{owner}/{repo}")]


@router.post(R + "/hooks", status_code=201)
async def create_hook(forge: Embedded, owner: str, repo: str, body: CreateHook, _: Admin) -> dict[str, Any]:
    await forge.repo_info(owner, repo)
    if body.type not in ("gitea", "gogs"):
        raise ForgeError(f"invalid hook type {body.type!r}: this forge delivers gitea hooks", 422)
    if body.config.content_type != "json":
        raise ForgeError("content_type must be json", 422)
    unknown = sorted(set(body.events) - set(HOOK_EVENTS))
    if unknown:
        raise ForgeError(f"unknown hook events {unknown}: {', '.join(HOOK_EVENTS)}", 422)
    hook = await HookStore(forge.redis).add(
        f"{owner}/{repo}",
        body.config.url,
        body.config.secret,
        body.events,
        body.active,
        body.branch_filter,
    )
    return hook.public()


@router.delete(R + "/hooks/{hook_id}", status_code=204)
async def delete_hook(forge: Embedded, owner: str, repo: str, hook_id: int, _: Admin) -> Response:
    if not await HookStore(forge.redis).delete(f"{owner}/{repo}", hook_id):
        raise ForgeError(f"hook does not exist [id: {hook_id}]", 404)
    return Response(status_code=204)
