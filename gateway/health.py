"""``/healthz``: whether this gateway can serve right now (no auth; what probes, compose's healthchecks,
``kswarm up`` and ``kswarm ps`` ask). Truthful by status code, so a probe needs no body parsing:

- **200** only when every required component is healthy;
- **503** naming the failing component while one is down (Redis does not answer in time, or refuses
  writes for another reason);
- **507** ``disk full at <path>`` when a place the gateway writes is full: its home (repos, sockets,
  tokens) or Redis's directory (Redis then refuses every write: ``aof_last_write_status:err``).

The body always has ``ok``, ``redis`` (kept for older clients), ``components`` (name -> ``ok`` or the
problem) and, when not healthy, ``failing`` (the first failing component) and ``detail`` (its line).
"""

from __future__ import annotations

import asyncio
import os
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from gateway.redis_facade import StrRedis

REDIS_TIMEOUT_S = 1.0  # a hung Redis must not hang the probe
MIN_FREE_BYTES = 16 << 20  # less than this left where we write is a full disk (16 MiB)
MIN_FREE_INODES = 64


@dataclass(frozen=True)
class Problem:
    component: str
    status: int
    detail: str


def disk_full(path: Path) -> bool:
    """Whether ``path``'s filesystem has (almost) no room or inodes left for us."""
    try:
        st = os.statvfs(path)
    except OSError:
        return False  # not there (yet): nothing to fill
    if st.f_bavail * st.f_frsize < MIN_FREE_BYTES:
        return True
    return st.f_files > 0 and st.f_favail < MIN_FREE_INODES


def local_redis_dir(url: str) -> Path | None:
    """The directory of a Redis reached by a unix socket (the embedded one keeps its AOF there)."""
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme != "unix":
        return None
    return Path(urllib.parse.unquote(parsed.path)).parent


async def check_redis(redis: StrRedis, redis_dir: Path | None) -> Problem | None:
    try:
        async with asyncio.timeout(REDIS_TIMEOUT_S):
            await redis.ping()
            persistence = await redis.info("persistence")
    except TimeoutError:
        return Problem("redis", 503, f"redis: no answer within {REDIS_TIMEOUT_S:g} s")
    except Exception as exc:  # a health check reports, it does not raise
        return Problem("redis", 503, f"redis: {type(exc).__name__}: {exc}"[:300])
    if persistence.get("aof_last_write_status", "ok") != "ok":
        where = redis_dir or "redis's dir"
        if redis_dir is not None and not disk_full(redis_dir):
            return Problem("redis", 503, f"redis: cannot write its append-only file in {where}")
        return Problem("disk", 507, f"disk full at {where} (redis refuses writes)")
    return None


def check_disk(paths: list[Path]) -> Problem | None:
    for path in paths:
        if disk_full(path):
            return Problem("disk", 507, f"disk full at {path}")
    return None


async def health(request: Request) -> tuple[int, dict[str, Any]]:
    ctx = request.app.state.ctx
    redis_dir = local_redis_dir(ctx.settings.redis_url)
    problems = [
        p
        for p in (
            await check_redis(ctx.redis, redis_dir),
            check_disk([Path(ctx.settings.home), *([redis_dir] if redis_dir else [])]),
        )
        if p is not None
    ]
    components = {"redis": "ok", "disk": "ok"}
    for p in problems:
        components[p.component] = p.detail
    body: dict[str, Any] = {
        "ok": not problems,
        "redis": components["redis"] == "ok",
        "components": components,
    }
    if not problems:
        return 200, body
    first = min(problems, key=lambda p: (p.status != 507, p.component))  # a full disk explains the rest
    body |= {"failing": first.component, "detail": first.detail}
    return first.status, body


router = APIRouter()


@router.get(
    "/healthz",
    summary="Health (no auth): 200 healthy, 503 a component down, 507 disk full",
    responses={503: {"description": "A required component is down"}, 507: {"description": "Disk full"}},
)
async def healthz(request: Request) -> JSONResponse:
    status, body = await health(request)
    return JSONResponse(body, status_code=status)
