"""Who may call a route, and what it is handed: the dependency aliases every route uses.

Each principal alias says exactly who passes; anyone else gets 401 (no or a bad token) or 403 (the
wrong kind, naming the kinds that pass). The principal always comes from the token (``gateway.auth``):

- ``AnyPrincipal``: every valid token (agents, operators, workers, the gate);
- ``OperatorOnly``: operators;
- ``WorkerOnly``: job workers (not operators either: only a worker holds a job lease).

Finer rules that depend on the thing acted on (the submitter of a job, the holder of a claim, one's
own usage) are the service's, so that REST and MCP apply the same ones. ``Ctx`` is the app's
``GatewayContext``; ``provided(KEY)`` hands a route the service a plugin provides, typed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, TypeVar

from fastapi import Depends, Request

from gateway.auth import current_principal, require_kind, require_operator
from gateway.context import GatewayContext
from gateway.principals import Principal, PrincipalKind
from gateway.services import ServiceKey

T = TypeVar("T")

AnyPrincipal = Annotated[Principal, Depends(current_principal)]
OperatorOnly = Annotated[Principal, Depends(require_operator)]
WorkerOnly = Annotated[Principal, Depends(require_kind(PrincipalKind.worker))]


def ctx_of(request: Request) -> GatewayContext:
    return request.app.state.ctx


# Dependencies are coroutines: FastAPI runs a plain function in a worker thread, for every request.
async def _ctx(request: Request) -> GatewayContext:
    return request.app.state.ctx


Ctx = Annotated[GatewayContext, Depends(_ctx)]


def provided(key: ServiceKey[T]) -> Callable[[Request], Awaitable[T]]:
    """A dependency: the service ``key`` names (``Annotated[JobService, Depends(provided(JOB_SERVICE))]``)."""

    async def service(request: Request) -> T:
        return request.app.state.ctx.services.get(key)

    return service
