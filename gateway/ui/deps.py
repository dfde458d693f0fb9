"""What every UI route is handed, declared once (``UiDep``, ``ActingDep``, ``UiSvc``) and imported by
each router.

``UiDep``: a logged-in operator (cookie session or bearer token); ``ActingDep``: the same, for a request
that changes something (the CSRF check of ``UiAuth.csrf_user`` as well); ``UiSvc``: the UI's service
(rendering, the in-process API, swarm control)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from fastapi import Depends, Request

from gateway.deps import provided
from gateway.services import UI
from gateway.ui.auth import UiUser

if TYPE_CHECKING:
    from gateway.ui.service import UiService


async def ui_user(request: Request) -> UiUser:
    return await request.app.state.ctx.services.get(UI).auth.user(request)


async def acting_user(request: Request) -> UiUser:
    return await request.app.state.ctx.services.get(UI).auth.csrf_user(request)


UiDep = Annotated[UiUser, Depends(ui_user)]
ActingDep = Annotated[UiUser, Depends(acting_user)]
UiSvc = Annotated["UiService", Depends(provided(UI))]
