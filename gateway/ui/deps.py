"""Who is asking, for every UI route: declared once (``UiDep``, ``ActingDep``), imported by each router.

``UiDep``: a logged-in operator (cookie session or bearer token); ``ActingDep``: the same, for a request
that changes something (the CSRF check of ``UiAuth.csrf_user`` as well)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from gateway.services import UI
from gateway.ui.auth import UiUser


async def ui_user(request: Request) -> UiUser:
    return await request.app.state.ctx.services.get(UI).auth.user(request)


async def acting_user(request: Request) -> UiUser:
    return await request.app.state.ctx.services.get(UI).auth.csrf_user(request)


UiDep = Annotated[UiUser, Depends(ui_user)]
ActingDep = Annotated[UiUser, Depends(acting_user)]
