"""``/healthz``: whether this gateway can serve (no auth; what probes and ``kswarm up`` ask)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request


def build_health_router() -> APIRouter:
    r = APIRouter()

    @r.get("/healthz", summary="Liveness (no auth)")
    async def healthz(request: Request) -> dict[str, Any]:
        ctx = request.app.state.ctx
        try:
            redis_ok = bool(await ctx.redis.ping())
        except Exception:  # a health check reports, it does not raise
            redis_ok = False
        return {"ok": redis_ok, "redis": redis_ok}

    return r
