"""``KBPlugin`` (``kb``): the knowledge base's MCP tools (``kb_search``, ``kb_read``) and REST under
``/api/kb``. Provides the knowledge base; requires the forge (the notes are a repo in it).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query

from gateway.context import GatewayContext
from gateway.deps import AnyPrincipal, OperatorOnly, provided
from gateway.errors import ForgeError
from gateway.kb.service import KBSettings, KnowledgeBase, SeedFiles
from gateway.mcp_server import caller
from gateway.plugin import Contribution, McpTools, Plugin
from gateway.services import FORGE, KNOWLEDGE_BASE

log = logging.getLogger("kswarm.kb")

KB = Annotated[KnowledgeBase, Depends(provided(KNOWLEDGE_BASE))]


router = APIRouter(prefix="/api/kb", tags=["kb"])


@router.get("", summary="The knowledge repo: head commit of its protected branch, notes, passages")
async def info(kb: KB, _: AnyPrincipal) -> dict[str, Any]:
    return await kb.info()


@router.get("/search", summary="Ranked passages (BM25) from notes merged into the protected branch")
async def search(
    kb: KB,
    _: AnyPrincipal,
    q: Annotated[str, Query(min_length=1, max_length=500, description="Search words.")],
    limit: Annotated[int, Query(ge=1, le=50)] = 5,
) -> dict[str, Any]:
    return await kb.search(q, limit)


@router.get("/files/{path:path}", summary="One note as merged (protected branch head)")
async def read(path: str, kb: KB, _: AnyPrincipal) -> dict[str, Any]:
    return await kb.read(path)


@router.get(
    "/history/{path:path}", summary="The protected branch's commits that changed one note, newest first"
)
async def history(
    path: str, kb: KB, _: AnyPrincipal, limit: Annotated[int, Query(ge=1, le=100)] = 20
) -> dict[str, Any]:
    return await kb.history(path, limit)


@router.post("/seed", summary="Create the knowledge repo and seed it with the project's notes (operators)")
async def seed(kb: KB, _: OperatorOnly) -> dict[str, Any]:
    info, commit = await kb.ensure()
    return {"repo": info.full_name, "clone_url": info.clone_url, "seeded": commit}


def kb_tools(kb: KnowledgeBase) -> McpTools:
    tools = McpTools()

    @tools.tool(
        name="kb_search",
        description="Search the knowledge base (merged notes only): ranked passages with file, line, commit.",
    )
    async def kb_search(query: str, limit: int = 5) -> dict[str, Any]:
        caller()
        return await kb.search(query, limit)

    @tools.tool(name="kb_read", description="Read one merged knowledge-base note by its file path.")
    async def kb_read(file: str) -> dict[str, Any]:
        caller()
        return await kb.read(file)

    return tools


class KBPlugin(Plugin[KBSettings]):
    name = "kb"
    settings_model = KBSettings
    provides = (KNOWLEDGE_BASE,)
    requires = (FORGE,)

    def __init__(self, settings: KBSettings | None = None, seed_files: SeedFiles | None = None) -> None:
        super().__init__(settings)
        self.seed_files = seed_files  # default: the catalogue's kb_seed notes

    def contribute(self, ctx: GatewayContext) -> Contribution:
        settings = self.settings
        kb = KnowledgeBase(ctx, settings, self.seed_files)

        @contextlib.asynccontextmanager
        async def lifespan() -> AsyncIterator[None]:
            if settings.ensure_on_start:
                try:
                    await kb.ensure()
                except (ForgeError, OSError) as exc:  # the gateway still serves; the first use retries
                    log.error("cannot ensure the knowledge repo %s: %s", settings.repo, exc)
            yield

        return Contribution(
            services={KNOWLEDGE_BASE: kb}, routers=[router], tools=kb_tools(kb), lifespan=lifespan
        )
