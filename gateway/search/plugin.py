"""``SearchPlugin`` (``search``): ``GET /api/search/messages`` and the MCP tool ``chat_search``.

Any principal searches what it may read (DMs: their two members and operators). Settings
(``KSWARM_SEARCH_``): ``PATH`` (default ``$KSWARM_HOME/search/messages.sqlite3``).
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from gateway.context import GatewayContext
from gateway.deps import AnyPrincipal, provided
from gateway.errors import BadRequest
from gateway.plugin import Contribution, McpTools, Plugin
from gateway.principals import Principal
from gateway.search.feeder import BATCH_DELAY_S, SearchFeeder
from gateway.search.index import Hit, SearchIndex
from gateway.search.query import parse_query
from gateway.services import ServiceKey


class SearchSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="KSWARM_SEARCH_", extra="ignore")

    path: Path | None = Field(
        None, description="The SQLite file (default $KSWARM_HOME/search/messages.sqlite3)."
    )
    batch_delay_s: float = Field(
        BATCH_DELAY_S,
        ge=0,
        le=5,
        description="How long new messages gather before they are indexed in one transaction: one "
        "write per batch instead of one per message; a search sees a message at most this much later.",
    )


class SearchHit(BaseModel):
    id: str = Field(description="Message id.")
    channel: str
    sender: str
    ts: float
    kind: str = Field(description="message or notice.")
    activity: str = Field(description="chat, pr, job, gate or ops.")
    thread: str | None = None
    mentions: list[str] = Field(default_factory=list)
    text: str
    snippet_html: str = Field(description="The matching passage, escaped, matches in <mark>.")
    rank: float = Field(description="bm25 (lower is better).")


class SearchPage(BaseModel):
    query: str
    total: int = Field(description="Matches the caller may read, in all.")
    offset: int
    limit: int
    hits: list[SearchHit]


Order = Literal["rank", "newest"]


class SearchService:
    def __init__(self, index: SearchIndex, feeder: SearchFeeder) -> None:
        self.index = index
        self.feeder = feeder

    async def search(
        self,
        principal: Principal,
        q: str,
        channel: str | None = None,
        sender: str | None = None,
        kind: str | None = None,
        limit: int = 20,
        offset: int = 0,
        order: Order = "rank",
    ) -> SearchPage:
        parsed = parse_query(q)
        parsed.channel = channel or parsed.channel
        parsed.sender = sender or parsed.sender
        parsed.kind = kind or parsed.kind
        try:
            total, hits = await self.index.search(principal, parsed, limit, offset, order)
        except sqlite3.OperationalError as exc:  # a query FTS5 still refuses: the asker's, not ours
            raise BadRequest(f"cannot search for {q!r}: {exc}") from exc
        return SearchPage(query=q, total=total, offset=offset, limit=limit, hits=[hit(h) for h in hits])


def hit(h: Hit) -> SearchHit:
    return SearchHit(**h.__dict__)


SEARCH: ServiceKey[SearchService] = ServiceKey("search index", "search")
Svc = Annotated[SearchService, Depends(provided(SEARCH))]


router = APIRouter(tags=["search"])


@router.get(
    "/api/search/messages",
    response_model=SearchPage,
    summary="Full-text search over all history you may read (ranked, highlighted, paged)",
)
async def search(
    svc: Svc,
    who: AnyPrincipal,
    q: Annotated[
        str,
        Query(
            min_length=1,
            max_length=500,
            description='Words, "phrases", prefix*, from:<sender>, in:<channel>, kind:<chat|pr|job|gate|ops>',
        ),
    ],
    channel: Annotated[str | None, Query(max_length=200)] = None,
    sender: Annotated[str | None, Query(max_length=64)] = None,
    kind: Annotated[str | None, Query(max_length=16)] = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    offset: Annotated[int, Query(ge=0, le=100_000)] = 0,
    order: Order = "rank",
) -> SearchPage:
    return await svc.search(who, q, channel, sender, kind, limit, offset, order)


class SearchPlugin(Plugin[SearchSettings]):
    name = "search"
    settings_model = SearchSettings
    provides = (SEARCH,)

    def contribute(self, ctx: GatewayContext) -> Contribution:
        index = SearchIndex(self.settings.path or ctx.settings.home / "search" / "messages.sqlite3")
        svc = SearchService(
            index, SearchFeeder(ctx.redis, ctx.principals, index, self.settings.batch_delay_s)
        )

        @contextlib.asynccontextmanager
        async def lifespan() -> AsyncIterator[None]:
            try:
                yield
            finally:
                await index.close()

        return Contribution(
            services={SEARCH: svc},
            routers=[router],
            tools=search_tools(svc),
            background={"kswarm-search-feeder": svc.feeder.run},
            lifespan=lifespan,
        )


def search_tools(svc: SearchService) -> McpTools:
    from gateway.mcp_server import caller

    tools = McpTools()

    @tools.tool(
        name="chat_search",
        description='Search every message you can read (all history, ranked): words, "phrases", prefix*, '
        "from:<sender>, in:<channel>. Returns matches with a highlighted snippet; page with offset.",
    )
    async def chat_search(
        query: str, channel: str | None = None, sender: str | None = None, limit: int = 10, offset: int = 0
    ) -> dict[str, Any]:
        page = await svc.search(
            caller(), query, channel, sender, None, max(1, min(limit, 50)), max(0, offset)
        )
        return page.model_dump()

    return tools
