"""``kb_plugin``: the knowledge base's MCP tools (``kb_search``, ``kb_read``) and REST under ``/api/kb``.

Register after the forge plugin: ``create_app(settings, plugins=[forge_plugin, ..., kb_plugin])``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Query, Request
from mcp.server.mcpserver.exceptions import ToolError

from gateway.auth import current_principal, require_operator
from gateway.context import GatewayContext
from gateway.forge.models import ForgeError
from gateway.kb.service import KBSettings, KnowledgeBase, SeedFiles
from gateway.mcp_server import caller
from gateway.principals import Principal

log = logging.getLogger("kswarm.kb")

Caller = Annotated[Principal, Depends(current_principal)]
Operator = Annotated[Principal, Depends(require_operator)]


def kb_of(request: Request) -> KnowledgeBase:
    return request.app.state.ctx.extras["kb"]


KB = Annotated[KnowledgeBase, Depends(kb_of)]


def build_kb_router() -> APIRouter:
    r = APIRouter(prefix="/api/kb", tags=["kb"])

    @r.get("", summary="The knowledge repo: head commit of its protected branch, notes, passages")
    async def info(kb: KB, _: Caller) -> dict[str, Any]:
        return await kb.info()

    @r.get("/search", summary="Ranked passages (BM25) from notes merged into the protected branch")
    async def search(
        kb: KB,
        _: Caller,
        q: Annotated[str, Query(min_length=1, max_length=500, description="Search words.")],
        limit: Annotated[int, Query(ge=1, le=50)] = 5,
    ) -> dict[str, Any]:
        return await kb.search(q, limit)

    @r.get("/files/{path:path}", summary="One note as merged (protected branch head)")
    async def read(path: str, kb: KB, _: Caller) -> dict[str, Any]:
        return await kb.read(path)

    @r.post("/seed", summary="Create the knowledge repo and seed it with the project's notes (operators)")
    async def seed(kb: KB, _: Operator) -> dict[str, Any]:
        info, commit = await kb.ensure()
        return {"repo": info.full_name, "clone_url": info.clone_url, "seeded": commit}

    return r


def register_kb_tools(mcp: Any, kb: KnowledgeBase) -> None:
    def fail(exc: ForgeError) -> ToolError:
        return ToolError(f"{exc} (HTTP {exc.status})")

    @mcp.tool(
        name="kb_search",
        description="Search the knowledge base (merged notes only): ranked passages with file, line, commit.",
    )
    async def kb_search(query: str, limit: int = 5) -> dict[str, Any]:
        caller()
        try:
            return await kb.search(query, limit)
        except ForgeError as exc:
            raise fail(exc) from exc

    @mcp.tool(name="kb_read", description="Read one merged knowledge-base note by its file path.")
    async def kb_read(file: str) -> dict[str, Any]:
        caller()
        try:
            return await kb.read(file)
        except ForgeError as exc:
            raise fail(exc) from exc


def kb_plugin(
    app: FastAPI,
    ctx: GatewayContext,
    mcp: Any,
    settings: KBSettings | None = None,
    seed_files: SeedFiles | None = None,
) -> Callable[[], AbstractAsyncContextManager[None]]:
    settings = settings or KBSettings()
    kb = KnowledgeBase(ctx, settings, seed_files)
    ctx.extras["kb"] = kb
    app.include_router(build_kb_router())
    register_kb_tools(mcp, kb)

    @contextlib.asynccontextmanager
    async def lifespan() -> AsyncIterator[None]:
        if settings.ensure_on_start:
            try:
                await kb.ensure()
            except (ForgeError, OSError) as exc:  # the gateway still serves; the first use retries
                log.error("cannot ensure the knowledge repo %s: %s", settings.repo, exc)
        yield

    return lifespan
