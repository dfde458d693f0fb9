"""Git smart HTTP at ``/git/<org>/<repo>.git``: ``git http-backend`` as an asyncio CGI behind FastAPI.

Every request is authenticated with the principal's token: Basic (the token as password, the user
name ignored: identity comes from the token) or Bearer. The pusher's name, e-mail and kind travel to
the receive hooks in the CGI environment; what they accept is reported back through a per-request
push log, so the forge can dismiss stale approvals and wake the gate. A push also gets the push
limits of ``ForgeSettings`` (``push_env``): git's own pack limit and object check as config
parameters, the blob, file and branch limits for the hook. Refusals are the gateway's
errors, answered by its one handler like any route's (``{"detail", "code"}``; a 401 with the Basic
challenge, on which git asks its credential helper).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

from fastapi import APIRouter, Request, Response
from fastapi.responses import StreamingResponse

from gateway.auth import token_from_headers
from gateway.deps import Ctx
from gateway.errors import ForgeError, Unauthorized
from gateway.forge.embedded.forge import EmbeddedForge
from gateway.git.core import git_env
from gateway.principals import Principal
from gateway.services import FORGE, FORGE_SETTINGS

log = logging.getLogger("kswarm.forge.git")
SERVICES = {("GET", "info/refs"), ("POST", "git-upload-pack"), ("POST", "git-receive-pack")}
CHUNK = 64 * 1024
CHALLENGE = {"WWW-Authenticate": 'Basic realm="kswarm git"'}


async def authenticate(request: Request) -> Principal:
    """The principal behind the token; 401 with a Basic challenge so git asks its credential helper."""
    token = token_from_headers(request.headers)
    if token is None:
        raise Unauthorized("authentication required: the token is the password", challenge=CHALLENGE)
    principal = await request.app.state.ctx.principals.verify(token)
    if principal is None:
        raise Unauthorized("invalid or revoked token", challenge=CHALLENGE)
    return principal


def parse_cgi_headers(raw: bytes) -> tuple[int, dict[str, str]]:
    status = 200
    headers: dict[str, str] = {}
    for line in raw.decode("latin-1").splitlines():
        name, _, value = line.partition(":")
        name, value = name.strip(), value.strip()
        if not name:
            continue
        if name.lower() == "status":
            status = int(value.split()[0])
        else:
            headers[name] = value
    return status, headers


async def run_cgi(
    request: Request, env: dict[str, str], on_exit: Callable[[int], Awaitable[None]] | None = None
) -> Response:
    """Run ``git http-backend``: stream the body in, then stream its answer out.

    The request body is consumed completely (while stdout is drained into a queue so the child never
    blocks) before the response starts, so the response never competes with the request for
    ``receive()``.
    """
    proc = await asyncio.create_subprocess_exec(
        "git",
        "http-backend",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    assert proc.stdin and proc.stdout and proc.stderr
    stdin, stdout, stderr = proc.stdin, proc.stdout, proc.stderr
    queue: asyncio.Queue[bytes | None] = asyncio.Queue()

    async def feed() -> None:
        try:
            async for chunk in request.stream():
                if chunk:
                    stdin.write(chunk)
                    await stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the backend stopped reading: its answer says why
        finally:
            with contextlib.suppress(Exception):
                stdin.close()

    async def pump() -> None:
        while chunk := await stdout.read(CHUNK):
            queue.put_nowait(chunk)
        queue.put_nowait(None)

    pumper = asyncio.create_task(pump())
    errors = asyncio.create_task(stderr.read())
    try:
        await feed()
        head = b""
        while b"\r\n\r\n" not in head and b"\n\n" not in head:
            chunk = await queue.get()
            if chunk is None:
                break
            head += chunk
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        pumper.cancel()
        errors.cancel()
        raise
    sep = b"\r\n\r\n" if b"\r\n\r\n" in head else b"\n\n"
    raw_headers, _, first = head.partition(sep)
    status, headers = parse_cgi_headers(raw_headers)

    async def body() -> AsyncIterator[bytes]:
        try:
            if first:
                yield first
            while (chunk := await queue.get()) is not None:
                yield chunk
            rc = await proc.wait()
            err = (await errors).decode(errors="replace").strip()
            if err:
                log.info("http-backend: %s", err)
            if on_exit is not None:
                await on_exit(rc)
        finally:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
            pumper.cancel()
            errors.cancel()

    return StreamingResponse(body(), status_code=status, headers=headers)


router = APIRouter()


@router.api_route("/git/{org}/{repo}/{rest:path}", methods=["GET", "POST"], include_in_schema=False)
async def git_http(org: str, repo: str, rest: str, request: Request, ctx: Ctx) -> Response:
    principal = await authenticate(request)
    forge = ctx.services.get(FORGE)
    if not isinstance(forge, EmbeddedForge):
        raise ForgeError("git over HTTP is served by the embedded forge only", 404)
    limits = ctx.services.get(FORGE_SETTINGS)
    tmp_dir = forge.root / ".tmp"
    name = repo.removesuffix(".git")
    if (request.method, rest) not in SERVICES:
        raise ForgeError("only git smart HTTP is served here", 404)
    if await forge.store.get_repo(f"{org}/{name}") is None:
        raise ForgeError(f"no repository {org}/{name}", 404)
    env = git_env(
        {
            "GIT_PROJECT_ROOT": str(forge.root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "PATH_INFO": f"/{org}/{name}.git/{rest}",
            "QUERY_STRING": request.url.query,
            "REQUEST_METHOD": request.method,
            "CONTENT_TYPE": request.headers.get("content-type", ""),
            "REMOTE_USER": principal.name,
            "REMOTE_ADDR": request.client.host if request.client else "127.0.0.1",
            "KSWARM_PUSHER_EMAIL": principal.email,
            "KSWARM_PUSHER_KIND": principal.kind.value,
        }
    )
    # http-backend inflates gzip request bodies itself when told the encoding.
    for header, var in (
        ("content-encoding", "HTTP_CONTENT_ENCODING"),
        ("git-protocol", "HTTP_GIT_PROTOCOL"),
    ):
        if header in request.headers:
            env[var] = request.headers[header]
    if not (request.method == "POST" and rest == "git-receive-pack"):
        return await run_cgi(request, env)

    tmp_dir.mkdir(parents=True, exist_ok=True)
    push_log = tmp_dir / f"push-{uuid.uuid4().hex}.log"
    env["KSWARM_PUSH_LOG"] = str(push_log)
    env["KSWARM_PROTECTED"] = ",".join(await forge.protected_branches(org, name))
    env.update(limits.push_env(principal.kind.value))  # the push limits (docs/forge.md)

    async def after_push(rc: int) -> None:
        try:
            lines = push_log.read_text().splitlines() if push_log.exists() else []
        finally:
            with contextlib.suppress(OSError):
                os.unlink(push_log)
        updates = [tuple(line.split(" ", 2)) for line in lines if line.count(" ") >= 2]
        if updates:
            await forge.on_push(org, name, principal.name, updates)  # type: ignore[arg-type]

    return await run_cgi(request, env, after_push)
